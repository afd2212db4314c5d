"""The estimators inside torch.compile: a call that takes the Triton path becomes one opaque custom operator
(kernels/_compile.py), so a whole update step compiles as one graph (fullgraph=True) and computes what eager calls
compute. CPU tests use Triton's interpreter and the aot_eager backend (fake tensors and functionalization, no C++
compiler); the last test compiles with inductor and CUDA graphs on a GPU."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before kernels imports triton

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import kernels  # noqa: E402

T, N = 7, 5
OPS = {"gae": 2, "vtrace": 2, "lambda_returns": 1, "discounted_returns": 1, "retrace": 1, "eligibility_traces": 1,
       "episodic_prefix_sum": 1}
COMPILED_GPU = pytest.mark.skipif(not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                                  reason="needs a CUDA GPU and compiled kernels")


def _data(device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*s):
        return torch.randn(*s, generator=g).to(device)

    return dict(rewards=rnd(T, N), values=rnd(T, N), q_values=rnd(T, N), next_values=rnd(T, N), x=rnd(T, N),
                behaviour_log_probs=-rnd(T, N).abs(), target_log_probs=-rnd(T, N).abs(), bootstrap_value=rnd(N),
                initial=rnd(N), terminated=(torch.rand(T, N, generator=g) < 0.2).to(device),
                truncated=(torch.rand(T, N, generator=g) < 0.2).to(device))


def _call(name, d, backend="triton", out=None):
    """One call of estimator `name`; its outputs as a tuple."""
    flags = (d["terminated"], d["truncated"])
    lp = dict(behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"])
    kw = dict(backend=backend, out=out)
    if name == "gae":
        return tuple(kernels.compute_gae(d["rewards"], d["values"], *flags, gamma=0.97, lambda_=0.9,
                                         bootstrap_value=d["bootstrap_value"], **kw))
    if name == "vtrace":
        return tuple(kernels.compute_vtrace(d["rewards"], d["values"], *flags, **lp, gamma=0.97, lambda_=0.9,
                                            rho_clip=1.5, c_clip=1.0, pg_rho_clip=float("inf"),
                                            next_values=d["next_values"], **kw))
    if name == "lambda_returns":
        return (kernels.compute_lambda_returns(d["rewards"], d["values"], *flags, gamma=0.97, lambda_=0.9,
                                               next_values=d["next_values"], **kw),)
    if name == "discounted_returns":
        return (kernels.compute_discounted_returns(d["rewards"], *flags, gamma=0.97,
                                                   bootstrap_value=d["bootstrap_value"], **kw),)
    if name == "retrace":
        return (kernels.compute_retrace(d["rewards"], d["q_values"], d["values"], *flags, **lp, gamma=0.97,
                                        lambda_=0.9, c_clip=1.0, bootstrap_value=d["bootstrap_value"], **kw),)
    if name == "eligibility_traces":
        return (kernels.compute_eligibility_traces(d["x"], *flags, gamma=0.97, lambda_=0.9, initial=d["initial"],
                                                   **kw),)
    return (kernels.compute_episodic_prefix_sum(d["x"], *flags, initial=d["initial"], **kw),)


class _Graphs:
    """A torch.compile backend that keeps every FX graph it is given and runs it through aot_eager."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        self.graphs.append(gm)
        return aot_autograd(fw_compiler=lambda g, _: g.forward)(gm, example_inputs)

    def op_calls(self):
        return [str(n.target) for gm in self.graphs for n in gm.graph.nodes if n.op == "call_function"
                and str(n.target).startswith("fastrl.")]


@pytest.mark.parametrize("name", list(OPS))
def test_a_compiled_step_holds_one_operator_per_call_and_computes_what_eager_does(name):
    """fullgraph=True over a step that calls the estimator (Triton path) and uses its outputs: the graph holds
    ``fastrl.<name>`` once, and the results, with and without ``out=`` buffers (written in place and returned),
    equal the eager call's bit for bit. The critic's values may require grad; the targets carry none."""
    torch._dynamo.reset()
    d = _data(seed=1)
    d["values"].requires_grad_(True)
    want = _call(name, d)

    def step(d, out=None):
        res = _call(name, d, out=out)
        return res, sum(r.sum() for r in res) * 2

    graphs = _Graphs()
    compiled = torch.compile(step, backend=graphs, fullgraph=True)
    got, total = compiled(d)
    assert graphs.op_calls() == [f"fastrl.{name}.default"]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert not g.requires_grad
    torch.testing.assert_close(total, sum(w.sum() for w in want) * 2)
    bufs = tuple(torch.full((T, N), float("nan")) for _ in range(OPS[name]))
    got, _ = compiled(d, bufs if len(bufs) == 2 else bufs[0])
    for g, b, w in zip(got, bufs, want):
        assert g is b
        torch.testing.assert_close(b, w, rtol=0, atol=0)


