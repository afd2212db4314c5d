"""Argument checks shared by every backend.

Everything here looks only at metadata (types, shapes, dtypes, devices, Python
floats): no tensor values are read, so the checks never synchronise with a GPU.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

BACKENDS = ("auto", "triton", "torch")


def check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def check_unit(name: str, x) -> float:
    """A Python number in [0, 1] (gamma, lambda_)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number in [0, 1], got {x!r}") from None
    if not (0.0 <= f <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    return f


def check_clip(name: str, x) -> float:
    """A positive clip threshold; ``inf`` means no clipping."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {x!r}") from None
    if not (f > 0.0):  # rejects <= 0 and NaN
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return f


def check_leading(name: str, x) -> torch.Size:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError(f"{name} must have shape [T, *B] (at least one dimension), got a 0-d tensor")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")
    return x.shape


def check_tensor(name: str, x, shape, device, kind: str) -> None:
    """kind: 'float' (floating values) or 'flag' (bool / integer / floating 0-1)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
    dt = x.dtype
    if kind == "float":
        if not dt.is_floating_point:
            raise ValueError(f"{name} must have a floating dtype, got {dt}")
    elif dt.is_complex:
        raise ValueError(f"{name} must be bool, integer or floating 0/1 flags, got {dt}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but rewards are on {device}: all tensors must share a device")


def check_bootstrap(bootstrap_value, next_values, required: bool) -> None:
    if bootstrap_value is not None and next_values is not None:
        raise ValueError("give exactly one of bootstrap_value / next_values, not both")
    if required and bootstrap_value is None and next_values is None:
        raise ValueError("one of bootstrap_value ([*B]) or next_values ([T, *B]) is required")


def check_out(name: str, out, shape, dtype, device) -> None:
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype or out.device != device:
        raise ValueError(
            f"{name} must be a {dtype} tensor of shape {list(shape)} on {device}, "
            f"got {out.dtype} {list(out.shape)} on {out.device}")


def compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    """float64 if any floating input is float64, else float32."""
    for t in tensors:
        if t is not None and t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def log_clip(c: float) -> float:
    return math.log(c) if math.isfinite(c) else math.inf
