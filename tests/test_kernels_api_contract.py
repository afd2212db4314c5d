"""Contract details of the kernels API that both backends must share (inputs needing grad, scalar types)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before kernels imports triton

import numpy as np
import pytest
import torch

import kernels
from kernels import reference

BACKENDS = ("torch", "triton")


def _inputs(T=5, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.2
    truncated = torch.rand(T, N, generator=g) < 0.2
    bootstrap = torch.randn(N, generator=g)
    return rewards, values, terminated, truncated, bootstrap


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_requiring_grad_give_constant_targets(backend):
    rewards, values, terminated, truncated, bootstrap = _inputs()
    critic = values.clone().requires_grad_(True)  # e.g. the critic's output, not detached
    out = kernels.compute_gae(rewards, critic, terminated, truncated, gamma=0.9, lambda_=0.8,
                              bootstrap_value=bootstrap, backend=backend)
    assert not out.advantages.requires_grad and not out.returns.requires_grad
    expected = reference.gae(rewards.double(), values.double(), terminated, truncated, gamma=0.9, lambda_=0.8,
                             bootstrap_value=bootstrap.double())
    torch.testing.assert_close(out.advantages.double(), expected[0], rtol=1e-5, atol=1e-5)
    x = values.clone().requires_grad_(True)
    prefix = kernels.compute_episodic_prefix_sum(x, terminated, truncated, backend=backend)
    assert not prefix.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gamma", ["0.9", torch.tensor(0.9), None, True, np.array([0.9]), np.array(True),
                                   np.array(0.9 + 0j)])
def test_gamma_must_be_a_real_number(backend, gamma):
    rewards, values, terminated, truncated, bootstrap = _inputs()
    with pytest.raises(ValueError, match=r"^gamma must be a real number \(Python or NumPy float or int\) in \[0, 1\]"):
        kernels.compute_gae(rewards, values, terminated, truncated, gamma=gamma, lambda_=0.9,
                            bootstrap_value=bootstrap, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_scalars_and_zero_dimensional_arrays_are_the_python_number(backend):
    """torch.compile hands a NumPy scalar made inside the compiled function over as a 0-d array."""
    rewards, values, terminated, truncated, bootstrap = _inputs()
    want = kernels.compute_gae(rewards, values, terminated, truncated, gamma=0.75, lambda_=0.5,
                               bootstrap_value=bootstrap, backend=backend)
    for gamma, lambda_ in ((np.float32(0.75), np.float64(0.5)), (np.array(0.75), np.array(0.5, dtype=np.float32)),
                           (np.array(0.75, dtype=np.float16), np.array(0.5))):
        got = kernels.compute_gae(rewards, values, terminated, truncated, gamma=gamma, lambda_=lambda_,
                                  bootstrap_value=bootstrap, backend=backend)
        torch.testing.assert_close(tuple(got), tuple(want), rtol=0, atol=0)
    got = kernels.compute_gae(rewards, values, terminated, truncated, gamma=np.array(1, dtype=np.uint8),
                              lambda_=np.int64(0), bootstrap_value=bootstrap, backend=backend)
    torch.testing.assert_close(tuple(got), tuple(kernels.compute_gae(
        rewards, values, terminated, truncated, gamma=1.0, lambda_=0.0, bootstrap_value=bootstrap, backend=backend)))
    with pytest.raises(ValueError, match=r"^gamma must be in \[0, 1\], got array\(1.5\)$"):
        kernels.compute_gae(rewards, values, terminated, truncated, gamma=np.array(1.5), lambda_=0.5,
                            bootstrap_value=bootstrap, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bool_is_rejected_even_after_the_equal_float_was_accepted(backend):
    """True == 1.0 and False == 0 (same hash): a cache of checked scalars must not let them through."""
    rewards, values, terminated, truncated, bootstrap = _inputs()
    kernels.compute_gae(rewards, values, terminated, truncated, gamma=1.0, lambda_=0.0,
                        bootstrap_value=bootstrap, backend=backend)
    with pytest.raises(ValueError, match="gamma"):
        kernels.compute_gae(rewards, values, terminated, truncated, gamma=True, lambda_=0.0,
                            bootstrap_value=bootstrap, backend=backend)
    with pytest.raises(ValueError, match="lambda_"):
        kernels.compute_gae(rewards, values, terminated, truncated, gamma=1.0, lambda_=False,
                            bootstrap_value=bootstrap, backend=backend)


def test_a_meta_tensor_after_a_cached_cpu_call_names_the_device():
    rewards, values, terminated, truncated, bootstrap = _inputs()
    kernels.compute_gae(rewards, values, terminated, truncated, gamma=0.9, lambda_=0.9,
                        bootstrap_value=bootstrap, backend="triton")
    with pytest.raises(ValueError, match="values is on meta"):
        kernels.compute_gae(rewards, values.to("meta"), terminated, truncated, gamma=0.9, lambda_=0.9,
                            bootstrap_value=bootstrap, backend="triton")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("argument", ["rewards", "values", "terminated", "bootstrap_value", "out"])
def test_a_sparse_tensor_is_a_value_error_naming_it(backend, argument):
    """A sparse tensor has no strided storage: on the Triton path its data_ptr raises a RuntimeError while the
    call's key is built, after an accepted call with the same shapes has cached a plan."""
    rewards, values, terminated, truncated, bootstrap = _inputs()
    kw = dict(gamma=0.9, lambda_=0.9, backend=backend)
    args = dict(rewards=rewards, values=values, terminated=terminated, bootstrap_value=bootstrap,
                out=(torch.empty_like(rewards), torch.empty_like(rewards)))
    kernels.compute_gae(**args, **kw)
    if argument == "out":
        args["out"] = (args["out"][0].to_sparse(), args["out"][1])
        name = "out.advantages"
    else:
        args[argument] = args[argument].to_sparse()
        name = argument
    with pytest.raises(ValueError, match=rf"^{name} must be a dense \(torch.strided\) tensor, got layout "
                                         rf"torch.sparse_coo"):
        kernels.compute_gae(**args, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_int_beyond_float_range_is_a_value_error(backend):
    rewards, values, terminated, truncated, bootstrap = _inputs()
    with pytest.raises(ValueError, match="gamma"):
        kernels.compute_gae(rewards, values, terminated, truncated, gamma=10 ** 400, lambda_=0.9,
                            bootstrap_value=bootstrap, backend=backend)
    with pytest.raises(ValueError, match="rho_clip"):
        kernels.compute_vtrace(rewards, values, terminated, behaviour_log_probs=values, target_log_probs=values,
                               gamma=0.9, rho_clip=10 ** 400, bootstrap_value=bootstrap, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_horizon_gives_empty_outputs(backend):
    """T = 0 (e.g. a rollout cut before its first step): every estimator returns [0, N] tensors."""
    T, N = 0, 3
    r, v, q, blp, tlp = (torch.randn(T, N) for _ in range(5))
    te, tr = torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.bool)
    bv, ini = torch.randn(N), torch.randn(N)
    kw = dict(backend=backend)
    outs = [
        *kernels.compute_gae(r, v, te, tr, gamma=0.9, lambda_=0.9, bootstrap_value=bv, **kw),
        *kernels.compute_vtrace(r, v, te, tr, behaviour_log_probs=blp, target_log_probs=tlp, gamma=0.9,
                                bootstrap_value=bv, **kw),
        kernels.compute_lambda_returns(r, v, te, tr, gamma=0.9, lambda_=0.9, bootstrap_value=bv, **kw),
        kernels.compute_discounted_returns(r, te, tr, gamma=0.9, bootstrap_value=bv, **kw),
        kernels.compute_discounted_returns(r, te, tr, gamma=0.9, next_values=v, **kw),
        kernels.compute_retrace(r, q, v, te, tr, behaviour_log_probs=blp, target_log_probs=tlp, gamma=0.9,
                                bootstrap_value=bv, **kw),
        kernels.compute_eligibility_traces(r, te, tr, gamma=0.9, lambda_=0.9, initial=ini, **kw),
        kernels.compute_episodic_prefix_sum(r, te, tr, **kw),
    ]
    assert all(o.shape == (T, N) and o.dtype == torch.float32 for o in outs)


def _every_estimator(r, te, bv, ini, backend, outs=None):
    """All seven estimators' outputs on rewards/values/log-probs/x ``r``, flags ``te``, bootstrap ``bv`` and
    ``initial`` ``ini``; ``outs(n)`` gives each call's ``out=`` (a tuple of n buffers for GAE and V-trace)."""
    one = (lambda: None) if outs is None else (lambda: outs(1)[0])
    two = (lambda: None) if outs is None else (lambda: outs(2))
    lp = dict(behaviour_log_probs=r, target_log_probs=r * 0.5)
    kw = dict(gamma=0.9, backend=backend)
    return [
        *kernels.compute_gae(r, r, te, lambda_=0.8, bootstrap_value=bv, out=two(), **kw),
        *kernels.compute_vtrace(r, r, te, **lp, bootstrap_value=bv, out=two(), **kw),
        kernels.compute_lambda_returns(r, r, te, lambda_=0.8, bootstrap_value=bv, out=one(), **kw),
        kernels.compute_discounted_returns(r, te, bootstrap_value=bv, out=one(), **kw),
        kernels.compute_retrace(r, r, r, te, **lp, bootstrap_value=bv, out=one(), **kw),
        kernels.compute_eligibility_traces(r, te, lambda_=0.8, initial=ini, out=one(), **kw),
        kernels.compute_episodic_prefix_sum(r, te, initial=ini, out=one(), backend=backend),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_horizon_with_batch_dims_read_through_a_copy_gives_empty_outputs(backend):
    """T = 0 with ``[*B] = [2, 3]`` in layouts whose batch dims one stride cannot address (transposed views), which
    the Triton path copies to ``[T, N]``: the copy cannot recover N from an empty ``[T, *B]`` and raised a
    RuntimeError there (an eighth independent fuzz)."""
    r = torch.zeros(0, 3, 2).transpose(1, 2)  # [0, 2, 3]
    te = torch.zeros(0, 2, 3, dtype=torch.bool)
    for bv, ini, outs in [
        (torch.zeros(3, 2).t(), torch.zeros(3, 2).t(), None),
        (torch.zeros(2, 3), torch.zeros(2, 3), lambda n: tuple(torch.empty(0, 3, 2).transpose(1, 2) for _ in range(n))),
    ]:
        got = _every_estimator(r.contiguous() if outs else r, te, bv, ini, backend, outs)
        assert len(got) == 9 and all(o.shape == (0, 2, 3) and o.dtype == torch.float32 for o in got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lazily_negated_float16_out_gets_the_values_with_their_sign(backend):
    """An ``out=`` that is a lazily negated float16 view (``is_neg()``) holds what a fresh output holds: PyTorch's
    CPU ``copy_`` from float32 into such a view gives the values the wrong sign (torch 2.13), and the torch backend
    wrote its float32 results through it (an eighth independent fuzz)."""
    g = torch.Generator().manual_seed(3)
    r = torch.randn(6, 4, generator=g).half()
    te = torch.rand(6, 4, generator=g) < 0.3
    bv, ini = torch.randn(4, generator=g).half(), torch.randn(4, generator=g).half()
    want = _every_estimator(r, te, bv, ini, backend)
    got = _every_estimator(r, te, bv, ini, backend,
                           lambda n: tuple(torch._neg_view(torch.zeros(6, 4, dtype=torch.float16)) for _ in range(n)))
    assert all(o.is_neg() for o in got)
    for w, o in zip(want, got):
        assert w.abs().max() > 0
        torch.testing.assert_close(o, w, rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_out_made_in_inference_mode_is_written_outside_it(backend):
    """``out=`` buffers allocated under ``torch.inference_mode()`` and used outside it get the outputs on both
    backends (PyTorch refuses in-place writes to them there, which the torch backend, and the Triton path's copy
    into an out= whose batch dims one stride cannot address, raised as a RuntimeError)."""
    g = torch.Generator().manual_seed(4)
    r = torch.randn(5, 3, generator=g)
    te = torch.rand(5, 3, generator=g) < 0.3
    bv, ini = torch.randn(3, generator=g), torch.randn(3, generator=g)
    want = _every_estimator(r, te, bv, ini, backend)
    with torch.inference_mode():
        buffers = [torch.full((5, 3), float("nan")) for _ in range(9)]
    pool = iter(buffers)
    got = _every_estimator(r, te, bv, ini, backend, lambda n: tuple(next(pool) for _ in range(n)))
    assert all(o is b for o, b in zip(got, buffers))
    for w, o in zip(want, got):
        torch.testing.assert_close(o, w, rtol=0, atol=0)
    # batch dims one stride cannot address: the Triton path writes such an out= through a copy
    r3, te3 = torch.randn(4, 2, 3, generator=g), torch.rand(4, 2, 3, generator=g) < 0.3
    with torch.inference_mode():
        out = torch.full((4, 3, 2), float("nan")).transpose(1, 2)
    got = kernels.compute_episodic_prefix_sum(r3, te3, out=out, backend=backend)
    assert got is out
    torch.testing.assert_close(got, kernels.compute_episodic_prefix_sum(r3, te3, backend=backend), rtol=0, atol=0)


def test_the_reference_also_takes_an_empty_horizon():
    """T = 0 through the float64 reference (the spec): [0, N] float64 tensors, as from the backends."""
    T, N = 0, 3
    r, v, q, lp = (torch.randn(T, N) for _ in range(4))
    te = torch.zeros(T, N, dtype=torch.bool)
    bv = torch.randn(N)
    outs = [
        *reference.gae(r, v, te, gamma=0.9, lambda_=0.9, bootstrap_value=bv),
        *reference.vtrace(r, v, te, behaviour_log_probs=lp, target_log_probs=lp, gamma=0.9, bootstrap_value=bv),
        reference.lambda_returns(r, v, te, gamma=0.9, lambda_=0.9, bootstrap_value=bv),
        reference.discounted_returns(r, te, gamma=0.9, bootstrap_value=bv),
        reference.retrace(r, q, v, te, behaviour_log_probs=lp, target_log_probs=lp, gamma=0.9, lambda_=0.9,
                          bootstrap_value=bv),
        reference.eligibility_traces(r, te, gamma=0.9, lambda_=0.9),
        reference.episodic_prefix_sum(r, te),
    ]
    assert all(o.shape == (T, N) and o.dtype == torch.float64 for o in outs)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("argument", ["rewards", "values", "terminated", "bootstrap_value"])
def test_a_float8_tensor_is_a_value_error_naming_it_on_both_backends(backend, argument):
    """float8 passes torch's is_floating_point, yet neither backend computes with it (Triton's loads have no
    arithmetic for it): a ValueError naming the argument and the floating dtypes taken, not an interpreter
    error from the kernels or a float8 result from the torch backend."""
    d = dict(rewards=torch.zeros(4, 3), values=torch.zeros(4, 3), terminated=torch.zeros(4, 3),
             bootstrap_value=torch.zeros(3))
    d[argument] = d[argument].to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=rf"{argument} must .*float16, bfloat16, float32(,| or) float64\), got "
                                         rf"torch.float8_e4m3fn"):
        kernels.compute_gae(**d, gamma=0.9, lambda_=0.9, backend=backend)
