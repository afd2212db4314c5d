"""The CUDA launch path's plan cache, exercised on CPU tensors with the launcher stubbed out.

On a GPU a repeated call skips validation and planning: it finds its launch plan through a
``TensorGuards`` check or the metadata key and calls Triton's compiled launcher directly. A plan reused
for tensors with other strides, shapes or alignment would read and write the wrong memory, so these
tests record every direct launch and compare its pointers and integer arguments with a plan built from
scratch for that call's tensors. The first call of each plan runs the real kernel under the Triton
interpreter (that is how the launcher is obtained); its result is checked against the torch backend.
"""
import os
import threading

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402

TRITON_OK = os.environ.get("TRITON_INTERPRET") == "1"
pytestmark = pytest.mark.skipif(not TRITON_OK, reason="no interpreter")

T, N = 5, 8
KW = dict(gamma=0.9, lambda_=0.8)


class CountingDict(dict):
    """The plans dict, counting lookups: each one is a call that missed the guards."""

    def __init__(self):
        super().__init__()
        self.lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)


@pytest.fixture
def launches(monkeypatch):
    """Direct launches recorded as (ptrs, ints); the GAE spec's key lookups counted."""
    recorded = []
    spec = O._GAE._replace(plans=CountingDict(), hot=O._GAE.hot.fresh(), scal={})

    def fake_fast_launcher(ck):
        n_ptr = 8  # GAE: 6 inputs + 2 outputs, then the split plan's 2 workspace pointers (0: none)
        n_int = 17  # T, N and 15 strides: 2 per [T, N] tensor (7 of them), 1 for bootstrap_value

        def launch(grid, one, one_, stream, mid, *args):
            assert args[n_ptr:n_ptr + 2] == (0, 0)
            plan_ints = args[n_ptr + 2:n_ptr + 2 + n_int]
            recorded.append((list(args[:n_ptr]), tuple(plan_ints)))
        return launch, ("mid",)

    monkeypatch.setattr(O, "_may_launch_directly", lambda p: True)
    monkeypatch.setattr(O, "_check_device", lambda dev: None)
    monkeypatch.setattr(O, "_fast_launcher", fake_fast_launcher)
    monkeypatch.setattr(O, "_cur_device", lambda: None)
    monkeypatch.setattr(O, "_raw_stream", lambda idx: 0)
    monkeypatch.setattr(O, "_SPECS", tuple(spec if s is O._GAE else s for s in O._SPECS))
    monkeypatch.setattr(O, "_GAE", spec)
    yield recorded, spec


def inputs(values=None, rewards=None):
    g = torch.Generator().manual_seed(0)
    r = torch.randn(T, N, generator=g) if rewards is None else rewards
    v = torch.randn(T, N, generator=g) if values is None else values
    te = torch.rand(T, N, generator=g) < 0.2
    bv = torch.randn(N, generator=g)
    out = (torch.empty(T, N), torch.empty(T, N))
    return (r, v, te, None, bv, None), out


def call(ins, out):
    r, v, te, tr, bv, nv = ins
    return kernels.compute_gae(r, v, te, tr, bootstrap_value=bv, next_values=nv, backend="triton", out=out, **KW)


def expected_launch(ins, out):
    ptrs = [0 if x is None else x.data_ptr() for x in ins + out]
    return ptrs, O._build(O._GAE, ins, out).ints


def test_first_call_runs_the_kernel_then_repeats_launch_directly(launches):
    recorded, spec = launches
    ins, out = inputs()
    adv, ret = call(ins, out)
    ref = kernels.compute_gae(ins[0], ins[1], ins[2], bootstrap_value=ins[4], backend="torch", **KW)
    torch.testing.assert_close(adv, ref.advantages)
    torch.testing.assert_close(ret, ref.returns)
    assert recorded == []  # the first call went through kernel[grid] under the interpreter
    call(ins, out)
    call(ins, out)
    assert recorded == [expected_launch(ins, out)] * 2
    if O._TensorGuards is not None:
        assert spec.plans.lookups == 1  # the repeats were matched by the guards, not the key


def test_other_strides_shapes_or_alignment_never_reuse_a_plan(launches):
    recorded, spec = launches
    variants = {
        "contiguous": inputs(),
        "transposed values": inputs(values=torch.randn(N, T).t()),
        "padded rows": inputs(values=torch.randn(T, N + 3)[:, :N]),
        "unaligned rewards": inputs(rewards=torch.randn(T * N + 1)[1:].view(T, N)),
        "values requiring grad": inputs(values=torch.randn(T, N, requires_grad=True)),
    }
    assert variants["unaligned rewards"][0][0].data_ptr() & 15
    for _ in range(3):  # alternate between them: each must find its own plan every time
        for name, (ins, out) in variants.items():
            before = len(recorded)
            call(ins, out)
            if len(recorded) > before:
                assert recorded[-1] == expected_launch(ins, out), name
    assert len({ints for _, ints in recorded}) >= 3  # transposed and padded values have their own strides
    assert len(recorded) >= 2 * len(variants)


