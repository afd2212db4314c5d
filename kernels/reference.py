"""Float64 reference implementations: the specification of every estimator.

Each function is a plain loop over time written directly from the recurrence in
the docstring of the matching public function in :mod:`kernels`. They are slow on
purpose, free of tricks: they are what the fast backends are tested against.

All inputs are tensors (or None) with time as the first dimension ``[T, *B]``;
per-sequence inputs are ``[*B]``. Flags may be bool, integer or float 0/1.
Every function computes in float64 and returns float64 results. No argument is
checked here (``next_values`` wins if both bootstrap forms are given; scalars must
be valid): :mod:`kernels.api` raises the errors.

Non-finite inputs: a terminated step never reads V+, and the carried value (and Retrace's q[t+1]) is not read
where its coefficient is 0 (at a done, past the window, or where gamma, lambda or a trace is 0; :func:`_times`),
so an inf or NaN on the far side of a done cannot come across as 0*inf. The importance-weighted traces of
V-trace and Retrace are 0 when gamma or lambda_ is 0 whatever the ratio (:func:`_traces`). Other products keep
their arithmetic (gamma = 0 times a NaN V+ is NaN). For finite inputs this is the plain arithmetic of the
formulas.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

Tensor = torch.Tensor

__all__ = [
    "gae",
    "vtrace",
    "lambda_returns",
    "discounted_returns",
    "retrace",
    "eligibility_traces",
    "episodic_prefix_sum",
]


def _f64(x: Optional[Tensor]) -> Optional[Tensor]:
    return None if x is None else torch.as_tensor(x).to(torch.float64)


def _flags(terminated: Tensor, truncated: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    term = (torch.as_tensor(terminated) != 0).to(torch.float64)
    if truncated is None:
        trunc = torch.zeros_like(term)
    else:
        trunc = (torch.as_tensor(truncated) != 0).to(torch.float64)
    done = torch.maximum(term, trunc)
    return term, done


def _times(coef, x: Tensor) -> Tensor:
    """coef * x, except that a zero coef gives 0 whatever x is (inf or NaN included).

    The recurrences multiply the carried value (and Retrace q[t+1]) by a coefficient that is 0 at a done:
    the value past a done belongs to the next episode, may be inf or NaN (in the ``bootstrap_value`` form
    the row after a done holds the final observation's value), and must not enter through 0*inf = NaN."""
    coef = torch.as_tensor(coef, dtype=torch.float64)
    return torch.where(coef == 0, torch.zeros_like(x), coef * x)


def _traces(log_rho: Tensor, gamma: float, lambda_: float, c_clip: float) -> Tensor:
    """c = lambda_ * min(c_clip, exp(log_rho)), and 0 wherever gamma or lambda_ is 0.

    The traces enter only through gamma * c, which is 0 with a zero factor: the ratio pi/mu is a real number
    even where exp overflows the dtype (a log ratio above 709.8 here, 88.7 in float32) or a behaviour log-prob
    of -inf makes it inf, so 0 * that ratio must not become NaN."""
    if gamma == 0 or lambda_ == 0:
        return torch.zeros_like(log_rho)
    return lambda_ * torch.exp(torch.clamp(log_rho, max=math.log(c_clip)))


def _next_value(t: int, T: int, values, bootstrap_value, next_values):
    """V+[t]: next_values[t] if given, else values[t+1] (t < T-1) / bootstrap_value (t = T-1)."""
    if next_values is not None:
        return next_values[t]
    if t < T - 1:
        return values[t + 1]
    return bootstrap_value


def gae(rewards, values, terminated, truncated=None, *, gamma, lambda_,
        bootstrap_value=None, next_values=None):
    """GAE (arXiv:1506.02438; :func:`kernels.compute_gae`): returns (advantages, returns) in float64, ``[T, *B]``.

    ``delta[t] = r[t] + gamma*(1-terminated[t])*V+[t] - values[t]``,
    ``A[t] = delta[t] + gamma*lambda_*(1-done[t])*A[t+1]``, ``A[T] = 0``, ``returns = A + values``.

    A terminated step never reads V+ (selected away, so an inf or NaN there does not enter), and a zero
    coefficient never reads the carry (:func:`_times`); for finite inputs this is the plain formula."""
    r, v = _f64(rewards), _f64(values)
    bv, nv = _f64(bootstrap_value), _f64(next_values)
    term, done = _flags(terminated, truncated)
    T = r.shape[0]
    adv = torch.zeros_like(r)
    carry = r.new_zeros(r.shape[1:])  # A[T] = 0
    for t in reversed(range(T)):
        vnext = _next_value(t, T, v, bv, nv)
        delta = r[t] + gamma * torch.where(term[t] != 0, 0.0, vnext) - v[t]
        carry = delta + _times(gamma * lambda_ * (1.0 - done[t]), carry)
        adv[t] = carry
    return adv, adv + v


def vtrace(rewards, values, terminated, truncated=None, *, behaviour_log_probs,
           target_log_probs, gamma, lambda_=1.0, rho_clip=1.0, c_clip=1.0,
           pg_rho_clip=1.0, bootstrap_value=None, next_values=None):
    """V-trace (arXiv:1802.01561; :func:`kernels.compute_vtrace`): returns (vs, pg_advantages) in float64,
    ``[T, *B]`` (terminated steps and zero coefficients: see :func:`gae`).

    ``vs[t] - values[t] = rho[t]*delta[t] + gamma*(1-done[t])*c[t]*(vs[t+1] - values[t+1])``;
    ``pg_advantages[t] = pg_rho[t]*(r[t] + gamma*(1-terminated[t])*w[t] - values[t])``, ``w[t] = vs[t+1]`` if not
    done[t] and t < T-1, else ``V+[t]``.

    The term past the window, gamma*c[T-1]*(vs[T] - values[T]), is 0 like the term past a done, whatever c[T-1]
    is; the traces are 0 when gamma or lambda_ is 0 (:func:`_traces`)."""
    r, v = _f64(rewards), _f64(values)
    bv, nv = _f64(bootstrap_value), _f64(next_values)
    term, done = _flags(terminated, truncated)
    log_rho = _f64(target_log_probs) - _f64(behaviour_log_probs)
    rho = torch.exp(torch.clamp(log_rho, max=math.log(rho_clip)))
    c = _traces(log_rho, gamma, lambda_, c_clip)
    pg_rho = torch.exp(torch.clamp(log_rho, max=math.log(pg_rho_clip)))
    T = r.shape[0]
    vs = torch.zeros_like(r)
    pg = torch.zeros_like(r)
    diff = r.new_zeros(r.shape[1:])  # vs[t+1] - values[t+1]
    for t in reversed(range(T)):
        vnext = _next_value(t, T, v, bv, nv)
        delta = r[t] + gamma * torch.where(term[t] != 0, 0.0, vnext) - v[t]
        trace = _times(gamma * torch.where(done[t] != 0, 0.0, c[t]), diff) if t < T - 1 else 0.0
        diff = rho[t] * delta + trace
        vs[t] = v[t] + diff
    for t in range(T):
        vnext = _next_value(t, T, v, bv, nv)
        if t < T - 1:
            w = torch.where(done[t] != 0, vnext, vs[t + 1])
        else:
            w = vnext
        pg[t] = pg_rho[t] * (r[t] + gamma * torch.where(term[t] != 0, 0.0, w) - v[t])
    return vs, pg


def lambda_returns(rewards, values, terminated, truncated=None, *, gamma, lambda_,
                   bootstrap_value=None, next_values=None):
    """TD(lambda) returns (:func:`kernels.compute_lambda_returns`) in float64, ``[T, *B]`` (terminated steps and
    zero coefficients: see :func:`gae`).

    ``G[t] = r[t] + gamma*(1-terminated[t])*((1-l[t])*V+[t] + l[t]*G[t+1])``, ``l[t] = lambda_*(1-done[t])`` for
    t < T-1 and ``l[T-1] = 0``, in that order: the mixture of V+[t] and G[t+1] is formed before gamma scales it and
    r[t] is added, so from finite inputs it overflows only where G[t] itself lies beyond the range (r[t] +
    gamma*(1-l[t])*V+[t] taken first can overflow where G[t] does not)."""
    r, v = _f64(rewards), _f64(values)
    bv, nv = _f64(bootstrap_value), _f64(next_values)
    term, done = _flags(terminated, truncated)
    T = r.shape[0]
    G = torch.zeros_like(r)
    nxt = r.new_zeros(r.shape[1:])
    for t in reversed(range(T)):
        vnext = _next_value(t, T, v, bv, nv)
        lam = lambda_ * (1.0 - done[t]) if t < T - 1 else torch.zeros_like(done[t])
        # the carry's coefficient is gamma*l[t]: with gamma 0 it is not read either
        cont = r[t] + gamma * ((1.0 - lam) * vnext + _times(lam if gamma != 0 else 0.0, nxt))
        nxt = torch.where(term[t] != 0, r[t], cont)
        G[t] = nxt
    return G


def discounted_returns(rewards, terminated, truncated=None, *, gamma,
                       bootstrap_value=None, next_values=None):
    """Discounted returns (:func:`kernels.compute_discounted_returns`) in float64, ``[T, *B]`` (terminated steps
    and zero coefficients: see :func:`gae`).

    ``G[t] = r[t] + gamma*(1-terminated[t])*C[t]``: ``C[t] = G[t+1]`` if not done[t] and t < T-1, else
    ``next_values[t]`` if given, else ``bootstrap_value`` at t = T-1 if given, else 0."""
    r = _f64(rewards)
    bv, nv = _f64(bootstrap_value), _f64(next_values)
    term, done = _flags(terminated, truncated)
    T = r.shape[0]
    G = torch.zeros_like(r)
    nxt = r.new_zeros(r.shape[1:])
    for t in reversed(range(T)):
        if nv is not None:
            boot = nv[t]
        elif t == T - 1 and bv is not None:
            boot = bv
        else:
            boot = torch.zeros_like(r[t])
        if t < T - 1:
            cont = torch.where(done[t] != 0, gamma * boot, _times(gamma, nxt))
        else:
            cont = gamma * boot
        nxt = torch.where(term[t] != 0, r[t], r[t] + cont)
        G[t] = nxt
    return G


def retrace(rewards, q_values, values, terminated, truncated=None, *,
            behaviour_log_probs, target_log_probs, gamma, lambda_=1.0, c_clip=1.0,
            bootstrap_value=None, next_values=None):
    """Retrace(lambda) (arXiv:1606.02647; :func:`kernels.compute_retrace`): Q targets in float64, ``[T, *B]``.

    ``Q_ret[t] = r[t] + gamma*(1-terminated[t]) * (V+[t] + k[t]*c[t+1]*(Q_ret[t+1] - q[t+1]))``, added as
    ``(r[t] + gamma*V+[t]) + (gamma*k[t]*c[t+1])*(Q_ret[t+1] - q[t+1])`` (``r[t]`` where terminated),
    with ``k[t] = 1-done[t]`` for t < T-1, ``k[T-1] = 0`` and
    ``c[t] = lambda_ * min(c_clip, exp(target[t] - behaviour[t]))``, 0 when gamma or lambda_ is 0
    (:func:`_traces`; terminated steps and zero coefficients: see :func:`gae`). ``values`` ``[T, *B]`` (the
    expected Q of each state) is read only for V+ and may be None when ``next_values`` is given.
    """
    r, q = _f64(rewards), _f64(q_values)
    v = _f64(values)
    bv, nv = _f64(bootstrap_value), _f64(next_values)
    term, done = _flags(terminated, truncated)
    log_rho = _f64(target_log_probs) - _f64(behaviour_log_probs)
    c = _traces(log_rho, gamma, lambda_, c_clip)
    T = r.shape[0]
    out = torch.zeros_like(r)
    nxt = r.new_zeros(r.shape[1:])
    for t in reversed(range(T)):
        vnext = _next_value(t, T, v, bv, nv)
        if t < T - 1:
            trace = _times(gamma * torch.where(done[t] != 0, 0.0, c[t + 1]), nxt - q[t + 1])
        else:
            trace = torch.zeros_like(r[t])
        nxt = torch.where(term[t] != 0, r[t], r[t] + gamma * vnext + trace)
        out[t] = nxt
    return out


def eligibility_traces(x, terminated, truncated=None, *, gamma, lambda_, initial=None):
    """Forward eligibility traces (:func:`kernels.compute_eligibility_traces`) in float64, ``[T, *B]``:
    ``e[t] = x[t] + gamma*lambda_*(1-done[t-1])*e[t-1]``, ``e[-1]`` = ``initial`` ``[*B]`` or 0."""
    x = _f64(x)
    _, done = _flags(terminated, truncated)
    T = x.shape[0]
    out = torch.zeros_like(x)
    e = x.new_zeros(x.shape[1:]) if initial is None else _f64(initial).clone()
    for t in range(T):
        keep = 1.0 if t == 0 else (1.0 - done[t - 1])
        e = x[t] + _times(gamma * lambda_ * keep, e)
        out[t] = e
    return out


def episodic_prefix_sum(x, terminated, truncated=None, *, initial=None):
    """Forward episodic prefix sum (:func:`kernels.compute_episodic_prefix_sum`) in float64, ``[T, *B]``:
    ``S[t] = x[t] + (1-done[t-1])*S[t-1]``, ``S[-1]`` = ``initial`` ``[*B]`` or 0."""
    x = _f64(x)
    _, done = _flags(terminated, truncated)
    T = x.shape[0]
    out = torch.zeros_like(x)
    s = x.new_zeros(x.shape[1:]) if initial is None else _f64(initial).clone()
    for t in range(T):
        keep = 1.0 if t == 0 else (1.0 - done[t - 1])
        s = x[t] + _times(keep, s)
        out[t] = s
    return out
