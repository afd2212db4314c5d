"""Public API: seven credit-assignment estimators, time-major, two backends.

Conventions shared by every function (see docs/kernels.md):

* Per-step tensors are ``[T, *B]`` (time first, any batch of independent
  sequences); per-sequence tensors (``bootstrap_value``, ``initial``) are ``[*B]``.
* Flags (``terminated``, ``truncated``) may be bool, integer (e.g. uint8) or
  floating 0/1 (any nonzero value counts as set, on both backends);
  ``done[t] = terminated[t] or truncated[t]`` and a step with both set counts as
  terminated.
* Next-state value ``V+[t]``: ``next_values[t]`` when given (value of the true
  next state, i.e. the final observation at a truncation); otherwise
  ``values[t+1]`` for ``t < T-1`` and ``bootstrap_value`` at ``t = T-1``
  (EnvPool / gymnasium next-step autoreset layout). In that layout the row after a
  done is the environment's reset step (its action ignored, reward 0): its outputs
  describe no real transition, so leave them out of losses and statistics.
* float16/bfloat16 accumulate in float32, float64 computes in float64; the floating
  value inputs (rewards, values, q_values, log-probs, bootstrap_value, next_values,
  x, initial; not the flags) may mix dtypes, and then the computation runs in
  float64 if any of them is float64, else in float32. Outputs have the dtype of
  ``rewards`` (of ``x`` for the forward estimators).
* Tensors are dense (``torch.strided``); a sparse tensor is a ``ValueError``. Views
  with any strides are read in place, except batch dims that one stride cannot
  address (e.g. a permuted ``[T, B1, B2]`` view), which are reshaped to ``[T, N]``
  (a copy), and lazily negated views, which are resolved first; an ``out=`` buffer
  of either kind is written through a copy.
* Floating tensors (and flags given as floats) are float16, bfloat16, float32 or float64; another floating
  dtype (float8) is a ``ValueError`` naming the argument.
* ``backend``: ``"auto"`` (Triton for CUDA tensors, torch otherwise),
  ``"triton"`` (CPU tensors run the same kernels through Triton's interpreter,
  slowly: for tests), or ``"torch"``.
* ``out``: optional preallocated output(s) (same shape as ``rewards``/``x``, the
  output dtype, same device); a tuple (or list) for GAE and V-trace. An output that requires grad, one that
  has a stride that does not exceed the span of the dims with smaller strides (a zero stride, as from
  ``expand()``, or interleaved strides such as shape (3, 2) with strides (2, 3), though that one never reaches an
  element twice), two outputs that share memory and an output that
  shares memory with an input (the scans read inputs after writing outputs: ``out=values`` gave wrong results)
  are a ``ValueError`` naming the arguments; sharing is decided exactly, byte by byte, for any strides and dtypes.
  The torch backend checks every call. The Triton path checks GAE's and V-trace's two outputs against each other
  on every call, and everything else when the call's layout is first planned: a repeated call with a planned
  layout does not compare its outputs with its inputs (that would cost every call host time). A buffer made
  under ``torch.inference_mode()`` may be passed outside it to an eager call: both backends write it (under
  ``torch.compile`` such a buffer is PyTorch's ``RuntimeError``).
* A coefficient of 0 (``gamma``, ``lambda_``, a done, the window's end, or a trace weight ``c`` that is exactly
  0, e.g. an importance ratio that underflows) multiplying the carried value ``y[t+1]`` (``y[t-1]`` for the
  forward estimators) makes that term 0 even where the value is infinite or NaN: no ``0*inf = NaN`` enters
  from the next episode or from past the window. An input that a formula above multiplies by ``gamma``
  (``V+[t]``, including ``bootstrap_value`` and ``next_values``) is multiplied as written, as in the float64
  reference: with ``gamma`` 0 an infinite or NaN ``V+[t]`` gives NaN at a step that is not terminated (a
  terminated step selects it away), and so does lambda-returns' ``(1 - l[t]) * V+[t]`` with ``lambda_`` 1
  (docs/kernels.md, "No non-finite input crosses a done"). V-trace's ``pg_advantages[t]`` multiplies its
  next-state value ``w[t]`` as written too, ``vs[t+1]`` inside an episode included: with ``gamma`` 0 a
  non-finite ``vs[t+1]`` gives NaN there. An infinite reward at t+1 leaves ``vs[t]`` finite; an infinite
  ``values[t+1]`` is also the ``bootstrap_value`` form's ``V+[t]`` and makes ``vs[t]`` NaN as well (the sentence
  before).
* Known differences near the end of the dtype's range (finite inputs whose sums pass the dtype's largest value,
  3.4e38 in float32, 1.8e308 in float64). The Triton kernels rearrange some sums: GAE's returns in the
  ``bootstrap_value`` form are built without ``delta``, the scans multiply coefficients before values, and the
  forward estimators add ``initial`` after the scan. Where an output of the rearranged form overflows, the program
  is solved again row by row in the reference's order and matches the float64 reference. The other way round,
  where the reference's order overflows at an intermediate step and the kernels' order does not, the kernels give
  a finite value (the exact one) where the reference has inf: GAE's advantage where only ``delta[t]`` overflows,
  or ``compute_episodic_prefix_sum`` of x = [-1e308, 1e308] with ``initial`` -1e308, which gives [-inf, -1e308]
  where the reference gives [-inf, -inf]. The torch backend adds in the reference's order, except V-trace's
  ``vs``: its multiply-add (``addcmul``) can give a finite value or +inf where the carried term alone overflows
  and the reference gives -inf or NaN (docs/kernels.md, "Known differences (open)").
* Outputs are targets and carry no gradient, on both backends, even when an
  input requires grad (pass the critic's values as they are; no ``detach`` needed).
* Under ``torch.compile`` a call that takes the Triton path is one custom operator
  (``torch.ops.fastrl.<estimator>``, :mod:`kernels._compile`): the same checks run while dynamo
  traces, except the overlap checks, which need data pointers (on both backends); an
  ``out=`` buffer gets the result through a copy after the whole computation, so sharing an
  input is harmless there; two ``out=`` buffers that share memory are not detected there and give
  wrong results. NumPy scalars are a graph break there (pass Python floats with
  ``fullgraph=True``). With ``fullgraph=True`` an argument error reaches the caller as
  dynamo's ``torch._dynamo.exc.Unsupported`` (a ``RuntimeError``) whose message quotes the
  ``ValueError``; without it, as the ``ValueError`` itself.
* Scalars (``gamma``, ``lambda_``, clips) are Python or NumPy reals (a 0-d NumPy array
  counts as its number); a tensor would need a host sync to read and is rejected.
* All checks look only at metadata (no device sync); every error is a
  ``ValueError`` naming the offending argument. The Triton path runs the tensor
  checks once per new metadata signature (shapes, strides, dtypes, devices, and
  whether an ``out`` buffer requires grad) and
  the scalar checks once per new value, then caches the result with the launch plan.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _compile
from . import _torch_backend as _tb
from . import _validation as V
from ._outputs import GAEOutput, VTraceOutput

Tensor = torch.Tensor


_OPS = []  # kernels._triton_ops once imported (importing it imports triton)
_is_compiling = torch.compiler.is_compiling


def _triton(backend, first):
    """kernels._triton_ops if this call takes the Triton path, else None (one call: it sits on every launch).

    The caller then calls ``ops._<ESTIMATOR>.hot.entry`` with the op's arguments: the newest launch function
    of that estimator, or its key path (kernels._triton_ops._Patterns). While torch.compile traces the call,
    kernels._compile.OPS instead: one custom operator per call, which dynamo can keep in its graph."""
    if backend == "auto":
        if not (isinstance(first, Tensor) and first.is_cuda):
            return None
    elif backend != "triton":
        V.check_backend(backend)  # "torch" passes; anything else raises
        return None
    if _is_compiling():
        return _compile.OPS
    if not _OPS:
        from . import _triton_ops
        _OPS.append(_triton_ops)
    return _OPS[0]


def compute_gae(rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Optional[Tensor] = None, *,
                gamma: float, lambda_: float, bootstrap_value: Optional[Tensor] = None,
                next_values: Optional[Tensor] = None, backend: str = "auto",
                out: Optional[Tuple[Tensor, Tensor]] = None) -> GAEOutput:
    """Generalized Advantage Estimation (Schulman et al. 2015, arXiv:1506.02438).

    Recurrence (backward in time)::

        delta[t] = r[t] + gamma*(1-terminated[t])*V+[t] - values[t]
        A[t]     = delta[t] + gamma*lambda_*(1-done[t])*A[t+1],   A[T] = 0
        returns  = A + values

    On the Triton path with ``bootstrap_value``, an advantage whose ``delta[t]`` alone passes the dtype's largest
    value can be finite (the exact value) where the reference has inf (see "Known differences" in :mod:`kernels.api`).

    Args:
        rewards, values: ``[T, *B]`` floating.
        terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1); truncated optional.
        gamma, lambda_: real numbers in [0, 1] (Python or NumPy; not tensors).
        bootstrap_value: ``[*B]`` value of the state after the window, or
        next_values: ``[T, *B]`` value of each step's true next state. Exactly one is required.
        backend: ``"auto" | "triton" | "torch"``.
        out: optional ``(advantages, returns)`` buffers.

    Returns:
        ``GAEOutput(advantages, returns)``, both ``[T, *B]`` with the dtype of ``rewards``.

    Raises:
        ValueError: mismatched shapes, bootstrap_value not ``[*B]``, both or neither bootstrap
        form, gamma/lambda_ outside [0, 1], non-floating rewards/values/bootstrap_value/next_values,
        different devices, unknown backend, invalid ``out`` buffers and non-real or tensor scalars
        (see :mod:`kernels.api`).
    """
    ops = _triton(backend, rewards)
    if ops is not None:
        return ops._GAE.hot.entry(rewards, values, terminated, truncated, bootstrap_value, next_values, out,
                                  gamma, lambda_)
    out = V.tensors_gae(rewards, values, terminated, truncated, bootstrap_value, next_values, out)
    g, lam = V.scalars_gamma_lambda(gamma, lambda_)
    return GAEOutput(*_tb.gae(rewards, values, terminated, truncated, g, lam, bootstrap_value, next_values, out))

def compute_vtrace(rewards: Tensor, values: Tensor, terminated: Tensor, truncated: Optional[Tensor] = None, *,
                   behaviour_log_probs: Tensor, target_log_probs: Tensor, gamma: float, lambda_: float = 1.0,
                   rho_clip: float = 1.0, c_clip: float = 1.0, pg_rho_clip: float = 1.0,
                   bootstrap_value: Optional[Tensor] = None, next_values: Optional[Tensor] = None,
                   backend: str = "auto", out: Optional[Tuple[Tensor, Tensor]] = None) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA, arXiv:1802.01561).

    With ``log_rho = target_log_probs - behaviour_log_probs``::

        rho    = exp(min(log_rho, log rho_clip))
        c      = lambda_ * exp(min(log_rho, log c_clip))
        pg_rho = exp(min(log_rho, log pg_rho_clip))          (clips may be inf)
        delta[t] = r[t] + gamma*(1-terminated[t])*V+[t] - values[t]
        vs[t] - values[t] = rho[t]*delta[t] + gamma*(1-done[t])*c[t]*(vs[t+1] - values[t+1])
                            (the trace term is 0 past the window and past a done, whatever c[t] is)
        pg_advantages[t]  = pg_rho[t]*(r[t] + gamma*(1-terminated[t])*w[t] - values[t])
        w[t] = vs[t+1] if not done[t] and t < T-1, else V+[t]

    The trace term is taken as 0 wherever gamma or lambda_ is 0, past the window and past a done, even
    where the ratio overflows the dtype (a float32 log ratio above 88.7) or is infinite (a behaviour
    log-prob of -inf). Elsewhere such a ratio is clipped like any other: with a finite ``c_clip``,
    ``c = lambda_ * c_clip``; with ``c_clip=inf``, ``c`` is infinite and the targets of the steps before
    it in that episode are infinite (or NaN) too. Where an intermediate sum of the reference passes the dtype's
    largest value, the result can differ from the reference's inf or NaN (see "Known differences" in
    :mod:`kernels.api`).

    Args:
        rewards, values, behaviour_log_probs, target_log_probs: ``[T, *B]`` floating
        (log-probabilities of the taken actions).
        terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1); truncated optional.
        gamma, lambda_: in [0, 1]. rho_clip, c_clip, pg_rho_clip: > 0 (``inf`` allowed).
        bootstrap_value ``[*B]`` or next_values ``[T, *B]`` (floating): exactly one.
        backend, out: see module docs; ``out`` is ``(vs, pg_advantages)``.

    Returns:
        ``VTraceOutput(vs, pg_advantages)``, ``[T, *B]``, dtype of ``rewards``.

    Raises:
        ValueError: shapes, bootstrap form, gamma/lambda_ range, clips <= 0, non-floating
        rewards/values/log-probs/bootstrap_value/next_values, devices, backend, invalid ``out`` buffers
        and non-real or tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, rewards)
    if ops is not None:
        return ops._VTRACE.hot.entry(rewards, values, terminated, truncated, bootstrap_value, next_values,
                                     behaviour_log_probs, target_log_probs, out, gamma, lambda_, rho_clip, c_clip,
                                     pg_rho_clip)
    out = V.tensors_vtrace(rewards, values, terminated, truncated, bootstrap_value, next_values,
                           behaviour_log_probs, target_log_probs, out)
    g, lam, rc, cc, pc = V.scalars_vtrace(gamma, lambda_, rho_clip, c_clip, pg_rho_clip)
    return VTraceOutput(*_tb.vtrace(rewards, values, terminated, truncated, behaviour_log_probs, target_log_probs,
                                    g, lam, rc, cc, pc, bootstrap_value, next_values, out))

def compute_lambda_returns(rewards: Tensor, values: Tensor, terminated: Tensor,
                           truncated: Optional[Tensor] = None, *, gamma: float, lambda_: float,
                           bootstrap_value: Optional[Tensor] = None, next_values: Optional[Tensor] = None,
                           backend: str = "auto", out: Optional[Tensor] = None) -> Tensor:
    """TD(lambda) returns (Sutton 1988; as used in Schulman et al. 2015, arXiv:1506.02438).

    Recurrence (backward)::

        G[t] = r[t] + gamma*(1-terminated[t])*((1-l[t])*V+[t] + l[t]*G[t+1])
        l[t] = lambda_*(1-done[t]) for t < T-1,  l[T-1] = 0

    Equal to GAE's ``returns`` when ``next_values[t] == values[t+1]`` at non-done steps
    (always true in the bootstrap_value form).

    Args:
        rewards, values: ``[T, *B]`` floating; terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1).
        gamma, lambda_: in [0, 1]. bootstrap_value ``[*B]`` or next_values ``[T, *B]`` (floating): exactly one.
        backend, out: see module docs (``out`` is one ``[T, *B]`` tensor of the output dtype).

    Returns:
        ``[T, *B]`` tensor, dtype of ``rewards``.

    Raises:
        ValueError: shapes, bootstrap form, gamma/lambda_ range, non-floating inputs, devices, backend,
        invalid ``out`` buffers and non-real or tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, rewards)
    if ops is not None:
        return ops._LAMBDA.hot.entry(rewards, values, terminated, truncated, bootstrap_value, next_values, out,
                                     gamma, lambda_)
    out = V.tensors_lambda_returns(rewards, values, terminated, truncated, bootstrap_value, next_values, out)
    g, lam = V.scalars_gamma_lambda(gamma, lambda_)
    return _tb.lambda_returns(rewards, values, terminated, truncated, g, lam, bootstrap_value, next_values, out)