def test_a_plan_used_again_moves_to_the_front_of_its_pattern(launches):
    """Alternating shapes: a call served by a plan remembered earlier moves it to the front, so that its next
    calls check one set of guards instead of every plan remembered after it; each launch stays its own."""
    recorded, spec = launches
    if O._TensorGuards is None:
        pytest.skip("no TensorGuards in this PyTorch: every call takes the key path")
    shaped = []
    for n in (8, 12, 16):
        g = torch.Generator().manual_seed(n)
        ins = (torch.randn(T, n, generator=g), torch.randn(T, n, generator=g), torch.rand(T, n, generator=g) < 0.2,
               None, torch.randn(n, generator=g), None)
        shaped.append((ins, (torch.empty(T, n), torch.empty(T, n))))
    for ins, out in shaped:
        call(ins, out)
        call(ins, out)
    (launch,) = spec.hot.by_types.values()
    plan_of = {id(p): n for (_, p), n in zip(launch.entries, (16, 12, 8))}
    assert [plan_of[id(p)] for _, p in launch.entries] == [16, 12, 8]
    lookups = spec.plans.lookups
    for ins, out in (shaped[0], shaped[0], shaped[1], shaped[0]):
        call(ins, out)
        assert recorded[-1] == expected_launch(ins, out)
        assert plan_of[id(launch.entries[0][1])] == ins[0].shape[1]
    assert [plan_of[id(p)] for _, p in launch.entries] == [8, 12, 16]
    assert spec.plans.lookups == lookups  # all served by the guards


def test_changed_arguments_after_a_cached_call_still_raise(launches):
    recorded, spec = launches
    ins, out = inputs()
    call(ins, out)
    call(ins, out)
    r, v, te, _, bv, _ = ins
    with pytest.raises(ValueError, match="bootstrap_value"):
        call((r, v, te, None, torch.randn(N + 1), None), out)
    with pytest.raises(ValueError, match="one of bootstrap_value"):
        call((r, v, te, None, None, None), out)
    with pytest.raises(ValueError, match="values"):
        call((r, v[:, :N - 1], te, None, bv, None), out)
    with pytest.raises(ValueError, match="out"):
        call(ins, (out[0], torch.empty(T, N, dtype=torch.float64)))
    n = len(recorded)
    call(ins, out)
    assert len(recorded) == n + 1 and recorded[-1] == expected_launch(ins, out)


def test_one_out_buffer_given_twice_after_a_cached_call_raises_without_launching(launches):
    """The plan and launch function were made for two disjoint out= buffers; the same buffer twice, as one tensor or
    as two views of it (which TensorGuards accepts, each matching the metadata), has the same shapes and strides,
    yet must raise as on the first call instead of writing both outputs to one place."""
    recorded, spec = launches
    ins, out = inputs()
    call(ins, out)
    call(ins, out)
    n = len(recorded)
    assert n == 1
    buf = out[0]
    for twice in ((buf, buf), (buf, buf.view(T, N)), (buf.view(T, N), buf)):
        with pytest.raises(ValueError, match="out.advantages and out.returns share memory"):
            call(ins, twice)
    assert len(recorded) == n
    call(ins, out)
    assert len(recorded) == n + 1 and recorded[-1] == expected_launch(ins, out)


def test_outputs_that_partly_overlap_after_a_cached_call_raise_and_interleaved_ones_launch(launches):
    """Two views of one [T, 2N] buffer with the cached outputs' layout and alignment: overlapping by half their
    columns (columns 0..N-1 and 4..N+3: 16 bytes apart, as aligned as the cached ones) they raise without
    launching, as on a first call; interleaved without sharing an element (even and odd columns, one layout of
    their own) they launch, on the key path's exact check, call after call."""
    recorded, spec = launches
    ins, out = inputs()
    wide = torch.empty(T, 2 * N)
    call(ins, (wide[:, :N], wide[:, N:]))
    call(ins, (wide[:, :N], wide[:, N:]))
    n = len(recorded)
    for shifted in ((wide[:, :N], wide[:, 4:N + 4]), (wide[:, 4:N + 4], wide[:, :N])):
        with pytest.raises(ValueError, match="out.advantages and out.returns share memory"):
            call(ins, shifted)
    assert len(recorded) == n
    interleaved = (wide[:, 0::2], wide[:, 1::2])
    for _ in range(3):  # the first call of this layout builds its plan through kernel[grid] (not recorded)
        call(ins, interleaved)
    assert len(recorded) == n + 2 and recorded[-1] == expected_launch(ins, interleaved)


def test_adjacent_outputs_are_served_by_the_launch_function_without_the_key_path(launches):
    """Outputs that end where the other starts (the two halves of one [2, T, N] buffer, either way round, as the
    caching allocator may place two fresh outputs) share no byte: the overlap check must not send them to the
    key path on every call."""
    recorded, spec = launches
    ins, _ = inputs()
    both = torch.empty(2, T, N)
    for out in ((both[0], both[1]), (both[1], both[0])):
        call(ins, out)
        lookups = spec.plans.lookups
        for _ in range(3):
            call(ins, out)
        assert recorded[-1] == expected_launch(ins, out)
        if O._TensorGuards is not None:
            assert spec.plans.lookups == lookups


