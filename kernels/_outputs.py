"""The named tuples that the two-output estimators return (shared by the API and the Triton ops)."""
from __future__ import annotations

from typing import NamedTuple

import torch


class GAEOutput(NamedTuple):
    """``advantages`` and ``returns`` (value targets, ``advantages + values``), both ``[T, *B]`` in rewards' dtype."""

    advantages: torch.Tensor
    returns: torch.Tensor


class VTraceOutput(NamedTuple):
    """``vs`` (V-trace value targets) and ``pg_advantages`` (policy-gradient advantages), both ``[T, *B]`` in
    rewards' dtype."""

    vs: torch.Tensor
    pg_advantages: torch.Tensor
