"""Torch implementation (CPU default, and `backend="torch"` anywhere).

Same framework as the Triton kernels: each estimator builds the coefficients
(a, b) of y[t] = a[t] + b[t] * y[t+-1] with vectorised tensor ops over the whole
[T, *B] block, then one fused ``addcmul`` per time step performs the scan
(vectorised over the batch), followed by a ``torch.where`` that drops the carry where
b is 0 (see _scan). For Retrace the scan subtracts q[t+1] from the carry before
multiplying, as the reference does; lambda-returns add in the reference's order
(_mixture_scan).
Inputs are assumed validated by :mod:`kernels.api`.
Outputs are targets, not functions to differentiate: they carry no gradient, as
the Triton kernels' outputs don't.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from ._outputs import writing_into
from ._validation import compute_dtype, log_clip

Tensor = torch.Tensor


def _done(term: Tensor, trunc: Optional[Tensor]) -> Tensor:
    d = term != 0
    if trunc is not None:
        d = d | (trunc != 0)
    return d


def _traces(log_rho: Tensor, gamma: float, lambda_: float, c_clip: float) -> Tensor:
    """c = lambda_ * min(c_clip, exp(log_rho)), 0 wherever gamma or lambda_ is 0 (reference._traces)."""
    if gamma == 0 or lambda_ == 0:
        return torch.zeros_like(log_rho)
    return torch.exp(torch.clamp(log_rho, max=log_clip(c_clip))) * lambda_


def _vnext(values: Optional[Tensor], bootstrap_value, next_values, ct) -> Tensor:
    if next_values is not None:
        return next_values.to(ct)
    v = values.to(ct)
    return torch.cat([v[1:], bootstrap_value.to(ct).unsqueeze(0)], 0)


def _scan(a: Tensor, b: Tensor, out: Tensor, reverse: bool, initial: Optional[Tensor] = None,
          shift: Optional[Tensor] = None) -> Tensor:
    """y[t] = a[t] + b[t] * y[t -+ 1], or with `shift` y[t] = a[t] + b[t] * (y[t -+ 1] - shift[t]); the carry
    beyond the window is `initial` or 0. `shift` may have fewer rows than a: rows t past its end are not shifted.

    Where b[t] == 0, y[t] = a[t] whatever the carry is: past a done the carry may be inf or NaN, and 0*inf
    must not bring it across (the Triton kernels select the same way). The shift is subtracted before the
    product, so an infinite b times a finite difference is +-inf, not inf - inf (Retrace's q[t+1]).
    Writes into `out` (any dtype; cast on write when it differs from a's dtype).
    """
    T = a.shape[0]
    y = out if out.dtype == a.dtype else torch.empty_like(a)
    cut = b == 0
    order = range(T - 1, -1, -1) if reverse else range(T)
    diff = None if shift is None or T == 0 else torch.empty_like(a[0])
    # the carry beyond the window is multiplied like any other: it is the forward estimators' `initial` or 0, and
    # no backward estimator's b at T-1 can be inf (V-trace's and Retrace's, the ones with a ratio in them, are 0
    # there)
    prev = None if T == 0 else (torch.zeros_like(a[0]) if initial is None else initial.to(a.dtype))
    for t in order:
        if diff is not None and t < shift.shape[0]:
            prev = torch.sub(prev, shift[t], out=diff)
        torch.addcmul(a[t], b[t], prev, out=y[t])
        torch.where(cut[t], a[t], y[t], out=y[t])
        prev = y[t]
    if y is not out:
        _write(out, y)
    return out


def _write(out: Tensor, y: Tensor) -> None:
    """``out.copy_(y)``, with y first cast to out's dtype where out is a lazily negated view: PyTorch's CPU
    ``copy_`` from float32 into a negated float16 view gives the values the wrong sign (torch 2.13). Not while
    torch.compile traces, where ``is_neg()`` is a graph break: an ``out=`` is written after the whole computation
    there (:func:`_out_written`)."""
    if out.dtype != y.dtype and not torch.compiler.is_compiling() and out.is_neg():
        y = y.to(out.dtype)
    out.copy_(y)


def _out_written(fn):
    """``fn(*args, out)`` with its ``out=`` (the last argument) written as the API promises.

    While torch.compile traces, ``fn(*args, None)`` copied into ``out`` at the end: the checks that an ``out=``
    shares no memory with the inputs need data pointers and are skipped there, and a copy after the whole
    computation makes such sharing harmless (kernels._compile does the same for the Triton path). Otherwise under
    :func:`kernels._outputs.writing_into`, which admits an ``out=`` made under inference mode."""

    @functools.wraps(fn)
    def call(*args):
        out = args[-1]
        if out is None:
            return fn(*args)
        if not torch.compiler.is_compiling():
            with writing_into((out,) if isinstance(out, Tensor) else out):
                return fn(*args)
        res = fn(*args[:-1], None)
        if isinstance(res, tuple):
            for o, r in zip(out, res):
                _write(o, r)
            return tuple(out)
        _write(out, res)
        return out

    return call


def _alloc(out, like: Tensor) -> Tensor:
    return torch.empty_like(like, memory_format=torch.contiguous_format) if out is None else out


@_out_written
@torch.no_grad()
def gae(rewards, values, terminated, truncated, gamma, lambda_, bootstrap_value, next_values, out=None):
    ct = compute_dtype(rewards, values, bootstrap_value, next_values)
    r, v = rewards.to(ct), values.to(ct)
    vn = _vnext(values, bootstrap_value, next_values, ct)
    done = _done(terminated, truncated)
    term = terminated != 0
    delta = torch.where(term, r, r + gamma * vn) - v
    b = (~done).to(ct) * (gamma * lambda_)
    adv_out, ret_out = (None, None) if out is None else out
    adv = _alloc(adv_out, rewards)
    # returns from the advantages in the compute dtype: rounding them to the output dtype first would round twice
    adv_ct = _scan(delta, b, adv if adv.dtype == ct else torch.empty_like(delta), reverse=True)
    if adv_ct is not adv:
        _write(adv, adv_ct)
    ret = _alloc(ret_out, rewards)
    if ret.dtype == ct:
        torch.add(adv_ct, v, out=ret)
    else:
        _write(ret, adv_ct + v)
    return adv, ret


@_out_written
@torch.no_grad()
def vtrace(rewards, values, terminated, truncated, behaviour_log_probs, target_log_probs,
           gamma, lambda_, rho_clip, c_clip, pg_rho_clip, bootstrap_value, next_values, out=None):
    ct = compute_dtype(rewards, values, bootstrap_value, next_values, behaviour_log_probs, target_log_probs)
    r, v = rewards.to(ct), values.to(ct)
    vn = _vnext(values, bootstrap_value, next_values, ct)
    done = _done(terminated, truncated)
    term = terminated != 0
    log_rho = target_log_probs.to(ct) - behaviour_log_probs.to(ct)
    rho = torch.exp(torch.clamp(log_rho, max=log_clip(rho_clip)))
    c = _traces(log_rho, gamma, lambda_, c_clip)
    pg_rho = torch.exp(torch.clamp(log_rho, max=log_clip(pg_rho_clip)))
    delta = torch.where(term, r, r + gamma * vn) - v
    a = rho * delta
    cut = done.clone()
    cut[-1:] = True  # past the window the term is 0, whatever c[T-1] is
    b = torch.where(cut, torch.zeros_like(c), c * gamma)
    diff = _scan(a, b, torch.empty_like(a), reverse=True)
    vs_ct = v + diff
    vs_next = torch.cat([vs_ct[1:], vn[-1:]], 0)
    w = torch.where(done, vn, vs_next)
    pg_ct = pg_rho * (torch.where(term, r, r + gamma * w) - v)
    vs_out, pg_out = (None, None) if out is None else out
    vs = _alloc(vs_out, rewards)
    pg = _alloc(pg_out, rewards)
    _write(vs, vs_ct)
    _write(pg, pg_ct)
    return vs, pg


@_out_written
@torch.no_grad()
def lambda_returns(rewards, values, terminated, truncated, gamma, lambda_, bootstrap_value, next_values, out=None):
    ct = compute_dtype(rewards, values, bootstrap_value, next_values)
    r = rewards.to(ct)
    vn = _vnext(values, bootstrap_value, next_values, ct)
    done = _done(terminated, truncated)
    term = terminated != 0
    lam = (~done).to(ct) * lambda_
    lam[-1:] = 0.0  # slices: no-ops when T == 0
    return _mixture_scan(r, (1.0 - lam) * vn, lam, term, gamma, _alloc(out, rewards))


def _mixture_scan(r: Tensor, w: Tensor, lam: Tensor, term: Tensor, gamma: float, out: Tensor) -> Tensor:
    """Backward y[t] = r[t] + gamma*(w[t] + lam[t]*y[t+1]), y[t] = r[t] where term[t], y[T] = 0: lambda-returns
    with w = (1-l)*V+, added in the reference's order (the mixture before gamma and r[t]; an addcmul over
    (r + gamma*w, gamma*lam) can overflow where the return does not). The carry is not read where its coefficient
    gamma*lam[t] is 0, as in _scan. Writes into `out` (cast on write when its dtype differs from r's)."""
    T = r.shape[0]
    y = out if out.dtype == r.dtype else torch.empty_like(r)
    if gamma == 0:
        lam = torch.zeros_like(lam)
    cut = lam == 0
    mix = None if T == 0 else torch.empty_like(r[0])
    prev = None if T == 0 else torch.zeros_like(r[0])
    for t in range(T - 1, -1, -1):
        torch.addcmul(w[t], lam[t], prev, out=mix)
        torch.where(cut[t], w[t], mix, out=mix)
        torch.add(r[t], torch.mul(mix, gamma, out=mix), out=y[t])
        torch.where(term[t], r[t], y[t], out=y[t])
        prev = y[t]
    if y is not out:
        _write(out, y)
    return out


@_out_written
@torch.no_grad()
def discounted_returns(rewards, terminated, truncated, gamma, bootstrap_value, next_values, out=None):
    ct = compute_dtype(rewards, bootstrap_value, next_values)
    r = rewards.to(ct)
    done = _done(terminated, truncated)
    term = terminated != 0
    cut = done.clone()
    cut[-1:] = True
    g = torch.where(term, torch.zeros_like(r), torch.full_like(r, gamma))
    if next_values is not None:
        a = torch.where(term, r, r + gamma * torch.where(cut, next_values.to(ct), torch.zeros_like(r)))
    elif bootstrap_value is not None:
        a = r.clone()
        a[-1:] = torch.where(term[-1:], r[-1:], r[-1:] + gamma * bootstrap_value.to(ct))
    else:
        a = r
    b = torch.where(cut, torch.zeros_like(g), g)
    return _scan(a, b, _alloc(out, rewards), reverse=True)


@_out_written
@torch.no_grad()
def retrace(rewards, q_values, values, terminated, truncated, behaviour_log_probs, target_log_probs,
            gamma, lambda_, c_clip, bootstrap_value, next_values, out=None):
    ct = compute_dtype(rewards, q_values, values, bootstrap_value, next_values,
                       behaviour_log_probs, target_log_probs)
    r, q = rewards.to(ct), q_values.to(ct)
    vn = _vnext(values, bootstrap_value, next_values, ct)
    done = _done(terminated, truncated)
    term = terminated != 0
    log_rho = target_log_probs.to(ct) - behaviour_log_probs.to(ct)
    c = _traces(log_rho, gamma, lambda_, c_clip)
    # kc[t] = k[t] * c[t+1] (k = 1 - done, 0 at T-1, as in api.compute_retrace)
    kc = torch.zeros_like(r)
    kc[:-1] = c[1:].masked_fill(done[:-1], 0.0)
    g = torch.where(term, torch.zeros_like(r), torch.full_like(r, gamma))
    # y[t] = a[t] + b[t] * (y[t+1] - q[t+1]) with b = g*kc: the difference formed first, as in the reference. A
    # zero b never reads q[t+1] (after a done, the final observation's: maybe inf or NaN).
    return _scan(torch.where(term, r, r + gamma * vn), g * kc, _alloc(out, rewards), reverse=True, shift=q[1:])


def _forward_keep(terminated, truncated, ct, factor: float) -> Tensor:
    """b[t] = factor * (1 - done[t-1]), b[0] = factor."""
    done = _done(terminated, truncated)
    b = torch.empty(done.shape, dtype=ct, device=done.device)
    b[:1] = factor
    b[1:] = (~done[:-1]).to(ct) * factor
    return b


@_out_written
@torch.no_grad()
def eligibility_traces(x, terminated, truncated, gamma, lambda_, initial, out=None):
    ct = compute_dtype(x, initial)
    b = _forward_keep(terminated, truncated, ct, gamma * lambda_)
    return _scan(x.to(ct), b, _alloc(out, x), reverse=False, initial=initial)


@_out_written
@torch.no_grad()
def episodic_prefix_sum(x, terminated, truncated, initial, out=None):
    ct = compute_dtype(x, initial)
    b = _forward_keep(terminated, truncated, ct, 1.0)
    return _scan(x.to(ct), b, _alloc(out, x), reverse=False, initial=initial)