def test_an_out_buffer_that_requires_grad_after_a_cached_call_raises_without_launching(launches):
    """The plan and launch function were made for out= buffers without grad; a buffer of the same layout that
    requires grad must not be served by them (TensorGuards tells requires_grad apart, the metadata key holds it)
    but raise as on a first call."""
    recorded, spec = launches
    ins, out = inputs()
    call(ins, out)
    call(ins, out)
    n = len(recorded)
    grad = torch.empty(T, N, requires_grad=True)
    for given in ((out[0], grad), (grad, out[1])):
        with pytest.raises(ValueError, match="must not require grad"):
            call(ins, given)
    assert len(recorded) == n
    call(ins, out)
    assert len(recorded) == n + 1 and recorded[-1] == expected_launch(ins, out)


@pytest.mark.parametrize("as_type", [tuple, list, "namedtuple"])
def test_out_as_list_or_named_tuple_is_served_by_the_guards(launches, as_type):
    recorded, spec = launches
    ins, out = inputs()
    ref = kernels.compute_gae(ins[0], ins[1], ins[2], bootstrap_value=ins[4], backend="torch", **KW)
    given = kernels.GAEOutput(*out) if as_type == "namedtuple" else as_type(out)
    res = call(ins, given)
    torch.testing.assert_close(res.advantages, ref.advantages)
    assert res.advantages is out[0] and res.returns is out[1]
    call(ins, given)
    call(ins, given)
    assert recorded == [expected_launch(ins, out)] * 2
    if O._TensorGuards is not None:
        assert spec.plans.lookups == 1


def test_scalars_of_other_types_are_checked_every_call(launches):
    recorded, spec = launches
    ins, out = inputs()
    r, v, te, _, bv, _ = ins
    kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=1.0, lambda_=0.5, backend="triton", out=out)
    kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=1.0, lambda_=0.5, backend="triton", out=out)
    n = len(recorded)
    with pytest.raises(ValueError, match="gamma"):
        kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=True, lambda_=0.5, backend="triton", out=out)
    with pytest.raises(ValueError, match="gamma"):
        kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=float("nan"), lambda_=0.5, backend="triton", out=out)
    kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=np.float64(0.9), lambda_=0.8, backend="triton", out=out)
    assert len(recorded) == n + 1 and recorded[-1] == expected_launch(ins, out)


def test_a_second_tensor_in_an_absent_slot_takes_its_own_plan(launches):
    """next_values instead of bootstrap_value: the same count of tensors, another pattern of absent ones."""
    recorded, spec = launches
    ins, out = inputs()
    r, v, te, _, bv, _ = ins
    nv = torch.randn(T, N)
    call(ins, out)
    call(ins, out)
    res = call((r, v, te, None, None, nv), out)
    ref = kernels.compute_gae(r, v, te, next_values=nv, backend="torch", **KW)
    torch.testing.assert_close(res.advantages, ref.advantages)
    call((r, v, te, None, None, nv), out)
    assert recorded[-1] == expected_launch((r, v, te, None, None, nv), out)
    with pytest.raises(ValueError, match="one of bootstrap_value"):
        call((r, v, te, nv, None, None), out)  # truncated given, no bootstrap form: never a cached plan


def test_new_scalar_values_stay_on_the_guards_path(launches):
    """An annealed gamma changes every call: each new value is validated, and no plan is looked up again."""
    recorded, spec = launches
    ins, out = inputs()
    r, v, te, _, bv, _ = ins
    for i in range(12):
        gamma = 0.9 + 0.001 * i
        kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=gamma, lambda_=0.8, backend="triton", out=out)
        assert spec.scal[(gamma, 0.8)] == O._split(gamma) + O._split(gamma * 0.8)
    with pytest.raises(ValueError, match="gamma"):
        kernels.compute_gae(r, v, te, bootstrap_value=bv, gamma=1.5, lambda_=0.8, backend="triton", out=out)
    assert len(recorded) == 11
    if O._TensorGuards is not None:
        assert spec.plans.lookups == 1
        assert sum(len(h.entries) for h in spec.hot.by_types.values()) == 1


def test_out_holding_one_none_is_rejected_after_a_cached_allocating_call(launches):
    """(None,) must not pass for the out=None pattern: that would launch without output pointers."""
    recorded, spec = launches
    ins, _ = inputs()
    call(ins, None)
    call(ins, None)
    n = len(recorded)
    for bad in ((None,), [None], (None, None)):
        with pytest.raises(ValueError, match="out"):
            call(ins, bad)
    assert len(recorded) == n


