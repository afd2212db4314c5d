"""Cases from public bug reports that a one-environment JSON case cannot hold (batch layout, vectorised against
per-environment calls, gradients), beside the third set of JSON cases (``tests/data/bug_report_cases_third.json``,
run by test_kernels_more_bug_reports.py). The expected values are worked out by hand from the ``kernels/api.py``
docstrings (not from ``kernels.reference``), and every test runs through both backends ("triton" under
TRITON_INTERPRET=1 on a CPU, "triton-cuda" on a GPU).
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.shared_cases import BACKENDS, kernels_on  # noqa: E402

DTYPES = [torch.float32, torch.float64]
TOLERANCE = {torch.float64: (1e-9, 1e-12), torch.float32: (1e-5, 1e-6)}


def _close(got, expected, dtype, what):
    rtol, atol = TOLERANCE[dtype]
    assert got.dtype == dtype and got.shape == expected.shape, what
    torch.testing.assert_close(got.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_discounted_returns_scan_time_not_batch(backend, dtype):
    """https://github.com/juliusfrost/dreamer-pytorch/issues/59
    Guards: discounting runs along dim 0 (time) with the first reward undiscounted (gamma^0), not over the batch
    dimension; T = 2 != N = 3 so an axis mix-up changes the shape or the values."""
    rewards = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=dtype)      # rows are time steps, columns envs
    got = kernels_on(backend).compute_discounted_returns(rewards, torch.zeros(2, 3, dtype=torch.bool), gamma=0.5,
                                             backend=backend)
    # G0 = r0 + 0.5*r1 per env: 1 + 2 = 3, 2 + 2.5 = 4.5, 3 + 3 = 6; G1 = r1
    _close(got, torch.tensor([[3.0, 4.5, 6.0], [4.0, 5.0, 6.0]]), dtype, "returns")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_major_storage_passed_as_a_time_major_view(backend, dtype):
    """https://github.com/juliusfrost/dreamer-pytorch/issues/59 (strided .t() view, uint8 flags)
    Guards: batch-major [N, T] storage passed as the non-contiguous time-major view ``.t()`` is still scanned along
    time, for discounted returns and GAE."""
    rb = torch.tensor([[1, 4], [2, 5], [3, 6]], dtype=dtype)            # [N=3, T=2]
    vb = torch.tensor([[1, 1], [0, 2], [3, 0]], dtype=dtype)
    tb = torch.tensor([[0, 0], [1, 0], [0, 0]], dtype=torch.uint8)      # env 1 terminated at t=0
    got = kernels_on(backend).compute_discounted_returns(rb.t(), tb.t(), gamma=0.5, backend=backend)
    # env0: [1 + 0.5*4, 4] = [3, 4]; env1: [2 (terminated), 5]; env2: [3 + 0.5*6, 6] = [6, 6]
    _close(got, torch.tensor([[3.0, 2.0, 6.0], [4.0, 5.0, 6.0]]), dtype, "discounted returns")
    adv, ret = kernels_on(backend).compute_gae(rb.t(), vb.t(), tb.t(), gamma=0.5, lambda_=1.0,
                                   bootstrap_value=torch.tensor([2.0, 2.0, 2.0], dtype=dtype), backend=backend)
    # env0: A1 = 4 + 0.5*2 - 1 = 4, A0 = (1 + 0.5*1 - 1) + 0.5*4 = 2.5
    # env1: A1 = 5 + 1 - 2 = 4,     A0 = 2 - 0 = 2 (terminated)
    # env2: A1 = 6 + 1 - 0 = 7,     A0 = (3 + 0 - 3) + 0.5*7 = 3.5
    expected_adv = torch.tensor([[2.5, 2.0, 3.5], [4.0, 4.0, 7.0]])
    _close(adv, expected_adv, dtype, "advantages")
    _close(ret, expected_adv + torch.tensor([[1.0, 0.0, 3.0], [1.0, 2.0, 0.0]]), dtype, "returns")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_vectorised_discounting_equals_per_environment(backend, dtype):
    """https://github.com/learnables/cherry/issues/27
    Guards: a vectorised (multi-env) call discounts each column with its own flags and equals three single-env
    calls."""
    r = [[1, 1, 1, 1], [1, 2, 3, 4], [2, 0, 2, 0]]
    term = [[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    trunc = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    # gamma 0.5, no bootstrap:
    # env0: terminated at 1: [1 + 0.5*1, 1, 1 + 0.5*1, 1] = [1.5, 1, 1.5, 1]
    # env1: terminated at 3: G3 = 4, G2 = 3 + 2 = 5, G1 = 2 + 2.5 = 4.5, G0 = 1 + 2.25 = 3.25
    # env2: truncated at 0 (bootstrap 0): [2, 0 + 0.5*2, 2, 0] = [2, 1, 2, 0]
    expected = [[1.5, 1, 1.5, 1], [3.25, 4.5, 5, 4], [2, 1, 2, 0]]
    tm = lambda xs, dt: torch.tensor(xs, dtype=dt).t()  # noqa: E731 - per-env rows -> [T, N]
    batched = kernels_on(backend).compute_discounted_returns(tm(r, dtype), tm(term, torch.bool), tm(trunc, torch.bool),
                                                 gamma=0.5, backend=backend)
    _close(batched, tm(expected, torch.float64), dtype, "vectorised")
    for n in range(3):
        single = kernels_on(backend).compute_discounted_returns(tm([r[n]], dtype), tm([term[n]], torch.bool),
                                                    tm([trunc[n]], torch.bool), gamma=0.5, backend=backend)
        _close(single, tm([expected[n]], torch.float64), dtype, f"env {n}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_carry_no_gradient(backend):
    """https://github.com/google-deepmind/rlax/issues/28 (also Farama-Foundation/Gymnasium#1494)
    Guards: targets are constants for the loss: no output has requires_grad or a grad_fn, even when the rewards,
    values, bootstrap or target log-probs require grad (rlax's stop_target_gradients defaulted to False)."""
    f64 = torch.float64
    v = torch.tensor([[1.0], [2.0]], dtype=f64, requires_grad=True)
    r = torch.tensor([[1.0], [0.0]], dtype=f64, requires_grad=True)
    b = torch.tensor([3.0], dtype=f64, requires_grad=True)
    f = torch.zeros(2, 1, dtype=torch.bool)
    z = torch.zeros(2, 1, dtype=f64)
    k = kernels_on(backend)
    outs = [*k.compute_gae(r, v, f, gamma=0.9, lambda_=0.9, bootstrap_value=b),
            *k.compute_vtrace(r, v, f, behaviour_log_probs=z, target_log_probs=z.clone().requires_grad_(), gamma=0.9,
                              bootstrap_value=b),
            k.compute_lambda_returns(r, v, f, gamma=0.9, lambda_=0.5, bootstrap_value=b),
            k.compute_discounted_returns(r, f, gamma=0.9, bootstrap_value=b),
            k.compute_retrace(r, v, v, f, behaviour_log_probs=z, target_log_probs=z, gamma=0.9, bootstrap_value=b),
            k.compute_eligibility_traces(v, f, gamma=0.9, lambda_=0.5),
            k.compute_episodic_prefix_sum(v, f)]
    assert len(outs) == 9
    assert [o.requires_grad or o.grad_fn is not None for o in outs] == [False] * 9
