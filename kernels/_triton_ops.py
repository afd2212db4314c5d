"""Thin launch wrappers for the Triton kernels.

Inputs arrive validated (kernels.api). The wrappers only read metadata: shapes,
strides, dtypes. They allocate the outputs (unless ``out=`` is given), pass every
input's time stride and flattened batch stride (no copies), and launch one
program per BLOCK_N environments. Launch parameters are cached per (T, N, kind,
dtype, device). No host syncs, no value checks: the ops are CUDA-graph capturable.

The one documented copy: a ``[T, *B]`` input whose trailing dims cannot be
addressed with a single batch stride (e.g. a permuted ``[T, B1, B2]`` view) is
reshaped to ``[T, N]`` (``Tensor.reshape``, which copies only in that case).
"""
from __future__ import annotations

import os
import struct
from functools import lru_cache

import torch

from ._validation import compute_dtype, log_clip

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

from . import _triton_kernels as K  # noqa: E402  (decorated according to TRITON_INTERPRET)

import triton.language as tl  # noqa: E402

# Largest tile (T_BLOCK * BLOCK_N elements) per program; longer T is chunked.
# Tests lower max_time_block to force the chunked path on tiny inputs.
config = {"max_tile": 4096, "max_time_block": 256, "interp_block_n": 16}

_TL = {torch.float32: tl.float32, torch.float64: tl.float64}


@lru_cache(maxsize=256)
def _split(x: float):
    """x as an fp32 (hi, lo) pair so that float64 kernels see it (almost) exactly."""
    hi = struct.unpack("f", struct.pack("f", x))[0] if abs(x) < 3e38 else x
    lo = x - hi if x == x and abs(x) != float("inf") else 0.0
    return hi, lo


def _strides(x: torch.Tensor):
    """(tensor, time stride, batch stride) addressing x as [T, N]; copy only if unavoidable."""
    st = x.stride()
    if x.dim() == 1:
        return x, st[0], 0
    if x.dim() == 2:
        return x, st[0], st[1]
    s_n = None
    expected = None
    sh = x.shape
    for d in range(x.dim() - 1, 0, -1):
        if sh[d] == 1:
            continue
        if s_n is None:
            s_n = st[d]
        elif st[d] != expected:
            y = x.reshape(sh[0], -1)
            return y, y.stride(0), y.stride(1)
        expected = st[d] * sh[d]
    return x, st[0], (s_n if s_n is not None else 0)


def _bstride(x: torch.Tensor):
    """(tensor, stride) addressing a [*B] tensor as [N]."""
    if x.dim() == 0:
        return x, 0
    if x.dim() == 1:
        return x, x.stride(0)
    y = x.reshape(-1)
    return y, y.stride(0)