def test_lazily_negated_inputs_are_resolved_before_the_kernel_reads_them(launches):
    recorded, spec = launches
    ins, out = inputs()
    r, v, te, _, bv, _ = ins
    call(ins, out)
    call(ins, out)  # a plain `values` of the same metadata is now remembered
    v_neg = torch.complex(torch.zeros(T, N), -v).conj().imag  # equals v, stored negated
    assert v_neg.is_neg() and torch.equal(v_neg, v)
    ref = kernels.compute_gae(r, v, te, bootstrap_value=bv, backend="torch", **KW)
    out2 = (torch.empty(T, N), torch.empty(T, N))
    res = call((r, v_neg, te, None, bv, None), out2)  # a new plan: its kernel runs for real
    torch.testing.assert_close(res.advantages, ref.advantages)
    torch.testing.assert_close(res.returns, ref.returns)
    n = len(recorded)
    call((r, v_neg, te, None, bv, None), out2)
    assert all(ptrs[1] != v_neg.data_ptr() for ptrs, _ in recorded[n:])  # never the negated storage


def test_an_assigned_launch_hook_turns_direct_launches_off(launches):
    """A hook assigned in place of Triton's HookChain (the older style) must still see every launch."""
    recorded, spec = launches
    ins, out = inputs()
    call(ins, out)
    call(ins, out)
    n = len(recorded)
    chain = O._RUNTIME.launch_enter_hook
    O._RUNTIME.launch_enter_hook = lambda metadata: None
    try:
        call(ins, out)
        assert len(recorded) == n  # through kernel[grid], which calls the hook
    finally:
        O._RUNTIME.launch_enter_hook = chain
    call(ins, out)
    assert len(recorded) == n + 1


def test_a_launcher_that_rejects_its_arguments_falls_back_to_kernel_grid(launches, monkeypatch):
    """Triton's generated launcher's argument list is internal: if it ever rejects ours, nothing has
    launched, so the call must still produce its results through kernel[grid], and later calls too."""
    recorded, spec = launches

    def rejecting_launcher(ck):
        def launch(*args):
            raise TypeError(f"function takes exactly {len(args) - 2} arguments ({len(args)} given)")
        return launch, ()

    monkeypatch.setattr(O, "_fast_launcher", rejecting_launcher)
    ins, _ = inputs()
    ref = kernels.compute_gae(ins[0], ins[1], ins[2], bootstrap_value=ins[4], backend="torch", **KW)
    call(ins, (torch.empty(T, N), torch.empty(T, N)))  # compiles through kernel[grid]
    with pytest.warns(RuntimeWarning, match="direct launch"):
        res = call(ins, (torch.empty(T, N), torch.empty(T, N)))
    torch.testing.assert_close(res.advantages, ref.advantages)
    res = call(ins, (torch.empty(T, N), torch.empty(T, N)))
    torch.testing.assert_close(res.returns, ref.returns)
    assert recorded == [] and all(p.direct is None for p in spec.plans.values())


def test_a_lazily_negated_out_buffer_gets_the_right_values(launches):
    recorded, spec = launches
    ins, out = inputs()
    r, v, te, _, bv, _ = ins
    adv_neg = torch.complex(torch.zeros(T, N), torch.zeros(T, N)).conj().imag  # writable, stored negated
    assert adv_neg.is_neg()
    ref = kernels.compute_gae(r, v, te, bootstrap_value=bv, backend="torch", **KW)
    res = call(ins, (adv_neg, out[1]))
    torch.testing.assert_close(res.advantages, ref.advantages)
    torch.testing.assert_close(adv_neg, ref.advantages)
    torch.testing.assert_close(out[1], ref.returns)


def test_a_register_cap_is_a_compile_option_on_nvidia_gpus_only(monkeypatch):
    """MAXNREG, a plan's seventh field, reaches Triton's compiler as maxnreg for CUDA tensors on an NVIDIA build;
    the interpreter (CPU tensors) and AMD's compiler have no such option and run the same plan without it,
    with the same results."""
    cuda = torch.device("cuda")
    assert O._compile_options(2, 48, cuda) == (dict(num_warps=2, maxnreg=48) if torch.version.hip is None
                                               else dict(num_warps=2))
    assert O._compile_options(2, 0, cuda) == dict(num_warps=2)
    with monkeypatch.context() as m:
        m.setattr(torch.version, "hip", "6.0")
        assert O._compile_options(2, 48, cuda) == dict(num_warps=2)
    monkeypatch.setitem(O.config, "force", (4, 4, 2, 2, True, True, 48))  # T = 5: split into 2 chunks
    O.clear_plans()
    ins, out = inputs()
    plan = O._build(O._GAE, ins, out)
    assert plan.options == dict(num_warps=2) and plan.split and plan.consts["PRELOAD"]
    res = call(ins, out)
    r, v, te, tr, bv, nv = ins
    ref = kernels.compute_gae(r, v, te, tr, bootstrap_value=bv, backend="torch", **KW)
    torch.testing.assert_close(res.advantages, ref.advantages)
    torch.testing.assert_close(res.returns, ref.returns)
    O.clear_plans()


