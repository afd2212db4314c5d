"""Argument checks shared by every backend.

Everything here looks only at metadata (types, shapes, dtypes, devices, Python
floats): no tensor values are read, so the checks never synchronise with a GPU.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import torch

BACKENDS = ("auto", "triton", "torch")
_is_compiling = torch.compiler.is_compiling


def check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _real(name: str, x, allowed: str) -> float:
    # A tensor would need a host sync to read (and a string is a typo): only Python/NumPy reals pass. A 0-d NumPy
    # array counts as a NumPy scalar: torch.compile hands one over for a NumPy scalar made inside a compiled function.
    if type(x).__module__ == "numpy" and type(x).__name__ == "ndarray" and x.ndim == 0 and x.dtype.kind in "iuf":
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a real number (Python or NumPy float or int) {allowed}, "
                         f"got {type(x).__name__} {x!r}")
    try:
        return float(x)
    except OverflowError:  # an int beyond float range
        raise ValueError(f"{name} must be a real number {allowed}, got an {type(x).__name__} beyond the "
                         f"float range") from None


def check_unit(name: str, x) -> float:
    """A Python number in [0, 1] (gamma, lambda_)."""
    f = _real(name, x, "in [0, 1]")
    if not (0.0 <= f <= 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    return f


def check_clip(name: str, x) -> float:
    """A positive clip threshold; ``inf`` means no clipping."""
    f = _real(name, x, "> 0")
    if not (f > 0.0):  # rejects <= 0 and NaN
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return f


def _check_dense(name: str, x: torch.Tensor) -> None:
    # A sparse or MKL-DNN tensor has no strided storage to scan (and torch's own ops reject it with a RuntimeError).
    if x.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (torch.strided) tensor, got layout {x.layout}; "
                         f"use .to_dense()")


# The floating dtypes the kernels read (float8 and others have no arithmetic in Triton's loads): float16 and
# bfloat16 are accumulated in float32.
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_float(name: str, dt: torch.dtype) -> None:
    if dt not in FLOATS:
        raise ValueError(f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got {dt}")


def check_leading(name: str, x) -> torch.Size:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    _check_dense(name, x)
    if x.dim() < 1:
        raise ValueError(f"{name} must have shape [T, *B] (at least one dimension), got a 0-d tensor")
    _check_float(name, x.dtype)
    return x.shape


def check_tensor(name: str, x, shape, device, kind: str, ref: str = "rewards", ref_shape=None) -> None:
    """kind: 'float' (floating values) or 'flag' (bool / integer / floating 0-1). shape and device derive from the
    argument `ref` (rewards, or x for the forward estimators; its shape is ref_shape, default shape), which the
    messages name too: a mismatch may be either argument's fault."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    _check_dense(name, x)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)} "
                         f"({ref} has shape {list(shape if ref_shape is None else ref_shape)})")
    dt = x.dtype
    if kind == "float":
        _check_float(name, dt)
    elif dt.is_complex or (dt.is_floating_point and dt not in FLOATS):
        raise ValueError(f"{name} must be bool, integer or floating 0/1 flags (float16, bfloat16, float32, "
                         f"float64), got {dt}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but {ref} is on {device}: all tensors must share a device")


def check_bootstrap(bootstrap_value, next_values, required: bool) -> None:
    if bootstrap_value is not None and next_values is not None:
        raise ValueError(f"give {'exactly' if required else 'at most'} one of bootstrap_value / next_values, "
                         f"not both")
    if required and bootstrap_value is None and next_values is None:
        raise ValueError("one of bootstrap_value ([*B]) or next_values ([T, *B]) is required")


