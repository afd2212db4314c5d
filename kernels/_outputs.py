"""The named tuples that the two-output estimators return (shared by the API and the Triton ops)."""
from __future__ import annotations

from typing import NamedTuple

import torch


class GAEOutput(NamedTuple):
    advantages: torch.Tensor
    returns: torch.Tensor


class VTraceOutput(NamedTuple):
    vs: torch.Tensor
    pg_advantages: torch.Tensor
