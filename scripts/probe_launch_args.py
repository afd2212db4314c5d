#!/usr/bin/env python
"""Host time of Triton's direct launcher against the number and kind of a kernel's arguments (CUDA GPU).

A repeated kernels.* call ends in Triton's generated C launcher (kernels._triton_ops._fast_launcher), which parses
every argument of the kernel's signature: pointers (format "O", then a conversion of the Python int), 32-bit ints
("i"), float32 scalars ("f", then packed), and constexprs, which are passed too ("O") and then dropped. V-trace's
kernel takes 54 arguments (10 tensors, 2 workspace pointers, T, N, 19 strides, 10 scalar halves, 11 constexprs),
GAE's 42. This times, in one process and alternating in rounds, empty kernels whose signatures hold K arguments of
one kind (K = 0, 8, 16, 32) besides one pointer, and the direct launch of GAE's and V-trace's plans at a small
shape with their real arguments, so that the cost of one argument of each kind, and what a shorter signature
(e.g. one stride pair for tensors that share their layout) would save a call, can be read off.

Host time: perf_counter around batches of calls, the GPU drained between batches; median per round, then the
median over rounds. Writes JSON with --out.

Usage: python scripts/probe_launch_args.py [--rounds 7] [--calls 2000] --out F.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

KINDS = ("int", "ptr", "float", "constexpr")
COUNTS = (0, 8, 16, 32)


def empty_kernels(path):
    """A module of empty @triton.jit kernels empty_<kind>_<k>(X, a0..a{k-1}), written to `path` and imported
    (Triton reads a kernel's source from its file)."""
    lines = ["import triton", "import triton.language as tl", ""]
    for kind in KINDS:
        for k in COUNTS:
            ann = ": tl.constexpr" if kind == "constexpr" else ""
            args = "".join(f", a{i}{ann}" for i in range(k))
            lines += ["@triton.jit", f"def empty_{kind}_{k}(X{args}):", "    pass", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    spec = importlib.util.spec_from_file_location("probe_launch_args_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_us(fn, calls):
    """Median over 10 batches of the per-call host time of `calls` // 10 calls, the GPU drained between batches."""
    from probe_host_noise import per_call_us
    return per_call_us(fn, n=max(1, calls // 10), rounds=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import bench_kernels as B
    import kernels as K
    from kernels import _triton_ops as O

    dev = torch.device("cuda")
    one = torch.zeros(16, device=dev)
    ptr = one.data_ptr()
    stream = O._raw_stream(dev.index or 0)
    with tempfile.TemporaryDirectory() as tmp:
        mod = empty_kernels(os.path.join(tmp, "probe_launch_args_kernels.py"))
        values = {"int": lambda i: 3 + i, "ptr": lambda i: one, "float": lambda i: 0.5 + i,
                  "constexpr": lambda i: 3 + i}
        fns = {}
        for kind in KINDS:
            for k in COUNTS:
                kern = getattr(mod, f"empty_{kind}_{k}")
                a = [values[kind](i) for i in range(k)]
                ck = kern[(1,)](one, *a)
                fn, fixed = O._fast_launcher(ck)
                launch_args = [ptr] + [x.data_ptr() if isinstance(x, torch.Tensor) else x for x in a]
                fns[f"{kind}/{k}"] = (lambda fn=fn, fixed=fixed, la=launch_args:
                                      fn(1, 1, 1, stream, *fixed, *la))

        # GAE's and V-trace's own plans at 4096x16: the generated launch function and the launcher alone
        d = B.make_inputs(4096, 16, dev, seed=3)
        calls = B.fast_calls(K)
        for name, spec in (("gae", O._GAE), ("vtrace", O._VTRACE)):
            out = calls[name](d)
            out = tuple(out) if isinstance(out, tuple) else out
            for _ in range(3):
                calls[name](d, out=out)
            fns[f"{name}_call"] = (lambda name=name, out=out: calls[name](d, out=out))
            launch = next(f for types, f in spec.hot.by_types.items() if types[1] is not type(None))
            guards, plan = launch.entries[0]
            fn, fixed = plan.direct
            tensors = [x for x in (d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"])]
            ptrs = [x.data_ptr() for x in tensors] + [0]
            if name == "vtrace":
                ptrs += [d["behaviour_log_probs"].data_ptr(), d["target_log_probs"].data_ptr()]
            ptrs += [o.data_ptr() for o in out]
            n_args = len(ptrs) + 2 + len(plan.tail[1])
            fns[f"{name}_launcher"] = (lambda fn=fn, fixed=fixed, ptrs=ptrs, plan=plan:
                                       fn(plan.grid, 1, 1, stream, *fixed, *ptrs, 0, 0, *plan.tail[1]))
            fns[f"{name}_launcher"].n_args = n_args

        rows = {k: [] for k in fns}
        tiny = []
        for r in range(args.rounds):
            order = list(fns) if r % 2 == 0 else list(reversed(fns))
            for k in order:
                rows[k].append(host_us(fns[k], args.calls))
            tiny.append(host_us(lambda: one.add_(1.0), args.calls))
            print(f"round {r}: " + " ".join(f"{k} {rows[k][-1]:.2f}" for k in fns) + f" tiny {tiny[-1]:.2f}",
                  flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    per_arg = {}
    for kind in KINDS:
        xs, ys = list(COUNTS), [med[f"{kind}/{k}"] for k in COUNTS]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        per_arg[kind] = slope * 1e3  # ns per argument
    res = B.run_info(timer="perf_counter around batches of calls, GPU drained between batches; median of 10 "
                     "batches per round, median over rounds", rounds=args.rounds, calls=args.calls,
                     median_us=med, rounds_us=rows, tiny_op_us=tiny, ns_per_argument=per_arg,
                     launcher_args={k: getattr(fns[k], "n_args", None) for k in fns if k.endswith("_launcher")})
    for kind in KINDS:
        print(f"{kind:10s} {per_arg[kind]:6.1f} ns per argument  (" +
              ", ".join(f"{k}: {med[f'{kind}/{k}']:.2f} us" for k in COUNTS) + ")")
    for k in ("gae_call", "gae_launcher", "vtrace_call", "vtrace_launcher"):
        print(f"{k:16s} {med[k]:6.2f} us" + (f"  ({fns[k].n_args} arguments)" if k.endswith("launcher") else ""))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