def check_out(name: str, out, shape, dtype, device) -> None:
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    _check_dense(name, out)
    if out.shape != shape or out.dtype != dtype or out.device != device:
        raise ValueError(
            f"{name} must be a {dtype} tensor of shape {list(shape)} on {device}, "
            f"got {out.dtype} {list(out.shape)} on {out.device}")
    if out.requires_grad:
        raise ValueError(f"{name} must not require grad: the outputs are targets and carry no gradient (give a "
                         f"buffer made without requires_grad)")
    if _self_overlapping(out):
        raise ValueError(f"{name}'s strides must each exceed the span of the dims with smaller strides (strides "
                         f"{list(out.stride())} for shape {list(out.shape)}; a zero stride, as from expand(), and "
                         f"interleaved strides are refused, even ones that never reach one element twice; a "
                         f"contiguous buffer always qualifies)")


def _self_overlapping(x: torch.Tensor) -> bool:
    """Whether two indices of x address the same element: in the order of the strides of the dims of more than
    one element, each stride must exceed the span of the dims before it (sufficient for no overlap, and exact for
    the layouts views produce; a zero stride, as from expand(), always overlaps). Pairwise comparisons instead of
    a sort, so that torch.compile can trace it with symbolic sizes."""
    dims = [(abs(st), sz) for sz, st in zip(x.shape, x.stride()) if sz > 1]
    for i, (stride, _) in enumerate(dims):
        span = 0
        for j, (other, size) in enumerate(dims):
            if other < stride or (other == stride and j < i):
                span += (size - 1) * other
        if stride <= span:
            return True
    return False


def byte_span(x: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] of x's elements in memory (strides are never negative in torch)."""
    last = 0
    for size, stride in zip(x.shape, x.stride()):
        last += (size - 1) * stride
    lo = x.data_ptr()
    return lo, lo + (last + 1) * x.element_size()


