"""What the estimators return: the two-output estimators' named tuples, and the context an ``out=`` is written in
(shared by the API, the torch backend and the Triton ops)."""
from __future__ import annotations

import contextlib
from typing import NamedTuple, Sequence

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


def writing_into(outs: Sequence[torch.Tensor]):
    """The context in which PyTorch ops write the ``out=`` buffers ``outs``: ``torch.inference_mode()`` when one of
    them was made under inference mode and the caller is outside it (PyTorch refuses in-place writes to such a
    tensor there; the Triton kernels, which write raw memory, take it as it is), else no context. Not for
    torch.compile, which refuses ``is_inference()`` while it traces."""
    if any(o.is_inference() for o in outs) and not torch.is_inference_mode_enabled():
        return torch.inference_mode()
    return contextlib.nullcontext()