def test_a_compiled_call_raises_the_eager_value_errors():
    """The argument checks run while dynamo traces the call: a bad gamma or a bootstrap_value of the wrong shape is
    the eager ValueError (dynamo hands the frame back to Python, which raises it), also for an out= buffer of the
    wrong shape."""
    d = _data(seed=2)

    def gae(d, gamma=0.9, bootstrap_value=None, out=None):
        return kernels.compute_gae(d["rewards"], d["values"], d["terminated"], gamma=gamma, lambda_=0.9,
                                   bootstrap_value=d["bootstrap_value"] if bootstrap_value is None else
                                   bootstrap_value, backend="triton", out=out)

    torch._dynamo.reset()
    compiled = torch.compile(gae, backend="aot_eager")
    with pytest.raises(ValueError, match="gamma must be in"):
        compiled(d, gamma=1.5)
    with pytest.raises(ValueError, match="bootstrap_value"):
        compiled(d, bootstrap_value=torch.zeros(N + 1))
    with pytest.raises(ValueError, match="out.returns must be a torch.float32 tensor of shape"):
        compiled(d, out=(torch.zeros(T, N), torch.zeros(T, N + 1)))
    # fullgraph=True: dynamo cannot hand the frame back, so the error is its own, quoting the ValueError
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match=r"gamma must be in \[0, 1\], got 1\.5"):
        torch.compile(gae, backend="aot_eager", fullgraph=True)(d, gamma=1.5)


def test_a_numpy_scalar_made_inside_a_compiled_function_is_the_eager_scalar():
    """Dynamo traces ``np.float32(g)`` as a NumPy array and, at the graph break the call makes, hands it over as a
    0-d array: that counts as the scalar (it was a ValueError)."""
    d = _data(seed=4)

    def gae(d, g):
        return kernels.compute_gae(d["rewards"], d["values"], d["terminated"], gamma=np.float32(g),
                                   lambda_=np.float64(0.9), bootstrap_value=d["bootstrap_value"], backend="triton")

    want = gae(d, 0.97)
    torch._dynamo.reset()
    got = torch.compile(gae, backend="aot_eager")(d, 0.97)
    torch.testing.assert_close(tuple(got), tuple(want), rtol=0, atol=0)


def test_a_compiled_ppo_loss_takes_the_gradient_of_the_eager_one():
    """A PPO-style step compiled as one graph: GAE on the critic's values (which require grad), advantages
    normalised, a value loss against the returns. Its gradient with respect to the critic's values equals the
    eager step's (the targets are constants in both)."""
    d = _data(seed=3)

    def loss_fn(values):
        adv, ret = kernels.compute_gae(d["rewards"], values, d["terminated"], d["truncated"], gamma=0.99,
                                       lambda_=0.95, bootstrap_value=d["bootstrap_value"], backend="triton")
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return ((values - ret) ** 2).mean() - (adv * values).mean()

    grads = []
    for fn in (loss_fn, torch.compile(loss_fn, backend="aot_eager", fullgraph=True)):
        torch._dynamo.reset()
        values = d["values"].clone().requires_grad_(True)
        fn(values).backward()
        grads.append(values.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=1e-7)


@COMPILED_GPU
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_on_a_cuda_gpu_inductor_and_cuda_graphs_run_the_compiled_kernels(mode):
    """With inductor, and with its CUDA graphs (mode="reduce-overhead", replayed several times with new inputs
    copied in), every estimator's compiled step equals its eager call on CUDA tensors."""
    for name in OPS:
        torch._dynamo.reset()
        step = torch.compile(lambda d, name=name: tuple(r * 1 for r in _call(name, d, backend="auto")),
                             mode=mode, fullgraph=True)
        for seed in range(4):
            d = _data("cuda", seed=10 + seed)
            got = [g.clone() for g in step(d)]
            for g, w in zip(got, _call(name, d, backend="auto")):
                torch.testing.assert_close(g, w, rtol=0, atol=0, msg=f"{name} {mode} seed {seed}")


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_out_buffers_under_compile_as_the_window_length_changes(backend):
    """fullgraph=True with out= buffers while T changes between calls (dynamo then makes the shapes symbolic):
    the checks that need data pointers or sort strides are left to eager calls, so tracing succeeds on both
    backends and every result, written into its buffer, equals the eager call's."""
    torch._dynamo.reset()

    def returns(r, t, o):
        return kernels.compute_discounted_returns(r, t, gamma=0.9, backend=backend, out=o)

    compiled = torch.compile(returns, backend="aot_eager", fullgraph=True)
    g = torch.Generator().manual_seed(6)
    for steps in (5, 7, 9):
        r = torch.randn(steps, 3, generator=g)
        t = torch.rand(steps, 3, generator=g) < 0.3
        o = torch.full((steps, 3), float("nan"))
        assert compiled(r, t, o) is o
        torch.testing.assert_close(o, returns(r, t, torch.empty(steps, 3)), rtol=0, atol=0)


