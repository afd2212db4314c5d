"""Reference (spec) checks, validation errors, identities and the shared bug-report cases (torch backend).

The Triton kernels are checked in test_kernels_backends.py.
"""
import math
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import kernels  # noqa: E402
from tests.shared_cases import load_cases, run_case  # noqa: E402
from kernels import reference as ref  # noqa: E402

F64 = torch.float64


def col(xs, dtype=F64):
    return torch.tensor(xs, dtype=dtype).reshape(-1, 1)


# ---------------------------------------------------------------- hand-computed numbers for the reference


def test_reference_gae_by_hand():
    # gamma=0.5, lambda=0.5, r=[1,0], v=[1,2], bootstrap 4: delta1 = 0+2-2 = 0, delta0 = 1+1-1 = 1
    adv, ret = ref.gae(col([1, 0]), col([1, 2]), col([0, 0]), gamma=0.5, lambda_=0.5,
                       bootstrap_value=torch.tensor([4.0], dtype=F64))
    assert adv[:, 0].tolist() == pytest.approx([1.0, 0.0])
    assert ret[:, 0].tolist() == pytest.approx([2.0, 2.0])


def test_reference_vtrace_truncation_by_hand():
    vs, pg = ref.vtrace(col([1, 1]), col([0, 0]), col([0, 0]), col([1, 0]),
                        behaviour_log_probs=col([0, 0]), target_log_probs=col([0, 0]), gamma=1.0,
                        next_values=col([5, 7]))
    assert vs[:, 0].tolist() == pytest.approx([6.0, 8.0])
    assert pg[:, 0].tolist() == pytest.approx([6.0, 8.0])


def test_reference_vtrace_clipping_by_hand():
    # rho = 2 (clipped to 1.5), c = lambda*min(1, 2) = 0.5; r=[0,1], v=[0,0], bootstrap 0, gamma 1
    lr = math.log(2.0)
    vs, pg = ref.vtrace(col([0, 1]), col([0, 0]), col([0, 0]), behaviour_log_probs=col([0, 0]),
                        target_log_probs=col([lr, lr]), gamma=1.0, lambda_=0.5, rho_clip=1.5, c_clip=1.0,
                        pg_rho_clip=float("inf"), bootstrap_value=torch.zeros(1, dtype=F64))
    # vs1 - v1 = 1.5*1 = 1.5; vs0 - v0 = 1.5*0 + 1*0.5*1.5 = 0.75; pg0 = 2*(0 + vs1) = 3; pg1 = 2*1 = 2
    assert vs[:, 0].tolist() == pytest.approx([0.75, 1.5])
    assert pg[:, 0].tolist() == pytest.approx([3.0, 2.0])


def test_reference_lambda_returns_by_hand():
    G = ref.lambda_returns(col([1, 1]), col([0, 2]), col([0, 0]), gamma=1.0, lambda_=0.5,
                           bootstrap_value=torch.tensor([4.0], dtype=F64))
    assert G[:, 0].tolist() == pytest.approx([4.5, 5.0])


@pytest.mark.parametrize("c_clip,expected0", [(1.0, 2.65), (0.5, 2.025)])
def test_reference_retrace_by_hand(c_clip, expected0):
    out = ref.retrace(col([1, 2]), col([0.5, 1.0]), col([0.4, 0.8]), col([0, 0]),
                      behaviour_log_probs=col([math.log(0.5)] * 2),
                      target_log_probs=col([math.log(0.25), 0.0]), gamma=0.5, lambda_=1.0, c_clip=c_clip,
                      bootstrap_value=torch.tensor([3.0], dtype=F64))
    assert out[:, 0].tolist() == pytest.approx([expected0, 3.5])


def test_reference_forward_by_hand():
    e = ref.eligibility_traces(col([1, 1, 1]), col([0, 1, 0]), gamma=1.0, lambda_=0.5,
                               initial=torch.tensor([2.0], dtype=F64))
    assert e[:, 0].tolist() == pytest.approx([2.0, 2.0, 1.0])
    s = ref.episodic_prefix_sum(col([1, 2, 3]), col([0, 0, 0]), col([1, 0, 0]),
                                initial=torch.tensor([10.0], dtype=F64))
    assert s[:, 0].tolist() == pytest.approx([11.0, 2.0, 5.0])


# ---------------------------------------------------------------- shared bug-report cases

SHARED = load_cases()