@lru_cache(maxsize=1024)
def _plan(T: int, N: int, is_cuda: bool, max_tile: int, max_tb: int, interp_bn: int):
    """(grid, T_BLOCK, BLOCK_N, num_warps)."""
    if not is_cuda:
        bn = min(interp_bn, triton_next_pow2(N))
        tb = min(triton_next_pow2(T), max_tb)
        return ((N + bn - 1) // bn,), tb, bn, 1
    # Enough programs to fill the GPU for the small shapes, wide enough rows to coalesce.
    if N >= 32768:
        bn = 64
    elif N >= 4096:
        bn = 32
    elif N >= 1024:
        bn = 16
    else:
        bn = 8
    bn = min(bn, max(8, triton_next_pow2(N)))
    tb = min(triton_next_pow2(T), max(16, max_tile // bn), max_tb)
    tile = tb * bn
    nw = 8 if tile >= 4096 else (4 if tile >= 1024 else 2)
    return ((N + bn - 1) // bn,), tb, bn, nw


def triton_next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _check_device(dev: torch.device):
    if dev.type == "cuda":
        return
    if not _INTERPRET:
        raise RuntimeError(
            "backend='triton' on CPU tensors needs the Triton interpreter: set the environment "
            "variable TRITON_INTERPRET=1 before triton/kernels are first imported (it was not set "
            "when kernels' Triton module was imported), or use backend='torch'.")


_FAST = {"enabled": True}
_COMPILED = {}


def _spec_key(args):
    """What Triton specialises a compiled kernel on: tensor dtype/alignment, int value classes."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.data_ptr() % 16 == 0))
        elif isinstance(a, int):
            key.append((a == 1, a % 16 == 0, -2 ** 31 <= a < 2 ** 31))
        else:
            key.append(None)
    return tuple(key)


def _launch(kernel, dev, T, N, args, constexprs):
    grid, tb, bn, nw = _plan(T, N, dev.type == "cuda", config["max_tile"], config["max_time_block"],
                             config["interp_block_n"])
    consts = dict(constexprs, T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=(T + tb - 1) // tb)
    if dev.type != "cuda":
        kernel[grid](*args, **consts, num_warps=nw)
        return
    ctx = None
    if dev.index is not None and dev.index != torch.cuda.current_device():
        ctx = torch.cuda.device(dev)
        ctx.__enter__()
    try:
        key = None
        if _FAST["enabled"]:
            # Direct launch of the cached compiled kernel: skips Triton's per-call binding.
            key = (kernel, dev.index, nw, tuple(consts.items()), _spec_key(args))
            ck = _COMPILED.get(key)
            if ck is not None:
                try:
                    stream = torch._C._cuda_getCurrentRawStream(dev.index if dev.index is not None
                                                                else torch.cuda.current_device())
                    full = list(args) + [consts[n] for n in kernel.arg_names[len(args):]]
                    ck.run(grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *full)
                    return
                except Exception:  # noqa: BLE001  (fall back to the regular launch path for good)
                    _FAST["enabled"] = False
        ck = kernel[grid](*args, **consts, num_warps=nw)
        if key is not None and ck is not None:
            _COMPILED[key] = ck
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


def _out(out, like):
    if out is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)
    return out


def _TN(x):
    T = x.shape[0]
    N = x.numel() // T if T else 0
    return T, N


def _opt(x, fallback):
    """Strides of an optional [T, *B] input (fallback pointer and zero strides when absent)."""
    if x is None:
        return fallback, 0, 0
    return _strides(x)


def gae(rewards, values, terminated, truncated, gamma, lambda_, bootstrap_value, next_values, out=None):
    dev = rewards.device
    _check_device(dev)
    adv = _out(None if out is None else out[0], rewards)
    ret = _out(None if out is None else out[1], rewards)
    T, N = _TN(rewards)
    if T == 0 or N == 0:
        return adv, ret
    ct = compute_dtype(rewards, values, bootstrap_value, next_values)
    r, srt, srn = _strides(rewards)
    v, svt, svn = _strides(values)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, rewards)
    nv, snvt, snvn = _opt(next_values, rewards)
    bv, sbv = (rewards, 0) if bootstrap_value is None else _bstride(bootstrap_value)
    a_, sat, san = _strides(adv)
    o_, sot, son = _strides(ret)
    BIG = _big(T, N, (srt, srn, svt, svn, stet, sten, strt, strn, snvt, snvn, sat, san, sot, son))
    _launch(K.gae_kernel, dev, T, N,
            (r, v, te, tr, bv, nv, a_, o_, T, N, srt, srn, svt, svn, stet, sten, strt, strn, sbv, snvt, snvn,
             sat, san, sot, son, *_split(gamma), *_split(gamma * lambda_)),
            dict(HAS_TR=truncated is not None, HAS_NV=next_values is not None, CT=_TL[ct], BIG=BIG))
    if a_ is not adv:
        adv.copy_(a_.view(adv.shape))
    if o_ is not ret:
        ret.copy_(o_.view(ret.shape))
    return adv, ret


def _big(T, N, strides):
    """int64 offsets when any element offset may exceed int32."""
    return (T + N) * max(max(strides), -min(strides), 1) >= 2 ** 31


def _finish(dst, tmp):
    if tmp is not dst:  # non-flattenable out= buffer: computed into a reshaped copy
        dst.copy_(tmp.view(dst.shape))
    return dst


def vtrace(rewards, values, terminated, truncated, behaviour_log_probs, target_log_probs, gamma, lambda_,
           rho_clip, c_clip, pg_rho_clip, bootstrap_value, next_values, out=None):
    dev = rewards.device
    _check_device(dev)
    vs = _out(None if out is None else out[0], rewards)
    pg = _out(None if out is None else out[1], rewards)
    T, N = _TN(rewards)
    if T == 0 or N == 0:
        return vs, pg
    ct = compute_dtype(rewards, values, bootstrap_value, next_values, behaviour_log_probs, target_log_probs)
    r, srt, srn = _strides(rewards)
    v, svt, svn = _strides(values)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, rewards)
    nv, snvt, snvn = _opt(next_values, rewards)
    bv, sbv = (rewards, 0) if bootstrap_value is None else _bstride(bootstrap_value)
    be, sbt, sbn = _strides(behaviour_log_probs)
    tg, sgt, sgn = _strides(target_log_probs)
    vs_, svst, svsn = _strides(vs)
    pg_, spgt, spgn = _strides(pg)
    strides = (srt, srn, svt, svn, stet, sten, strt, strn, snvt, snvn, sbt, sbn, sgt, sgn, svst, svsn, spgt, spgn)
    _launch(K.vtrace_kernel, dev, T, N,
            (r, v, te, tr, bv, nv, be, tg, vs_, pg_, T, N, srt, srn, svt, svn, stet, sten, strt, strn, sbv,
             snvt, snvn, sbt, sbn, sgt, sgn, svst, svsn, spgt, spgn,
             *_split(gamma), *_split(lambda_), *_split(log_clip(rho_clip)), *_split(log_clip(c_clip)),
             *_split(log_clip(pg_rho_clip))),
            dict(HAS_TR=truncated is not None, HAS_NV=next_values is not None, CT=_TL[ct],
                 BIG=_big(T, N, strides)))
    return _finish(vs, vs_), _finish(pg, pg_)


def lambda_returns(rewards, values, terminated, truncated, gamma, lambda_, bootstrap_value, next_values, out=None):
    dev = rewards.device
    _check_device(dev)
    res = _out(out, rewards)
    T, N = _TN(rewards)
    if T == 0 or N == 0:
        return res
    ct = compute_dtype(rewards, values, bootstrap_value, next_values)
    r, srt, srn = _strides(rewards)
    v, svt, svn = _strides(values)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, rewards)
    nv, snvt, snvn = _opt(next_values, rewards)
    bv, sbv = (rewards, 0) if bootstrap_value is None else _bstride(bootstrap_value)
    o_, sot, son = _strides(res)
    strides = (srt, srn, svt, svn, stet, sten, strt, strn, snvt, snvn, sot, son)
    _launch(K.lambda_returns_kernel, dev, T, N,
            (r, v, te, tr, bv, nv, o_, T, N, srt, srn, svt, svn, stet, sten, strt, strn, sbv, snvt, snvn,
             sot, son, *_split(gamma), *_split(lambda_)),
            dict(HAS_TR=truncated is not None, HAS_NV=next_values is not None, CT=_TL[ct],
                 BIG=_big(T, N, strides)))
    return _finish(res, o_)


def discounted_returns(rewards, terminated, truncated, gamma, bootstrap_value, next_values, out=None):
    dev = rewards.device
    _check_device(dev)
    res = _out(out, rewards)
    T, N = _TN(rewards)
    if T == 0 or N == 0:
        return res
    ct = compute_dtype(rewards, bootstrap_value, next_values)
    r, srt, srn = _strides(rewards)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, rewards)
    nv, snvt, snvn = _opt(next_values, rewards)
    bv, sbv = (rewards, 0) if bootstrap_value is None else _bstride(bootstrap_value)
    o_, sot, son = _strides(res)
    strides = (srt, srn, stet, sten, strt, strn, snvt, snvn, sot, son)
    _launch(K.discounted_kernel, dev, T, N,
            (r, te, tr, bv, nv, o_, T, N, srt, srn, stet, sten, strt, strn, sbv, snvt, snvn, sot, son,
             *_split(gamma)),
            dict(HAS_TR=truncated is not None, HAS_BV=bootstrap_value is not None,
                 HAS_NV=next_values is not None, CT=_TL[ct], BIG=_big(T, N, strides)))
    return _finish(res, o_)


def retrace(rewards, q_values, values, terminated, truncated, behaviour_log_probs, target_log_probs,
            gamma, lambda_, c_clip, bootstrap_value, next_values, out=None):
    dev = rewards.device
    _check_device(dev)
    res = _out(out, rewards)
    T, N = _TN(rewards)
    if T == 0 or N == 0:
        return res
    ct = compute_dtype(rewards, q_values, values, bootstrap_value, next_values,
                       behaviour_log_probs, target_log_probs)
    r, srt, srn = _strides(rewards)
    q, sqt, sqn = _strides(q_values)
    v, svt, svn = _opt(values, rewards)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, rewards)
    nv, snvt, snvn = _opt(next_values, rewards)
    bv, sbv = (rewards, 0) if bootstrap_value is None else _bstride(bootstrap_value)
    be, sbt, sbn = _strides(behaviour_log_probs)
    tg, sgt, sgn = _strides(target_log_probs)
    o_, sot, son = _strides(res)
    strides = (srt, srn, sqt, sqn, svt, svn, stet, sten, strt, strn, snvt, snvn, sbt, sbn, sgt, sgn, sot, son)
    _launch(K.retrace_kernel, dev, T, N,
            (r, q, v, te, tr, bv, nv, be, tg, o_, T, N, srt, srn, sqt, sqn, svt, svn, stet, sten, strt, strn,
             sbv, snvt, snvn, sbt, sbn, sgt, sgn, sot, son,
             *_split(gamma), *_split(lambda_), *_split(log_clip(c_clip))),
            dict(HAS_TR=truncated is not None, HAS_NV=next_values is not None, CT=_TL[ct],
                 BIG=_big(T, N, strides)))
    return _finish(res, o_)


def _forward(x, terminated, truncated, factor, initial, out):
    dev = x.device
    _check_device(dev)
    res = _out(out, x)
    T, N = _TN(x)
    if T == 0 or N == 0:
        return res
    ct = compute_dtype(x, initial)
    xx, sxt, sxn = _strides(x)
    te, stet, sten = _strides(terminated)
    tr, strt, strn = _opt(truncated, x)
    ini, sin = (x, 0) if initial is None else _bstride(initial)
    o_, sot, son = _strides(res)
    strides = (sxt, sxn, stet, sten, strt, strn, sot, son)
    _launch(K.forward_kernel, dev, T, N,
            (xx, te, tr, ini, o_, T, N, sxt, sxn, stet, sten, strt, strn, sin, sot, son, *_split(factor)),
            dict(HAS_TR=truncated is not None, HAS_INIT=initial is not None, CT=_TL[ct],
                 BIG=_big(T, N, strides)))
    return _finish(res, o_)


def eligibility_traces(x, terminated, truncated, gamma, lambda_, initial, out=None):
    return _forward(x, terminated, truncated, gamma * lambda_, initial, out)


def episodic_prefix_sum(x, terminated, truncated, initial, out=None):
    return _forward(x, terminated, truncated, 1.0, initial, out)