class _RecordOperatorCalls(TorchDispatchMode):
    """Keeps the arguments of every ``fastrl`` operator call made while it is active."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "fastrl":
            self.calls.append((func, args))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", list(OPS))
def test_each_operator_passes_torch_library_opcheck(name, monkeypatch):
    """torch.library.opcheck on the arguments the API function gives the operator while dynamo traces (here
    made eager by letting the API believe it is compiling, since dynamo runs no dispatch mode): the schema, the
    fake outputs against the real ones (shape, dtype, strides), no output aliasing an input, and AOT dispatch.
    opcheck does not look inside the list argument for mutation, so the inputs are compared before and after;
    the operator is tagged PT2-compliant (dynamo's only_allow_pt2_compliant_ops accepts it)."""
    monkeypatch.setattr(kernels.api, "_is_compiling", lambda: True)
    d = _data(seed=3)
    want = _call(name, d, backend="torch")
    with _RecordOperatorCalls() as rec:
        got = _call(name, d)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert [str(f) for f, _ in rec.calls] == [f"fastrl.{name}.default"]
    func, (inputs, scalars) = rec.calls[0]
    assert torch.Tag.pt2_compliant_tag in func.tags
    before = [None if x is None else x.clone() for x in inputs]
    results = torch.library.opcheck(func, (inputs, scalars))
    assert set(results.values()) == {"SUCCESS"}, results
    for x, b in zip(inputs, before):
        if x is not None:
            assert torch.equal(x, b)


def test_reloading_the_module_keeps_its_operators():
    """A reload of kernels._compile (or the package imported again) reuses the operators the first import
    defined, so a handle that compiled code holds stays valid and a new compile finds the same operator."""
    import importlib
    torch._dynamo.reset()
    d = _data(seed=5)
    handle = torch.ops.fastrl.episodic_prefix_sum.default
    importlib.reload(kernels._compile)
    assert torch.ops.fastrl.episodic_prefix_sum.default is handle
    want = _call("episodic_prefix_sum", d, backend="torch")[0]
    got = handle([d["x"], d["terminated"], d["truncated"], d["initial"]], [])[0]
    torch.testing.assert_close(got, want)
    compiled = torch.compile(lambda d: _call("episodic_prefix_sum", d), backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(d)[0], want)


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_under_compile_an_out_that_is_an_input_gets_the_eager_result_and_an_expanded_one_is_refused(backend):
    """While dynamo traces, the overlap checks (data pointers) are skipped; both paths then compute into fresh
    tensors and copy into out= at the end, so out=(values, ...) gets what separate buffers get (the torch
    backend's loop wrote the advantages into values before reading them back for the returns). An expand()ed
    out= is the eager ValueError there too."""
    torch._dynamo.reset()
    d = _data(seed=7)
    want = _call("gae", d, backend=backend)

    def gae(d, out):
        return kernels.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.97,
                                   lambda_=0.9, bootstrap_value=d["bootstrap_value"], backend=backend, out=out)

    compiled = torch.compile(gae, backend="aot_eager", fullgraph=True)
    values = d["values"].clone()
    got = compiled({**d, "values": values}, (values, torch.empty(T, N)))
    assert got[0] is values
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    with pytest.raises(ValueError, match="out.returns's strides must each exceed the span"):
        torch.compile(gae, backend="aot_eager")(d, (torch.empty(T, N), torch.empty(T, 1).expand(T, N)))


def test_a_second_copy_of_the_package_loads_beside_the_first():
    """scripts/ab_kernels.py imports a baseline's kernels/ under another name in the same process: its operators
    take names of their own (an operator can be defined once per process) and it still computes."""
    import importlib.util
    import sys
    root = os.path.dirname(kernels.__file__)
    spec = importlib.util.spec_from_file_location("kernels_second_copy", os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    copy = importlib.util.module_from_spec(spec)
    sys.modules["kernels_second_copy"] = copy
    try:
        spec.loader.exec_module(copy)
        assert hasattr(torch.ops.fastrl, "gae") and hasattr(torch.ops.fastrl, "gae_kernels_second_copy")
        d = _data(seed=4)
        want = _call("gae", d, backend="torch")
        got = copy.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.97, lambda_=0.9,
                               bootstrap_value=d["bootstrap_value"], backend="torch")
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    finally:
        for name in [m for m in sys.modules if m == "kernels_second_copy" or m.startswith("kernels_second_copy.")]:
            del sys.modules[name]