def check_case(case, outs, dtype):
    tol = 1e-9 if dtype == F64 else 1e-4
    for (name, expected), got in zip(case["expected"].items(), outs):
        assert got.dtype == dtype
        torch.testing.assert_close(got[:, 0].double(), torch.tensor(expected, dtype=F64), rtol=tol, atol=tol,
                                   msg=lambda m: f"{case['name']} {name}: {m}")


REF_FN = {
    "compute_gae": ref.gae, "compute_vtrace": ref.vtrace, "compute_lambda_returns": ref.lambda_returns,
    "compute_discounted_returns": ref.discounted_returns, "compute_retrace": ref.retrace,
    "compute_eligibility_traces": ref.eligibility_traces, "compute_episodic_prefix_sum": ref.episodic_prefix_sum,
}


@pytest.mark.parametrize("case", SHARED, ids=[c["name"] for c in SHARED])
def test_shared_case_reference(case):
    outs = run_case(case, REF_FN[case["function"]], F64)
    check_case(case, outs, F64)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("case", SHARED, ids=[c["name"] for c in SHARED])
def test_shared_case_torch(case, dtype):
    fn = getattr(kernels, case["function"])
    outs = run_case(case, lambda **kw: fn(**kw, backend="torch"), dtype)
    check_case(case, outs, dtype)


# ---------------------------------------------------------------- identities (torch backend)


