#!/usr/bin/env python
"""Host (Python) cost of one kernels.* call on the Triton path, with the kernel launch stubbed out.

Runs on a CPU-only machine: CPU tensors stand in for CUDA ones (the wrapper only reads metadata),
the Triton launcher is replaced by a no-op and the device/stream queries by constants. What is
left is exactly the per-call wrapper work: argument checks, plan lookup, scalar handling, output
allocation (CPU allocation here, the CUDA caching allocator on a GPU) and building the launch
arguments. The torch backend is timed on the same inputs for comparison (it runs the real
computation, so it is no overhead figure at T > 1).

With --cuda (on a GPU machine) it instead splits the real call into its parts on CUDA tensors: the
metadata reads that key the launch plan, an output allocation, the launcher alone, the generated launch
function of the call's type pattern, Triton's own ``kernel[grid]`` launch, an empty Triton kernel and a
one-element torch op (the floor any Python launch pays), and the whole ``compute_gae`` call; host time
(perf_counter) and full call (CUDA events around the call, GPU idle before it). Writes JSON with --out.

With --compare-guards (CPU) it times the stubbed wrapper with the TensorGuards plan lookup on and off,
alternating in one process.

With --compare-with DIR (CPU) it times the stubbed wrapper of this checkout's kernels against another version's
``kernels/`` directory (e.g. ``git archive <commit> kernels | tar -x -C /tmp/base``), calls with ``out=``, the two
versions round-robin in one process, minimum per version over the rounds (this machine's speed drifts). With
--behind K, plans of K other shapes are remembered after the timed call's first.

Usage: python scripts/profile_host_overhead.py [--N 4096] [--T 16] [--reps 20000] [--cuda --out F]
       python scripts/profile_host_overhead.py --compare-guards --out F
       python scripts/profile_host_overhead.py --compare-with /tmp/base/kernels [--behind 6] --out F
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402


def stub_launch(ops=O):
    ops._check_device = lambda dev: None
    ops._may_launch_directly = lambda p: True
    ops._jit_launch = lambda *a, **k: None
    ops._fast_launcher = lambda ck: ((lambda *args: None), ())
    ops._cur_device = lambda: None  # CPU tensors: device.index is None
    ops._raw_stream = lambda idx: 0
    ops.clear_plans()


def calls(N, T, K=K):
    f = dict(dtype=torch.float32)
    r, v, q, b, t = (torch.randn(T, N, **f) for _ in range(5))
    te, tr = torch.rand(T, N) < 0.02, torch.rand(T, N) < 0.01
    bv, ini = torch.randn(N), torch.randn(N)
    return {
        "gae": lambda be, out=None: K.compute_gae(r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=bv,
                                                  backend=be, out=out),
        "vtrace": lambda be, out=None: K.compute_vtrace(r, v, te, tr, behaviour_log_probs=b, target_log_probs=t,
                                                        gamma=0.99, bootstrap_value=bv, backend=be, out=out),
        "lambda_returns": lambda be, out=None: K.compute_lambda_returns(
            r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=bv, backend=be, out=out),
        "discounted_returns": lambda be, out=None: K.compute_discounted_returns(
            r, te, tr, gamma=0.99, bootstrap_value=bv, backend=be, out=out),
        "retrace": lambda be, out=None: K.compute_retrace(
            r, q, v, te, tr, behaviour_log_probs=b, target_log_probs=t, gamma=0.99, lambda_=0.95,
            bootstrap_value=bv, backend=be, out=out),
        "eligibility_traces": lambda be, out=None: K.compute_eligibility_traces(
            r, te, tr, gamma=0.99, lambda_=0.95, initial=ini, backend=be, out=out),
        "episodic_prefix_sum": lambda be, out=None: K.compute_episodic_prefix_sum(
            r, te, tr, initial=ini, backend=be, out=out),
    }


def per_call_us(fn, reps):
    fn()
    xs = []
    batch = 50
    for _ in range(max(1, reps // batch)):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        xs.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(xs)


def cuda_breakdown(N, T, reps):
    """Parts of one compute_gae call on real CUDA tensors (see the module docstring)."""
    import triton

    @triton.jit
    def _empty(X):
        pass

    @triton.jit
    def _empty_gae_signature(R, V, TE, TR, BV, NV, ADV, RET, T, N,
                             s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14,
                             g_hi, g_lo, gl_hi, gl_lo):
        pass

    dev = torch.device("cuda")
    f = dict(device=dev, dtype=torch.float32)
    r, v = torch.randn(T, N, **f), torch.randn(T, N, **f)
    te, tr = torch.rand(T, N, device=dev) < 0.02, torch.rand(T, N, device=dev) < 0.01
    bv = torch.randn(N, **f)
    outs = (torch.empty(T, N, **f), torch.empty(T, N, **f))
    gae = lambda out=None: K.compute_gae(r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=bv, out=out)  # noqa: E731
    gae(outs)
    gae(outs)
    gae()
    slow = [0]
    orig_slow = O._slow

    def counting_slow(*a):
        slow[0] += 1
        return orig_slow(*a)

    O._slow = counting_slow
    ts = (r, v, te, tr, bv, *outs)
    plan = next(iter(O._GAE.plans.values()))
    fl = O._GAE.scal[(0.99, 0.95)]
    ptrs = [x.data_ptr() for x in ts[:5]] + [0] + [o.data_ptr() for o in outs]  # next_values absent
    stream = O._raw_stream(0)

    def key():
        return tuple((x.shape, x.stride(), x.dtype, x.get_device(), not x.data_ptr() & 15) for x in ts)

    def direct():
        fn, mid = plan.direct
        fn(plan.grid, 1, 1, stream, *mid, *ptrs, 0, 0, *plan.ints, *fl, *plan.cvals)  # 0, 0: no split workspace

    # the launch function of the out= pattern (the allocating call has its own)
    pattern_launch = next((f for types, f in O._GAE.hot.by_types.items() if types[1] is tuple), None)

    def jit():
        O._jit_launch(O._GAE, plan, (r, v, te, tr, bv, None), outs, fl)

    one = torch.zeros(1, **f)
    # the direct launcher on empty kernels: its fixed cost, and what GAE's 29 arguments add to it
    ck1 = _empty[(1,)](one)
    fn1, mid1 = O._fast_launcher(ck1)
    ptr1 = one.data_ptr()
    ints = list(plan.ints)
    ck29 = _empty_gae_signature[(plan.grid,)](r, v, te, tr, bv, r, *outs, *ints, *fl)
    fn29, mid29 = O._fast_launcher(ck29)
    parts = {
        "nothing_between_events": lambda: None,
        "torch_empty": lambda: torch.empty((T, N), **f),
        "metadata_key_7_tensors": key,
        "metadata_key_hash": lambda: hash(key()),
        "raw_stream_and_device": lambda: (O._raw_stream(0), O._cur_device()),
        "direct_launcher": direct,
        "direct_launcher_empty_kernel_1_arg": lambda: fn1(1, 1, 1, stream, *mid1, ptr1),
        "direct_launcher_empty_kernel_29_args": lambda: fn29(plan.grid, 1, 1, stream, *mid29, *ptrs, *ints, *fl),
        "triton_kernel_grid_launch": jit,
        "empty_triton_kernel": lambda: _empty[(1,)](one),
        "tiny_torch_op": lambda: one.add_(1.0),
        "compute_gae_out": lambda: gae(outs),
        "compute_gae_alloc": lambda: gae(),
    }
    if pattern_launch is not None:  # the generated launch function alone (no API layer)
        parts["pattern_launch_function"] = lambda: pattern_launch(r, v, te, tr, bv, None, outs, 0.99, 0.95)
    res = {}
    for name, fn in parts.items():
        fn()
        torch.cuda.synchronize()
        host = []
        for _ in range(max(5, reps // 100)):
            t0 = time.perf_counter()
            for _ in range(100):
                fn()
            host.append((time.perf_counter() - t0) / 100 * 1e6)
            torch.cuda.synchronize()
        ev = []
        for _ in range(min(reps, 500)):
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ev.append(s.elapsed_time(e) * 1e3)
        piped = []
        for _ in range(20):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(100):
                fn()
            e.record()
            torch.cuda.synchronize()
            piped.append(s.elapsed_time(e) * 1e3 / 100)
        res[name] = dict(host_us=statistics.median(host), idle_gpu_call_us=statistics.median(ev),
                         back_to_back_us=statistics.median(piped))
        print(f"{name:28s} host {res[name]['host_us']:7.2f} us   idle-GPU call (events) "
              f"{res[name]['idle_gpu_call_us']:7.2f} us   back-to-back per call {res[name]['back_to_back_us']:7.2f} us",
              flush=True)
    res["slow_path_calls"] = slow[0]
    print(f"calls that took the kernel[grid] path: {slow[0]}")
    O._slow = orig_slow
    return res


def compare_guards(N, T, rounds=5, number=2000):
    """Stubbed wrapper time with out= per call, TensorGuards lookup on against off (metadata key only),
    alternating in one process; minimum over rounds (us)."""
    import timeit

    stub_launch()
    fns = calls(N, T)
    guards = O._TensorGuards
    times = {}
    for _ in range(rounds):
        for mode in ("guards", "key"):
            O._TensorGuards = guards if mode == "guards" else None
            O.clear_plans()
            for name, fn in fns.items():
                o = fn("torch")
                fn("triton", out=o)
                fn("triton", out=o)
                t = min(timeit.repeat(lambda: fn("triton", out=o), number=number, repeat=3)) / number * 1e6
                times.setdefault(name, {}).setdefault(mode, []).append(t)
    O._TensorGuards = guards
    res = {name: {mode: min(ts) for mode, ts in by_mode.items()} for name, by_mode in times.items()}
    print(f"{'estimator':22s} {'guards (us)':>12s} {'key only (us)':>14s}")
    for name, r in res.items():
        print(f"{name:22s} {r['guards']:12.2f} {r['key']:14.2f}")
    return res


def compare_with(base_dir, N, T, rounds=300, batch=100, behind=0):
    """Stubbed wrapper time per call with out=, this checkout against the kernels package at `base_dir` (us).

    With `behind` > 0, plans for that many other shapes (N + 16, N + 32, ...) are remembered after the timed
    call's, as in a program alternating between shapes (or the benchmark's later full-call rounds)."""
    from ab_kernels import load_package
    import importlib
    base = load_package(os.path.abspath(base_dir), "kernels_base")
    stub_launch()
    stub_launch(importlib.import_module("kernels_base._triton_ops"))
    fns = {}
    for version, api in (("new", K), ("base", base)):
        for name, fn in calls(N, T, api).items():
            o = fn("torch")
            fns[(name, version)] = (lambda fn=fn, o=o: fn("triton", out=o))
            for _ in range(3):  # compile (stubbed), then remember the plan
                fns[(name, version)]()
        for k in range(behind):
            for name, fn in calls(N + 16 * (k + 1), T, api).items():
                o = fn("torch")
                fn("triton", out=o)
                fn("triton", out=o)
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            best[k] = min(best[k], (time.perf_counter() - t0) / batch * 1e6)
    res = {}
    print(f"{'estimator':22s} {'new (us)':>9s} {'base (us)':>10s} {'new/base':>9s}")
    for name in calls(N, T):
        new, old = best[(name, "new")], best[(name, "base")]
        res[name] = dict(new_us=new, base_us=old, new_over_base=new / old)
        print(f"{name:22s} {new:9.2f} {old:10.2f} {new / old:9.3f}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20000)
    ap.add_argument("--cuda", action="store_true", help="break the real call down on a CUDA GPU")
    ap.add_argument("--out", default=None, help="JSON path for --cuda / --compare-guards")
    ap.add_argument("--compare-with", default=None, metavar="KERNELS_DIR",
                    help="CPU, launcher stubbed: this checkout's wrapper against the kernels package in KERNELS_DIR")
    ap.add_argument("--behind", type=int, default=0,
                    help="with --compare-with: plans of this many other shapes remembered after the timed one's")
    ap.add_argument("--compare-guards", action="store_true",
                    help="CPU, launcher stubbed: the TensorGuards plan lookup against the metadata key alone")
    args = ap.parse_args()
    if args.behind < 0 or (args.behind and not args.compare_with):
        ap.error(f"--behind takes a count >= 0 and needs --compare-with, got --behind {args.behind}")
    if args.compare_with:
        import json
        import platform
        res = dict(machine=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
                   torch=torch.__version__, python=platform.python_version(), N=args.N, T=args.T,
                   base=os.path.abspath(args.compare_with), behind=args.behind,
                   timer="min over 300 rounds of 100 calls with out=, versions round-robin",
                   wrapper_us_with_out=compare_with(args.compare_with, args.N, args.T, behind=args.behind))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
        return
    if args.compare_guards:
        import json
        import platform
        res = dict(machine=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
                   torch=torch.__version__, python=platform.python_version(), N=args.N, T=args.T,
                   wrapper_us_with_out=compare_guards(args.N, args.T))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
        return
    if args.cuda:
        import json
        import platform
        import triton
        res = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   python=platform.python_version(), N=args.N, T=args.T,
                   parts=cuda_breakdown(args.N, args.T, args.reps))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
        return
    stub_launch()
    base = per_call_us(lambda: torch.empty(args.T, args.N), args.reps)
    print(f"[T={args.T}, N={args.N}] CPU tensors; one torch.empty of an output here: {base:.2f} us")
    print(f"{'estimator':22s} {'triton path (us)':>17s} {'with out= (us)':>15s} {'torch backend (us)':>19s}")
    for name, fn in calls(args.N, args.T).items():
        o = fn("torch")
        a = per_call_us(lambda: fn("triton"), args.reps)
        a_out = per_call_us(lambda: fn("triton", out=o), args.reps)
        tb = per_call_us(lambda: fn("torch", out=o), max(200, args.reps // 50))
        print(f"{name:22s} {a:17.2f} {a_out:15.2f} {tb:19.1f}")


if __name__ == "__main__":
    main()
