#!/usr/bin/env python
"""A/B of two versions of the kernels package in one process on a CUDA GPU: device time per estimator and shape.

The baseline is another checkout's ``kernels/`` directory (e.g. ``git worktree add /tmp/base <commit>``, or
``git archive <commit> kernels | tar -x -C bench_tmp/base``), imported under the name ``kernels_base``. For
every estimator and shape, both versions are checked against the float64 reference and timed as
scripts/bench_kernels.py times device time (CUDA events around one call after a read of 4x L2, median),
alternating A and B (and which goes first) in ``--rounds`` rounds so that drift of the machine affects both
alike; a copy of the same bytes is timed in every round too. Writes JSON with each version's plan, the per-round medians and
the ratio new / base. With ``--host`` it times the host side instead, alternating the same way: the CPU time of one
call (bench_kernels.time_host_only) and the full call (bench_kernels.time_back_to_back: back-to-back calls with
``out=``, CUDA events around a batch), both per call.

Usage: python scripts/ab_kernels.py --base bench_tmp/base/kernels [--new other/kernels] --out ab.json [--shapes 65536x128,16384x128]
       [--only gae,vtrace] [--rounds 5] [--reps 40] [--host]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import reference as RF  # noqa: E402


def load_package(path, name):
    """The package at `path` (a directory with __init__.py) imported as `name`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def plan(pkg, name, N, T):
    ops = importlib.import_module(pkg.__name__ + "._triton_ops")
    kernel = dict(gae=ops.K.gae_kernel, vtrace=ops.K.vtrace_kernel, lambda_returns=ops.K.lambda_returns_kernel,
                  discounted_returns=ops.K.discounted_kernel, retrace=ops.K.retrace_kernel).get(name, ops.K.forward_kernel)
    return list(ops._tile(T, N, True, kernel))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the baseline's kernels/ directory")
    ap.add_argument("--new", default=None, help="the new version's kernels/ directory (default: this checkout's)")
    ap.add_argument("--out", default="ab_kernels.json", help="where the JSON goes (default: %(default)s)")
    ap.add_argument("--shapes", default="65536x128,16384x128")
    ap.add_argument("--only", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--host", action="store_true", help="host time and back-to-back full calls instead of device time")
    ap.add_argument("--base-first", action="store_true",
                    help="check and allocate the outputs of the base version first (default: the new one first); "
                         "used to ask whether the slot bias at 512x2048 follows allocation order")
    args = ap.parse_args()
    base = load_package(os.path.abspath(args.base), "kernels_base")
    new = load_package(os.path.abspath(args.new), "kernels_new") if args.new else K
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    names = args.only.split(",") if args.only else list(B.BYTES)
    calls = {"new": B.fast_calls(new), "base": B.fast_calls(base)}
    refs = B.ref_calls(RF)
    timer = ("host: perf_counter around one call (bench_kernels.time_host_only); full: CUDA events around batches of "
             "back-to-back calls with out= (bench_kernels.time_back_to_back)" if args.host else
             "CUDA events around one call after a read of 4x L2 (bench_kernels.time_clean_l2)")
    res = B.run_info(base=os.path.abspath(args.base), new=os.path.abspath(args.new) if args.new else "this checkout's kernels/",
                     timer=timer + "; median per round, A and B alternating, each first in every other round", results={})
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        d = B.make_inputs(N, T, dev, seed=11)
        for name in names:
            exp = refs[name](d)
            r = dict(N=N, T=T, plan_new=plan(new, name, N, T), plan_base=plan(base, name, N, T),
                     new=[], base=[], copy=[])
            outs = {}
            for v in (("base", "new") if args.base_first else ("new", "base")):
                o = calls[v][name](d)
                got = o if isinstance(o, tuple) else (o,)
                want = exp if isinstance(exp, tuple) else (exp,)
                r[f"max_err_{v}"] = max(((g.double() - e).abs() / (1 + e.abs())).max().item()
                                         for g, e in zip(got, want))
                outs[v] = tuple(o) if isinstance(o, tuple) else o
            if args.host:
                r.update(new_full=[], base_full=[])
            for i in range(args.rounds):
                for v in (("new", "base") if i % 2 == 0 else ("base", "new")):
                    if args.host:
                        r[v].append(B.time_host_only(lambda dd: calls[v][name](dd, out=outs[v]), d, args.reps))
                        r[v + "_full"].append(B.time_back_to_back(calls[v][name], [d], args.reps, outs=[outs[v]]))
                    else:
                        r[v].append(B.time_clean_l2(lambda: calls[v][name](d, out=outs[v]), args.reps, l2))
                r["copy"].append(B.copy_same_bytes_us(B.BYTES[name] * N * T, args.reps, l2))
            if args.host:
                r["full_new_over_base"] = statistics.median(r["new_full"]) / statistics.median(r["base_full"])
                print(f"{name:20s} {shape:10s} full call new {statistics.median(r['new_full']):6.2f} base "
                      f"{statistics.median(r['base_full']):6.2f} us  new/base {r['full_new_over_base']:.3f}", flush=True)
            r["new_over_base"] = statistics.median(r["new"]) / statistics.median(r["base"])
            r["new_over_copy"] = statistics.median(r["new"]) / statistics.median(r["copy"])
            r["base_over_copy"] = statistics.median(r["base"]) / statistics.median(r["copy"])
            print(f"{name:20s} {shape:10s} new {statistics.median(r['new']):6.1f} base {statistics.median(r['base']):6.1f} "
                  f"us  new/base {r['new_over_base']:.3f}  copy {statistics.median(r['copy']):5.1f}  "
                  f"plans {r['plan_new']} / {r['plan_base']}  err {r['max_err_new']:.1e}/{r['max_err_base']:.1e}",
                  flush=True)
            res["results"][f"{name}/{shape}"] = r
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