def rand_inputs(T=23, N=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    d = dict(
        rewards=torch.randn(T, N, generator=g, dtype=dtype),
        values=torch.randn(T, N, generator=g, dtype=dtype),
        terminated=torch.rand(T, N, generator=g) < 0.15,
        truncated=torch.rand(T, N, generator=g) < 0.15,
        bootstrap_value=torch.randn(N, generator=g, dtype=dtype),
    )
    return d


def vnext(d):
    return torch.cat([d["values"][1:], d["bootstrap_value"][None]], 0)


@pytest.mark.parametrize("backend", ["torch"])
def test_identity_lambda0_is_td(backend):
    d = rand_inputs()
    adv, ret = kernels.compute_gae(**d, gamma=0.9, lambda_=0.0, backend=backend)
    td = d["rewards"] + 0.9 * (~d["terminated"]).double() * vnext(d)
    torch.testing.assert_close(ret, td)
    torch.testing.assert_close(adv, td - d["values"])
    G = kernels.compute_lambda_returns(**d, gamma=0.9, lambda_=0.0, backend=backend)
    torch.testing.assert_close(G, td)


@pytest.mark.parametrize("backend", ["torch"])
def test_identity_lambda1_is_monte_carlo(backend):
    d = rand_inputs()
    _, ret = kernels.compute_gae(**d, gamma=0.95, lambda_=1.0, backend=backend)
    mc = kernels.compute_discounted_returns(d["rewards"], d["terminated"], d["truncated"], gamma=0.95,
                                            next_values=vnext(d), backend=backend)
    torch.testing.assert_close(ret, mc)
    G = kernels.compute_lambda_returns(**d, gamma=0.95, lambda_=1.0, backend=backend)
    torch.testing.assert_close(G, mc)


@pytest.mark.parametrize("backend", ["torch"])
def test_identity_onpolicy_vtrace_is_gae1(backend):
    d = rand_inputs()
    lp = -torch.rand(d["rewards"].shape, dtype=F64)
    vs, pg = kernels.compute_vtrace(**d, behaviour_log_probs=lp, target_log_probs=lp.clone(), gamma=0.9,
                                    rho_clip=2.0, c_clip=1.0, pg_rho_clip=float("inf"), backend=backend)
    adv, ret = kernels.compute_gae(**d, gamma=0.9, lambda_=1.0, backend=backend)
    torch.testing.assert_close(vs, ret)
    torch.testing.assert_close(pg, adv)


@pytest.mark.parametrize("lam", [0.0, 0.37, 1.0])
def test_identity_lambda_returns_equal_gae_returns(lam):
    d = rand_inputs(seed=3)
    _, ret = kernels.compute_gae(**d, gamma=0.97, lambda_=lam, backend="torch")
    G = kernels.compute_lambda_returns(**d, gamma=0.97, lambda_=lam, backend="torch")
    torch.testing.assert_close(G, ret)


def test_identity_retrace_deterministic_onpolicy_is_gae_returns():
    d = rand_inputs(seed=4)
    lp = torch.zeros_like(d["rewards"])
    q = kernels.compute_retrace(d["rewards"], d["values"], d["values"], d["terminated"], d["truncated"],
                                behaviour_log_probs=lp, target_log_probs=lp, gamma=0.9, lambda_=0.7,
                                bootstrap_value=d["bootstrap_value"], backend="torch")
    _, ret = kernels.compute_gae(**d, gamma=0.9, lambda_=0.7, backend="torch")
    torch.testing.assert_close(q, ret)


def test_identity_traces_with_unit_decay_are_prefix_sums():
    d = rand_inputs(seed=5)
    e = kernels.compute_eligibility_traces(d["rewards"], d["terminated"], d["truncated"], gamma=1.0, lambda_=1.0,
                                           backend="torch")
    s = kernels.compute_episodic_prefix_sum(d["rewards"], d["terminated"], d["truncated"], backend="torch")
    torch.testing.assert_close(e, s)


# ---------------------------------------------------------------- validation errors


def base(T=4, N=3):
    return rand_inputs(T, N)


def lp(T=4, N=3):
    return dict(behaviour_log_probs=torch.zeros(T, N, dtype=F64), target_log_probs=torch.zeros(T, N, dtype=F64))


@pytest.mark.parametrize("arg,bad,match", [
    ("values", torch.zeros(4, 2, dtype=F64), "values"),
    ("terminated", torch.zeros(5, 3, dtype=torch.bool), "terminated"),
    ("truncated", torch.zeros(4, dtype=torch.bool), "truncated"),
    ("bootstrap_value", torch.zeros(4, 3, dtype=F64), "bootstrap_value"),
    ("bootstrap_value", torch.zeros(1, dtype=F64), "bootstrap_value"),
    ("rewards", torch.zeros(4, 3, dtype=torch.int64), "rewards"),
    ("values", torch.zeros(4, 3, dtype=torch.int32), "values"),
    ("values", torch.zeros(4, 3, dtype=F64, device="meta"), "values"),
    ("terminated", torch.zeros(4, 3, dtype=torch.bool, device="meta"), "terminated"),
])
def test_gae_bad_tensor(arg, bad, match):
    d = base()
    d[arg] = bad
    with pytest.raises(ValueError, match=match):
        kernels.compute_gae(**d, gamma=0.9, lambda_=0.9, backend="torch")


def test_bootstrap_both_or_neither():
    d = base()
    with pytest.raises(ValueError, match="bootstrap_value"):
        kernels.compute_gae(**d, next_values=d["values"], gamma=0.9, lambda_=0.9)
    del d["bootstrap_value"]
    for fn, kw in [(kernels.compute_gae, dict(lambda_=0.9)), (kernels.compute_lambda_returns, dict(lambda_=0.9)),
                   (kernels.compute_vtrace, lp())]:
        with pytest.raises(ValueError, match="next_values"):
            fn(**d, gamma=0.9, **kw)
    with pytest.raises(ValueError, match="bootstrap_value"):
        kernels.compute_discounted_returns(d["rewards"], d["terminated"], gamma=0.9, next_values=d["values"],
                                           bootstrap_value=torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="next_values"):
        kernels.compute_retrace(d["rewards"], d["values"], d["values"], d["terminated"], gamma=0.9, **lp())


@pytest.mark.parametrize("name,val", [("gamma", -0.1), ("gamma", 1.5), ("lambda_", 1.01), ("lambda_", -1.0),
                                      ("gamma", float("nan"))])
def test_gamma_lambda_range(name, val):
    d = base()
    kw = dict(gamma=0.9, lambda_=0.9)
    kw[name] = val
    for fn in (kernels.compute_gae, kernels.compute_lambda_returns):
        with pytest.raises(ValueError, match=name):
            fn(**d, **kw)
    with pytest.raises(ValueError, match=name):
        kernels.compute_vtrace(**d, **kw, **lp())
    with pytest.raises(ValueError, match=name):
        kernels.compute_eligibility_traces(d["rewards"], d["terminated"], **kw)
    if name == "gamma":
        with pytest.raises(ValueError, match=name):
            kernels.compute_discounted_returns(d["rewards"], d["terminated"], gamma=val)


@pytest.mark.parametrize("clip", ["rho_clip", "c_clip", "pg_rho_clip"])
@pytest.mark.parametrize("val", [0.0, -1.0])
def test_clip_positive(clip, val):
    d = base()
    with pytest.raises(ValueError, match=clip):
        kernels.compute_vtrace(**d, gamma=0.9, **lp(), **{clip: val})


def test_retrace_errors():
    d = base()
    args = (d["rewards"], d["values"], d["values"], d["terminated"])
    kw = dict(gamma=0.9, bootstrap_value=d["bootstrap_value"], **lp())
    with pytest.raises(ValueError, match="c_clip"):
        kernels.compute_retrace(*args, c_clip=0.0, **kw)
    with pytest.raises(ValueError, match="q_values"):
        kernels.compute_retrace(d["rewards"], d["values"][:, :2], d["values"], d["terminated"], **kw)
    kw2 = dict(kw, target_log_probs=torch.zeros(4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="target_log_probs"):
        kernels.compute_retrace(*args, **kw2)
    with pytest.raises(ValueError, match="values"):
        kernels.compute_retrace(d["rewards"], d["values"], None, d["terminated"], **kw)


def test_logprob_dtype_and_shape():
    d = base()
    with pytest.raises(ValueError, match="behaviour_log_probs"):
        kernels.compute_vtrace(**d, gamma=0.9, behaviour_log_probs=torch.zeros(4, 3, dtype=torch.int64),
                               target_log_probs=torch.zeros(4, 3, dtype=F64))
    with pytest.raises(ValueError, match="target_log_probs"):
        kernels.compute_vtrace(**d, gamma=0.9, behaviour_log_probs=torch.zeros(4, 3, dtype=F64),
                               target_log_probs=torch.zeros(4, 2, dtype=F64))


def test_unknown_backend_and_forward_errors():
    d = base()
    with pytest.raises(ValueError, match="backend"):
        kernels.compute_gae(**d, gamma=0.9, lambda_=0.9, backend="cuda")
    with pytest.raises(ValueError, match="backend"):
        kernels.compute_episodic_prefix_sum(d["rewards"], d["terminated"], backend="numpy")
    with pytest.raises(ValueError, match="initial"):
        kernels.compute_episodic_prefix_sum(d["rewards"], d["terminated"], initial=torch.zeros(4, dtype=F64))
    with pytest.raises(ValueError, match="x"):
        kernels.compute_episodic_prefix_sum(d["rewards"].long(), d["terminated"])
    with pytest.raises(ValueError, match=r"terminated must have shape \[4, 3\], got \[2, 3\] \(x has shape \[4, 3\]\)"):
        kernels.compute_eligibility_traces(d["rewards"], d["terminated"][:2], gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match="terminated is on meta but x is on cpu"):
        kernels.compute_eligibility_traces(d["rewards"], d["terminated"].to("meta"), gamma=0.9, lambda_=0.9)
    with pytest.raises(ValueError, match=r"initial must have shape \[3\], got \[4\] \(x has shape \[4, 3\]\)"):
        kernels.compute_episodic_prefix_sum(d["rewards"], d["terminated"], initial=torch.zeros(4, dtype=F64))


def test_out_buffers_and_half_precision():
    d = base(9, 5)
    adv = torch.empty(9, 5, dtype=F64)
    ret = torch.empty(9, 5, dtype=F64)
    o = kernels.compute_gae(**d, gamma=0.9, lambda_=0.8, out=(adv, ret), backend="torch")
    assert o.advantages is adv and o.returns is ret
    ea, er = ref.gae(**d, gamma=0.9, lambda_=0.8)
    torch.testing.assert_close(adv, ea)
    with pytest.raises(ValueError, match="out"):
        kernels.compute_gae(**d, gamma=0.9, lambda_=0.8, out=(adv,), backend="torch")
    h = {k: (v.half() if v.dtype == F64 else v) for k, v in d.items()}
    a16, r16 = kernels.compute_gae(**h, gamma=0.9, lambda_=0.8, backend="torch")
    assert a16.dtype == torch.float16
    ea, er = ref.gae(**h, gamma=0.9, lambda_=0.8)
    torch.testing.assert_close(a16.double(), ea, rtol=2e-3, atol=2e-3)


def test_public_names():
    assert set(kernels.__all__) >= {
        "compute_gae", "compute_vtrace", "compute_lambda_returns", "compute_discounted_returns",
        "compute_retrace", "compute_eligibility_traces", "compute_episodic_prefix_sum", "GAEOutput",
        "VTraceOutput"}
    assert kernels.GAEOutput._fields == ("advantages", "returns")
    assert kernels.VTraceOutput._fields == ("vs", "pg_advantages")