def compute_discounted_returns(rewards: Tensor, terminated: Tensor, truncated: Optional[Tensor] = None, *,
                               gamma: float, bootstrap_value: Optional[Tensor] = None,
                               next_values: Optional[Tensor] = None, backend: str = "auto",
                               out: Optional[Tensor] = None) -> Tensor:
    """Discounted (Monte Carlo) returns with episode boundaries (Sutton & Barto 2018, ch. 3; no arXiv id).

    Recurrence (backward)::

        G[t] = r[t] + gamma*(1-terminated[t])*C[t]
        C[t] = G[t+1]          if not done[t] and t < T-1
             = next_values[t]  otherwise, if next_values is given
             = bootstrap_value if t = T-1 and bootstrap_value is given
             = 0               otherwise

    The bootstrap is optional. With neither form, returns are cut (bootstrapped from 0) at the
    window's end and at every truncation. ``bootstrap_value`` bootstraps only the window's last
    step, so a truncation inside the window still bootstraps from 0; pass ``next_values`` to
    bootstrap truncations. Giving both is a ``ValueError``.

    Args:
        rewards: ``[T, *B]`` floating; terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1);
        gamma in [0, 1].
        bootstrap_value ``[*B]`` / next_values ``[T, *B]``: optional, at most one (floating).
        backend, out: see module docs (``out`` is one ``[T, *B]`` tensor of the output dtype).

    Returns:
        ``[T, *B]`` tensor, dtype of ``rewards``.

    Raises:
        ValueError: shapes, both bootstrap forms, gamma range, non-floating rewards/bootstrap_value/
        next_values, devices, backend, invalid ``out`` buffers and non-real or tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, rewards)
    if ops is not None:
        return ops._DISCOUNTED.hot.entry(rewards, terminated, truncated, bootstrap_value, next_values, out,
                                         gamma)
    out = V.tensors_discounted_returns(rewards, terminated, truncated, bootstrap_value, next_values, out)
    (g,) = V.scalars_gamma(gamma)
    return _tb.discounted_returns(rewards, terminated, truncated, g, bootstrap_value, next_values, out)

def compute_retrace(rewards: Tensor, q_values: Tensor, values: Optional[Tensor], terminated: Tensor,
                    truncated: Optional[Tensor] = None, *, behaviour_log_probs: Tensor,
                    target_log_probs: Tensor, gamma: float, lambda_: float = 1.0, c_clip: float = 1.0,
                    bootstrap_value: Optional[Tensor] = None, next_values: Optional[Tensor] = None,
                    backend: str = "auto", out: Optional[Tensor] = None) -> Tensor:
    """Retrace(lambda) Q-value targets (Munos et al. 2016, arXiv:1606.02647).

    Inputs per step t (state x_t, taken action a_t):

    * ``q_values[t] = Q(x_t, a_t)`` of the taken action,
    * ``values[t] = E_{a~pi} Q(x_t, a)``: the expected Q of x_t under the target policy
      (read only in the ``bootstrap_value`` form; with ``next_values`` it may be ``None``, and if
      given it is still checked for shape, dtype and device, and a float64 one still makes the
      computation float64 by the dtype rule of :mod:`kernels.api`),
    * ``behaviour_log_probs[t] = log mu(a_t|x_t)``, ``target_log_probs[t] = log pi(a_t|x_t)``,
    * ``V+[t]``: expected Q of the true next state: ``next_values[t]`` if given, else
      ``values[t+1]`` (t < T-1) / ``bootstrap_value`` (t = T-1).

    Recurrence (backward), traces taken at the next step, no importance weight on the TD error::

        c[t]     = lambda_ * min(c_clip, pi(a_t|x_t)/mu(a_t|x_t))
        k[t]     = (1-done[t]) for t < T-1,  k[T-1] = 0
        Q_ret[t] = r[t] + gamma*(1-terminated[t]) * (V+[t] + k[t]*c[t+1]*(Q_ret[t+1] - q_values[t+1]))

    The float64 reference (``kernels.reference.retrace``) adds in the order ``(r[t] + gamma*V+[t]) +
    (gamma*k[t]*c[t+1])*(Q_ret[t+1] - q_values[t+1])`` (``r[t]`` where terminated), which decides where a sum
    near the end of the dtype's range overflows (docs/kernels.md, "Known differences (open)").
    Equivalently ``Q_ret[t] - q[t] = sum_s gamma^(s-t) (c[t+1]...c[s]) delta[s]`` with
    ``delta[s] = r[s] + gamma*(1-terminated[s])*V+[s] - q[s]``, cut at done. The trace term is taken as 0
    wherever gamma or lambda_ is 0 and where ``k`` is 0, even where the ratio overflows the dtype or is
    infinite; elsewhere such a ratio is clipped like any other (with ``c_clip=inf`` the trace, and the
    targets of the steps before it in that episode, are infinite or NaN).

    Args:
        rewards, q_values, behaviour_log_probs, target_log_probs: ``[T, *B]`` floating.
        values: ``[T, *B]`` floating or ``None`` (then next_values is required).
        terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1). gamma, lambda_ in [0, 1];
        c_clip > 0 (inf allowed).
        bootstrap_value ``[*B]`` or next_values ``[T, *B]`` (floating): exactly one.
        backend, out: see module docs (``out`` is one ``[T, *B]`` tensor of the output dtype).

    Returns:
        ``[T, *B]`` Q targets, dtype of ``rewards``.

    Raises:
        ValueError: shapes, bootstrap form (or values=None without next_values), gamma/lambda_
        range, c_clip <= 0, non-floating inputs, devices, backend, invalid ``out`` buffers and non-real or
        tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, rewards)
    if ops is not None:
        return ops._RETRACE.hot.entry(rewards, q_values, values, terminated, truncated, bootstrap_value,
                                      next_values, behaviour_log_probs, target_log_probs, out, gamma, lambda_,
                                      c_clip)
    out = V.tensors_retrace(rewards, q_values, values, terminated, truncated, bootstrap_value, next_values,
                            behaviour_log_probs, target_log_probs, out)
    g, lam, cc = V.scalars_retrace(gamma, lambda_, c_clip)
    return _tb.retrace(rewards, q_values, values, terminated, truncated, behaviour_log_probs,
                       target_log_probs, g, lam, cc, bootstrap_value, next_values, out)