def test_programmatic_dependent_launch_only_for_compiled_kernels_on_sm90_and_later(monkeypatch):
    """PDL (kernels._triton_ops._pdl) reaches Triton as launch_pdl and the kernels as the constexpr PDL only for
    compiled kernels on an NVIDIA GPU of compute capability 9.0 or later, and only while config["pdl"] is on:
    older GPUs have no griddepcontrol, and the interpreter and AMD's compiler no such option. A CPU plan runs
    without it (the kernels' results are checked there by every other test)."""
    cuda = torch.device("cuda")
    assert O._compile_options(4, 0, cuda, True) == dict(num_warps=4, launch_pdl=True)
    assert O._compile_options(4, 0, cuda, False) == dict(num_warps=4)
    assert O._pdl(torch.device("cpu")) is False
    monkeypatch.setattr(O, "_INTERPRET", False)
    monkeypatch.setattr(torch.version, "hip", None)
    for capability, expected in (((8, 0), False), ((8, 9), False), ((9, 0), True), ((10, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev, c=capability: c)
        assert O._pdl(cuda) is expected, capability
        with monkeypatch.context() as m:
            m.setitem(O.config, "pdl", False)
            assert O._pdl(cuda) is False
        with monkeypatch.context() as m:
            m.setattr(torch.version, "hip", "6.0")
            assert O._pdl(cuda) is False
    monkeypatch.setattr(O, "_INTERPRET", True)
    assert O._pdl(cuda) is False
    O.clear_plans()
    ins, out = inputs()
    plan = O._build(O._GAE, ins, out)
    assert plan.consts["PDL"] is False and "launch_pdl" not in plan.options
    # where the device has it, every plan but the one-warp ones (built only, not launched: these are CPU tensors)
    monkeypatch.setattr(O, "_pdl", lambda dev: True)
    for force, expected in (((4, 4, 2, 2, True), True), ((8, 4, 4), True), ((8, 32, 1), False),
                            ((4, 4, 1, 0, True), False)):
        monkeypatch.setitem(O.config, "force", force)
        plan = O._build(O._GAE, ins, out)
        assert plan.consts["PDL"] is expected and plan.options.get("launch_pdl", False) is expected, force
    O.clear_plans()


def test_a_forced_plan_of_the_wrong_length_is_named(monkeypatch):
    for fields in ((8, 4), (8, 4, 1, 0, True, False, 0, 1)):
        monkeypatch.setitem(O.config, "force", fields)
        with pytest.raises(ValueError, match="3 to 7 plan fields"):
            O._tile(128, 4096, True, O.K.gae_kernel)


def test_plan_rule_on_cuda():
    """The plan rule's regimes (kernels._triton_ops._tile), for CUDA problems: (T_BLOCK, BLOCK_N, warps, SEG_L,
    SPLIT, PRELOAD, MAXNREG). The split plan takes few environments and long horizons (1024 <= T), with at most 256 chunks."""
    K = O.K
    assert O._tile(2048, 512, True, K.gae_kernel) == (256, 32, 16, 16, True, False, 0)
    assert O._tile(2048, 512, True, K.retrace_kernel) == (256, 32, 16, 16, True, True, 0)
    assert O._tile(128, 8192, True, K.retrace_kernel)[5] is False  # its PRELOAD 1 is for split plans only
    assert O._tile(2048, 512, True, K.vtrace_kernel) == (256, 32, 16, 16, True, False, 0)
    for kernel in (K.discounted_kernel, K.forward_kernel, K.lambda_returns_kernel):  # one output: shorter chunks
        assert O._tile(2048, 512, True, kernel) == (128, 32, 8, 16, True, False, 0)
    assert O._tile(1024, 2048, True, K.forward_kernel) == (128, 32, 8, 16, True, False, 0)
    assert O._tile(1024, 2048, True, K.lambda_returns_kernel) == (128, 32, 8, 16, True, False, 0)
    assert O._tile(512, 2048, True, K.forward_kernel) == (512, 16, 8, 0, False, False, 0)  # T < 1024: tile scan
    assert O._tile(128, 1024, True, K.gae_kernel) == (128, 4, 4, 0, False, False, 0)  # not one chunk of idle rows
    assert O._tile(128, 4096, True, K.gae_kernel) == (128, 32, 16, 8, False, False, 0)  # segments, not split
    assert O._tile(16, 4096, True, K.gae_kernel) == (16, 16, 4, 0, False, False, 0)  # below 2^17 elements: tile scan
    for T, kernel in ((32768, K.retrace_kernel), (32768, K.gae_kernel), (32769, K.gae_kernel), (2 ** 20, K.gae_kernel),
                      (32768, K.discounted_kernel), (32768, K.forward_kernel), (32769, K.forward_kernel)):
        tb, bn, nw, seg_l, split, _preload, _maxnreg = O._tile(T, 8, True, kernel)
        assert not split or -(-T // tb) <= 256
    assert not O._tile(2 ** 20, 8, True, K.gae_kernel)[4]
    for kernel in (K.gae_kernel, K.lambda_returns_kernel, K.forward_kernel):
        assert O._tile(128, 65536, True, kernel) == (8, 32, 1, 0, False, False, 0)  # in-thread chunks of 8 rows
    for kernel in (K.vtrace_kernel, K.retrace_kernel, K.discounted_kernel):
        assert O._tile(128, 65536, True, kernel) == (4, 32, 1, 0, False, False, 0)
    # discounted returns take 4-row chunks from 65536 environments only
    assert O._tile(128, 32768, True, K.discounted_kernel) == (8, 32, 1, 0, False, False, 0)
    assert O._tile(128, 65535, True, K.discounted_kernel) == (8, 32, 1, 0, False, False, 0)
    # from 16384 environments with T > 64: short chunks, the next one's rows loaded ahead (PRELOAD 2)
    for kernel in (K.gae_kernel, K.vtrace_kernel, K.retrace_kernel):
        assert O._tile(128, 16384, True, kernel) == (16, 32, 4, 4, False, 2, 0)
        assert O._tile(256, 24576, True, kernel) == (16, 32, 4, 4, False, 2, 0)
    for kernel in (K.discounted_kernel, K.lambda_returns_kernel, K.forward_kernel):
        assert O._tile(128, 16384, True, kernel) == (32, 32, 4, 8, False, 2, 0)
    for kernel in (K.gae_kernel, K.vtrace_kernel, K.retrace_kernel, K.discounted_kernel, K.lambda_returns_kernel,
                   K.forward_kernel):
        preload = kernel is K.lambda_returns_kernel  # all rows of a segment loaded first
        assert O._tile(128, 8192, True, kernel) == (128, 32, 16, 8, False, preload, 0)
        assert O._tile(32, 16384, True, kernel) == (32, 32, 8, 4, False, preload, 0)  # T <= 64: the segment rule


# ----------------------------------------------------------------------------- all seven estimators

def _estimator_calls():
    """name -> (spec name, fn(ins, out, backend, **scalars) calling the API, the inputs in kernel order, scalars)."""
    g = torch.Generator().manual_seed(1)
    x = {k: torch.randn(T, N, generator=g) for k in ("r", "v", "q", "nv", "blp", "tlp")}
    te, tr = torch.rand(T, N, generator=g) < 0.2, torch.rand(T, N, generator=g) < 0.2
    bv, ini = torch.randn(N, generator=g), torch.randn(N, generator=g)
    k = kernels
    return {
        "gae": ("_GAE", lambda i, out, be, **s: k.compute_gae(
            i[0], i[1], i[2], i[3], bootstrap_value=i[4], next_values=i[5], backend=be, out=out, **s),
            (x["r"], x["v"], te, tr, bv, None), dict(gamma=0.9, lambda_=0.8)),
        "vtrace": ("_VTRACE", lambda i, out, be, **s: k.compute_vtrace(
            i[0], i[1], i[2], i[3], bootstrap_value=i[4], next_values=i[5], behaviour_log_probs=i[6],
            target_log_probs=i[7], backend=be, out=out, **s),
            (x["r"], x["v"], te, tr, None, x["nv"], x["blp"], x["tlp"]),
            dict(gamma=0.9, lambda_=0.8, rho_clip=1.0, c_clip=0.9, pg_rho_clip=2.0)),
        "lambda_returns": ("_LAMBDA", lambda i, out, be, **s: k.compute_lambda_returns(
            i[0], i[1], i[2], i[3], bootstrap_value=i[4], next_values=i[5], backend=be, out=out, **s),
            (x["r"], x["v"], te, None, bv, None), dict(gamma=0.9, lambda_=0.8)),
        "discounted_returns": ("_DISCOUNTED", lambda i, out, be, **s: k.compute_discounted_returns(
            i[0], i[1], i[2], bootstrap_value=i[3], next_values=i[4], backend=be, out=out, **s),
            (x["r"], te, tr, bv, None), dict(gamma=0.9)),
        "retrace": ("_RETRACE", lambda i, out, be, **s: k.compute_retrace(
            i[0], i[1], i[2], i[3], i[4], bootstrap_value=i[5], next_values=i[6], behaviour_log_probs=i[7],
            target_log_probs=i[8], backend=be, out=out, **s),
            (x["r"], x["q"], x["v"], te, tr, bv, None, x["blp"], x["tlp"]), dict(gamma=0.9, lambda_=0.8, c_clip=1.0)),
        "eligibility_traces": ("_ELIG", lambda i, out, be, **s: k.compute_eligibility_traces(
            i[0], i[1], i[2], initial=i[3], backend=be, out=out, **s), (x["r"], te, tr, ini),
            dict(gamma=0.9, lambda_=0.8)),
        "episodic_prefix_sum": ("_PREFIX", lambda i, out, be, **s: k.compute_episodic_prefix_sum(
            i[0], i[1], i[2], initial=i[3], backend=be, out=out, **s), (x["r"], te, None, None), {}),
    }


ESTIMATORS = list(_estimator_calls())


@pytest.fixture
def every_launch(monkeypatch):
    """Direct launches of all seven estimators, recorded as (grid, arguments after the stream), with fresh caches."""
    recorded = []

    def fake_fast_launcher(ck):
        def launch(grid, one, one_, stream, *args):
            recorded.append((grid, args))
        return launch, ()

    monkeypatch.setattr(O, "_may_launch_directly", lambda p: True)
    monkeypatch.setattr(O, "_check_device", lambda dev: None)
    monkeypatch.setattr(O, "_fast_launcher", fake_fast_launcher)
    monkeypatch.setattr(O, "_cur_device", lambda: None)
    monkeypatch.setattr(O, "_raw_stream", lambda idx: 0)
    monkeypatch.setattr(O, "_capturing", lambda: False)
    fresh = {}
    for name in ("_GAE", "_VTRACE", "_LAMBDA", "_DISCOUNTED", "_RETRACE", "_ELIG", "_PREFIX"):
        fresh[name] = getattr(O, name)._replace(plans={}, hot=getattr(O, name).hot.fresh(), scal={})
        monkeypatch.setattr(O, name, fresh[name])
    monkeypatch.setattr(O, "_SPECS", tuple(fresh.values()))
    return recorded


def _expected_args(spec, ins, outs, scalars):
    """What a direct launch of `spec` must pass after the stream: a plan built from scratch for these tensors."""
    plan = O._build(spec, ins, None)
    fl = spec.kargs(*spec.scalars(*scalars.values()))
    ptrs = [0 if x is None else x.data_ptr() for x in ins] + [o.data_ptr() for o in outs]
    return plan.grid, (*ptrs, 0, 0, *plan.ints, *fl, *plan.cvals)  # 0, 0: no split, no workspace


@pytest.mark.parametrize("given_out", [False, True])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_repeats_exactly_its_planned_launch(every_launch, name, given_out):
    """Each estimator's generated launch function passes the pointers of this call's tensors (0 for absent
    inputs), the plan's integers, the scalars' kernel floats and the constexprs, in the kernel's order; the
    first call's result (the interpreter runs the kernel) is what the torch backend computes."""
    recorded = every_launch
    spec_name, fn, ins, scalars = _estimator_calls()[name]
    spec = getattr(O, spec_name)

    def new_out():
        outs = tuple(torch.empty(T, N) for _ in range(spec.n_out))
        return None if not given_out else outs if spec.n_out > 1 else outs[0]

    first = fn(ins, new_out(), "triton", **scalars)
    ref = fn(ins, None, "torch", **scalars)
    for a, b in zip(first if spec.n_out > 1 else (first,), ref if spec.n_out > 1 else (ref,)):
        torch.testing.assert_close(a, b)
    assert type(first) is type(ref)
    assert recorded == []
    for _ in range(3):
        out = new_out()
        res = fn(ins, out, "triton", **scalars)
        assert type(res) is type(ref)
        outs = tuple(res) if spec.n_out > 1 else (res,)
        if given_out:
            assert all(a is b for a, b in zip(outs, out if spec.n_out > 1 else (out,)))
        assert recorded[-1] == _expected_args(spec, ins, outs, scalars)
    assert len(recorded) == 3
    if O._TensorGuards is not None:
        assert len(spec.hot.launches) == 1 and len(spec.plans) == 1


def test_a_split_plan_passes_its_stream_workspace(every_launch, monkeypatch):
    """A split plan's repeated launches carry the pointers of the workspace kept for the stream, the same
    workspace every time (its epochs count launches), and the plan's integers after them."""
    recorded = every_launch
    monkeypatch.setitem(O.config, "force", (2, 4, 1, 0, True))  # T = 5: 3 chunks of 2 rows
    spec_name, fn, ins, scalars = _estimator_calls()["gae"]
    spec = O._GAE
    first = fn(ins, None, "triton", **scalars)
    ref = fn(ins, None, "torch", **scalars)
    torch.testing.assert_close(first.advantages, ref.advantages)
    for _ in range(2):
        res = fn(ins, None, "triton", **scalars)
        (plan,) = spec.plans.values()
        assert plan.split
        link_i, link_f = plan.links[0]
        grid, expected = _expected_args(spec, ins, tuple(res), scalars)
        n_ptr = spec.n_in + spec.n_out
        assert recorded[-1] == (grid, (*expected[:n_ptr], link_i.data_ptr(), link_f.data_ptr(), *expected[n_ptr + 2:]))
    assert len(recorded) == 2


def test_one_tensor_in_two_places_stays_on_the_key_path_and_keeps_the_others_fast(every_launch):
    """On-policy V-trace passes one log-prob tensor as both policies. TensorGuards rejects a tensor it sees
    twice, so that call is served by the key path (correctly), and must not turn the other calls' launch
    functions off."""
    recorded = every_launch
    _, gae_call, gae_ins, gae_scalars = _estimator_calls()["gae"]
    gae_call(gae_ins, None, "triton", **gae_scalars)
    gae_call(gae_ins, None, "triton", **gae_scalars)
    assert len(O._GAE.hot.launches) == 1
    _, vtrace_call, ins, scalars = _estimator_calls()["vtrace"]
    on_policy = ins[:6] + (ins[6], ins[6])
    ref = vtrace_call(on_policy, None, "torch", **scalars)
    torch.testing.assert_close(vtrace_call(on_policy, None, "triton", **scalars).vs, ref.vs)
    for _ in range(2):
        res = vtrace_call(on_policy, None, "triton", **scalars)
        assert recorded[-1] == _expected_args(O._VTRACE, on_policy, tuple(res), scalars)
    assert O._TensorGuards is not None and len(O._GAE.hot.launches) == 1 and not O._VTRACE.hot.launches
    n = len(recorded)
    gae_call(gae_ins, None, "triton", **gae_scalars)
    assert len(recorded) == n + 1 and len(O._GAE.plans) == 1


def test_patterns_beyond_the_cap_stay_on_the_key_path_without_generating(every_launch, monkeypatch):
    """More type patterns than _MAX_PATTERNS in rotation: the extra ones take the key path; no launch function
    is generated again and again."""
    recorded = every_launch
    generated = []
    make = O._pattern_launch
    monkeypatch.setattr(O, "_pattern_launch",
                        lambda spec, types, first: generated.append(types) or make(spec, types, first))
    monkeypatch.setattr(O, "_MAX_PATTERNS", 3)
    _, fn, ins, _ = _estimator_calls()["gae"]
    outs = (torch.empty(T, N), torch.empty(T, N))
    patterns = [(None, dict(gamma=0.9, lambda_=0.8)), (outs, dict(gamma=0.9, lambda_=0.8)),
                (list(outs), dict(gamma=0.9, lambda_=0.8)), (None, dict(gamma=1, lambda_=0.8))]
    for _ in range(3):
        for out, scalars in patterns:
            res = fn(ins, out, "triton", **scalars)
            if len(recorded):
                assert recorded[-1] == _expected_args(O._GAE, ins, tuple(res), scalars)
    assert len(generated) == 3 and len(O._GAE.hot.launches) == 3


def test_every_pattern_stays_reachable_from_the_entry_and_served_without_the_key_path(every_launch, monkeypatch):
    """The API calls the newest launch function; a call it cannot serve goes down the chain to older ones. With
    three patterns in rotation (also from threads that each bring their own), every repeat is launched by a
    launch function: none reaches the key path (_run), and each launches exactly its own plan."""
    recorded = every_launch
    key_path_calls = []
    run = O._run
    monkeypatch.setattr(O, "_run", lambda *a: key_path_calls.append(a[0]) or run(*a))
    _, fn, ins, _ = _estimator_calls()["gae"]
    outs = (torch.empty(T, N), torch.empty(T, N))
    patterns = [(None, dict(gamma=0.9, lambda_=0.8)), (outs, dict(gamma=0.9, lambda_=0.8)),
                (list(outs), dict(gamma=0.9, lambda_=0.8)), (None, dict(gamma=1, lambda_=0.8))]
    threads = [threading.Thread(target=fn, args=(ins, out, "triton"), kwargs=sc) for out, sc in patterns]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for out, scalars in patterns:  # a pattern's first call may take the key path (its plan is new to it)
        fn(ins, out, "triton", **scalars)
    assert len(O._GAE.hot.launches) == 4
    key_path_calls.clear()
    for _ in range(3):
        for out, scalars in patterns:
            n = len(recorded)
            res = fn(ins, out, "triton", **scalars)
            assert len(recorded) == n + 1
            assert recorded[-1] == _expected_args(O._GAE, ins, tuple(res), scalars)
    assert key_path_calls == []


def test_a_plan_on_another_device_than_the_current_one_is_launched_under_that_device(every_launch, monkeypatch):
    """A plan's device differing from the current one: the launch function switches to it (as the key path
    does) instead of declining every call."""
    recorded = every_launch
    _, fn, ins, scalars = _estimator_calls()["gae"]
    fn(ins, None, "triton", **scalars)
    fn(ins, None, "triton", **scalars)
    current = [7]  # the plan's device index is None (CPU); "current" is another device until switched

    class DeviceSwitch:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.prev, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.prev

    monkeypatch.setattr(O, "_cur_device", lambda: current[0])
    monkeypatch.setattr(O.torch.cuda, "device", DeviceSwitch)
    key_path = []
    run = O._run
    monkeypatch.setattr(O, "_run", lambda *a: key_path.append(a) or run(*a))
    n = len(recorded)
    for _ in range(3):
        res = fn(ins, None, "triton", **scalars)
        assert recorded[-1] == _expected_args(O._GAE, ins, tuple(res), scalars)
    assert len(recorded) == n + 3 and current[0] == 7 and key_path == []


def test_direct_launch_only_with_the_triton_its_launcher_arguments_were_written_for(monkeypatch):
    """The direct launch passes Triton 3.6's generated-launcher arguments; with another Triton, CUDA plans launch
    through kernel[grid]."""
    import triton
    plan = type("FakePlan", (), {"device": torch.device("cuda", 0)})()
    monkeypatch.setattr(O, "_INTERPRET", False)
    monkeypatch.setattr(O, "_LAUNCHER_CHECKED", True)
    assert O._may_launch_directly(plan)
    monkeypatch.setattr(O, "_LAUNCHER_CHECKED", False)
    assert not O._may_launch_directly(plan)
    monkeypatch.undo()
    assert O._LAUNCHER_CHECKED == triton.__version__.startswith("3.6.")