def _element_bytes(x: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Sorted addresses of the first bytes of x's elements that start in [lo, hi): an int64 CPU tensor."""
    starts = torch.tensor(x.data_ptr(), dtype=torch.int64)
    for size, stride in zip(x.shape, x.stride()):
        starts = starts.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * (stride * x.element_size())
    starts = starts.reshape(-1)
    return starts[(starts >= lo) & (starts < hi)].sort().values


def _shift_reachable(d: int, dims) -> bool:
    """Whether d = sum(k_i * stride_i) for integers |k_i| < size_i, dims ``[(stride, size), ...]`` by stride
    descending. Where each stride exceeds the span of the smaller ones, at most two k_i fit at each level."""
    if not dims:
        return d == 0
    (stride, size), rest = dims[0], dims[1:]
    reach = sum((sz - 1) * st for st, sz in rest)
    k_lo = max(-(size - 1), -((reach - d) // stride))  # ceil((d - reach) / stride)
    k_hi = min(size - 1, (d + reach) // stride)
    return any(_shift_reachable(d - k * stride, rest) for k in range(k_lo, k_hi + 1))


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a byte of one of a's elements is a byte of one of b's (exact, any shapes, strides and dtypes).

    Tensors whose byte spans are disjoint never do (the usual case, decided from metadata alone). Two views of one
    layout (shape, strides, element size) shifted by a whole number of elements share one iff the shift is a
    combination of the strides with index differences below the sizes, of either sign (searched from the largest
    stride). Any other pair with intersecting spans is decided from the sorted start addresses of both tensors'
    elements inside the intersection (host memory and time in proportion to the elements, not to the bytes)."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device or a.device.type == "meta":  # meta: no memory
        return False
    a_lo, a_hi = byte_span(a)
    b_lo, b_hi = byte_span(b)
    if max(a_lo, b_lo) >= min(a_hi, b_hi):
        return False
    es_a, es_b = a.element_size(), b.element_size()
    if (a.shape == b.shape and a.stride() == b.stride() and es_a == es_b and (b_lo - a_lo) % es_a == 0
            and not _self_overlapping(a)):
        dims = sorted(((st, sz) for sz, st in zip(a.shape, a.stride()) if sz > 1), reverse=True)
        return _shift_reachable((b_lo - a_lo) // es_a, dims)
    # An element of b starting at x meets one of a iff the last start of a at or before x + es_b - 1 lies after
    # x - es_a; only starts that may reach the other's span count.
    starts_a = _element_bytes(a, b_lo - es_a + 1, b_hi)
    starts_b = _element_bytes(b, a_lo - es_b + 1, a_hi)
    if not len(starts_a) or not len(starts_b):
        return False
    last = torch.searchsorted(starts_a, starts_b + (es_b - 1), right=True) - 1
    hit = last >= 0
    return bool((starts_a[last[hit]] + es_a > starts_b[hit]).any())


def compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    """float64 if any floating input is float64, else float32."""
    for t in tensors:
        if t is not None and t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def log_clip(c: float) -> float:
    return math.log(c) if math.isfinite(c) else math.inf


# ----------------------------------------------------------------------------- per-estimator checks
# Tensor checks (run by the torch backend on every call and by the Triton path once per new
# metadata signature) and scalar checks (cached by value on the Triton path).

def _flags(terminated, truncated, shape, dev, ref):
    check_tensor("terminated", terminated, shape, dev, "flag", ref)
    if truncated is not None:
        check_tensor("truncated", truncated, shape, dev, "flag", ref)


def _common(rewards, terminated, truncated, bootstrap_value, next_values):
    shape = check_leading("rewards", rewards)
    dev = rewards.device
    _flags(terminated, truncated, shape, dev, "rewards")
    if bootstrap_value is not None:
        check_tensor("bootstrap_value", bootstrap_value, shape[1:], dev, "float", "rewards", shape)
    if next_values is not None:
        check_tensor("next_values", next_values, shape, dev, "float")
    return shape, dev


def _check_outs(out, names, shape, dtype, dev, inputs):
    """Check ``out`` (None, a tensor, or a tuple of len(names)) and return it normalised; ``inputs`` maps the
    call's argument names to its tensors (None for absent ones), none of which an output may share memory with."""
    if out is None:
        return None
    if len(names) == 1:
        outs = (out,)
        check_out(names[0], out, shape, dtype, dev)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(names):
            raise ValueError(f"out must be a tuple (or list) of {len(names)} tensors ({', '.join(names)})")
        outs = tuple(out)
        names = tuple(f"out.{n}" for n in names)
        for name, o in zip(names, outs):
            check_out(name, o, shape, dtype, dev)
        if not _is_compiling() and shares_memory(outs[0], outs[1]):
            raise ValueError(f"{names[0]} and {names[1]} share memory: each output needs a buffer of its own")
    if _is_compiling():  # traced by torch.compile: no data pointers (README, "Credit-assignment kernels")
        return out if len(names) == 1 else outs
    # Byte spans first (most pairs are disjoint), the exact check only where they meet.
    spans = [(arg, x, byte_span(x)) for arg, x in inputs.items() if x is not None and x.numel()]
    for name, o in zip(names, outs):
        if not o.numel():
            continue
        lo, hi = byte_span(o)
        for arg, x, (x_lo, x_hi) in spans:
            if x_lo < hi and lo < x_hi and shares_memory(o, x):
                raise ValueError(f"{name} shares memory with {arg}: the kernels read inputs after writing some "
                                 f"outputs, so an output must not overlap an input (give a buffer of its own)")
    return out if len(names) == 1 else outs


def tensors_gae(rewards, values, terminated, truncated, bootstrap_value, next_values, out,
                out_names=("advantages", "returns")):
    """GAE and lambda-returns tensors; returns ``out`` normalised (tuple or tensor)."""
    shape, dev = _common(rewards, terminated, truncated, bootstrap_value, next_values)
    check_tensor("values", values, shape, dev, "float")
    check_bootstrap(bootstrap_value, next_values, True)
    return _check_outs(out, out_names, shape, rewards.dtype, dev,
                       dict(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                            bootstrap_value=bootstrap_value, next_values=next_values))


def tensors_lambda_returns(rewards, values, terminated, truncated, bootstrap_value, next_values, out):
    return tensors_gae(rewards, values, terminated, truncated, bootstrap_value, next_values, out, ("out",))


def tensors_vtrace(rewards, values, terminated, truncated, bootstrap_value, next_values,
                   behaviour_log_probs, target_log_probs, out):
    shape, dev = _common(rewards, terminated, truncated, bootstrap_value, next_values)
    check_tensor("values", values, shape, dev, "float")
    check_tensor("behaviour_log_probs", behaviour_log_probs, shape, dev, "float")
    check_tensor("target_log_probs", target_log_probs, shape, dev, "float")
    check_bootstrap(bootstrap_value, next_values, True)
    return _check_outs(out, ("vs", "pg_advantages"), shape, rewards.dtype, dev,
                       dict(rewards=rewards, values=values, terminated=terminated, truncated=truncated,
                            bootstrap_value=bootstrap_value, next_values=next_values,
                            behaviour_log_probs=behaviour_log_probs, target_log_probs=target_log_probs))


def tensors_discounted_returns(rewards, terminated, truncated, bootstrap_value, next_values, out):
    shape, dev = _common(rewards, terminated, truncated, bootstrap_value, next_values)
    check_bootstrap(bootstrap_value, next_values, False)
    return _check_outs(out, ("out",), shape, rewards.dtype, dev,
                       dict(rewards=rewards, terminated=terminated, truncated=truncated,
                            bootstrap_value=bootstrap_value, next_values=next_values))


def tensors_retrace(rewards, q_values, values, terminated, truncated, bootstrap_value, next_values,
                    behaviour_log_probs, target_log_probs, out):
    shape, dev = _common(rewards, terminated, truncated, bootstrap_value, next_values)
    check_tensor("q_values", q_values, shape, dev, "float")
    if values is not None:
        check_tensor("values", values, shape, dev, "float")
    check_tensor("behaviour_log_probs", behaviour_log_probs, shape, dev, "float")
    check_tensor("target_log_probs", target_log_probs, shape, dev, "float")
    check_bootstrap(bootstrap_value, next_values, True)
    if values is None and next_values is None:
        raise ValueError("values is required with bootstrap_value (V+[t] = values[t+1])")
    return _check_outs(out, ("out",), shape, rewards.dtype, dev,
                       dict(rewards=rewards, q_values=q_values, values=values, terminated=terminated,
                            truncated=truncated, bootstrap_value=bootstrap_value, next_values=next_values,
                            behaviour_log_probs=behaviour_log_probs, target_log_probs=target_log_probs))


def tensors_forward(x, terminated, truncated, initial, out):
    """Eligibility traces and episodic prefix sums."""
    shape = check_leading("x", x)
    dev = x.device
    _flags(terminated, truncated, shape, dev, "x")
    if initial is not None:
        check_tensor("initial", initial, shape[1:], dev, "float", "x", shape)
    return _check_outs(out, ("out",), shape, x.dtype, dev,
                       dict(x=x, terminated=terminated, truncated=truncated, initial=initial))


def scalars_gamma_lambda(gamma, lambda_):
    return check_unit("gamma", gamma), check_unit("lambda_", lambda_)


def scalars_gamma(gamma):
    return (check_unit("gamma", gamma),)


def scalars_vtrace(gamma, lambda_, rho_clip, c_clip, pg_rho_clip):
    return (check_unit("gamma", gamma), check_unit("lambda_", lambda_), check_clip("rho_clip", rho_clip),
            check_clip("c_clip", c_clip), check_clip("pg_rho_clip", pg_rho_clip))


def scalars_retrace(gamma, lambda_, c_clip):
    return check_unit("gamma", gamma), check_unit("lambda_", lambda_), check_clip("c_clip", c_clip)