def compute_eligibility_traces(x: Tensor, terminated: Tensor, truncated: Optional[Tensor] = None, *,
                               gamma: float, lambda_: float, initial: Optional[Tensor] = None,
                               backend: str = "auto", out: Optional[Tensor] = None) -> Tensor:
    """Accumulating eligibility traces, reset at episode ends: the backward view of TD(lambda)
    (Sutton 1988, "Learning to predict by the methods of temporal differences"; Sutton & Barto 2018,
    ch. 12; neither has an arXiv id).

    Recurrence (forward)::

        e[t] = x[t] + gamma*lambda_*(1-done[t-1])*e[t-1],   e[-1] = initial (or 0), done[-1] = 0

    The Triton path adds ``initial`` after the scan (``e[t] = P[t] + B[t]*initial``); where the recurrence's
    own order overflows and that one does not, its result is finite where the reference has inf (see "Known
    differences" in :mod:`kernels.api`).

    Args:
        x: ``[T, *B]`` floating; terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1);
        gamma, lambda_ in [0, 1]; initial: optional ``[*B]`` floating carry from the previous window.
        backend, out: see module docs (``out`` is one ``[T, *B]`` tensor of the output dtype).

    Returns:
        ``[T, *B]`` tensor, dtype of ``x``.

    Raises:
        ValueError: shapes (x, flags, initial), gamma/lambda_ range, non-floating x or initial, devices,
        backend, invalid ``out`` buffers and non-real or tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, x)
    if ops is not None:
        return ops._ELIG.hot.entry(x, terminated, truncated, initial, out, gamma, lambda_)
    out = V.tensors_forward(x, terminated, truncated, initial, out)
    g, lam = V.scalars_gamma_lambda(gamma, lambda_)
    return _tb.eligibility_traces(x, terminated, truncated, g, lam, initial, out)

def compute_episodic_prefix_sum(x: Tensor, terminated: Tensor, truncated: Optional[Tensor] = None, *,
                                initial: Optional[Tensor] = None, backend: str = "auto",
                                out: Optional[Tensor] = None) -> Tensor:
    """Per-episode running sum (e.g. episode returns / lengths), reset after each done.
    A segmented scan (Blelloch 1990, "Prefix sums and their applications", CMU-CS-90-190; no arXiv id).

    Recurrence (forward)::

        S[t] = x[t] + (1-done[t-1])*S[t-1],   S[-1] = initial (or 0), done[-1] = 0

    The Triton path adds ``initial`` after the scan (``S[t] = P[t] + initial`` up to the first done); where the
    recurrence's own order overflows and that one does not, its result is finite where the reference has inf (see
    "Known differences" in :mod:`kernels.api`).

    Args:
        x: ``[T, *B]`` floating; terminated, truncated: ``[T, *B]`` flags (bool / integer / float 0-1);
        initial: optional ``[*B]`` floating carry from the previous window.
        backend, out: see module docs (``out`` is one ``[T, *B]`` tensor of the output dtype).

    Returns:
        ``[T, *B]`` tensor, dtype of ``x``.

    Raises:
        ValueError: shapes (x, flags, initial), non-floating x or initial, devices, backend,
        invalid ``out`` buffers and non-real or tensor scalars (see :mod:`kernels.api`).
    """
    ops = _triton(backend, x)
    if ops is not None:
        return ops._PREFIX.hot.entry(x, terminated, truncated, initial, out)
    out = V.tensors_forward(x, terminated, truncated, initial, out)
    return _tb.episodic_prefix_sum(x, terminated, truncated, initial, out)
