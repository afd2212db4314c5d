#!/usr/bin/env python
"""Wall time of ``backend="triton"`` calls on CPU tensors (Triton's interpreter), in three variants:

* ``tritons_scan_16``: Triton's own element-by-element ``tl.associative_scan`` and 16 environments per program
  (the interpreted plan before the twenty-second session);
* ``by_rows_16``: the row-by-row scan our launches use (kernels/_interpreter_scan.py), 16 environments per
  program;
* ``by_rows``: that scan and the current interpreted plan (kernels._triton_ops.config's interp_block_n and
  interp_max_tile: up to 1024 environments per program).

All run in one process, round-robin, on the same inputs; each is warmed up once per shape, then timed ``--reps``
times (median). The outputs are compared bit for bit with the first variant's. Estimators: GAE and V-trace, the
tile plan, float32, bool flags, both flags given, bootstrap_value form.

Usage: python scripts/time_interpreter.py [--shapes 64x128,16x1000,1024x64,4096x16] [--reps 3] --out F.json
(shapes are N x T, environments first, as in scripts/bench_kernels.py; the tensors are [T, N]).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.interpreter import ScanOps  # noqa: E402

import kernels  # noqa: E402
import kernels._interpreter_scan as scan_module  # noqa: E402
from kernels import _triton_ops  # noqa: E402

BY_ROWS = scan_module.scan_by_rows
WIDE = _triton_ops.config["interp_block_n"]
VARIANTS = {"tritons_scan_16": (ScanOps.generic_scan, 16), "by_rows_16": (BY_ROWS, 16), "by_rows": (BY_ROWS, WIDE)}


def inputs(T, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(rewards=torch.randn(T, N, generator=g), values=torch.randn(T, N, generator=g),
                terminated=torch.rand(T, N, generator=g) < 0.05, truncated=torch.rand(T, N, generator=g) < 0.02,
                bootstrap_value=torch.randn(N, generator=g),
                behaviour_log_probs=-torch.rand(T, N, generator=g), target_log_probs=-torch.rand(T, N, generator=g))


def calls(d):
    return {
        "gae": lambda: tuple(kernels.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"],
                                                 gamma=0.99, lambda_=0.95, bootstrap_value=d["bootstrap_value"],
                                                 backend="triton")),
        "vtrace": lambda: tuple(kernels.compute_vtrace(
            d["rewards"], d["values"], d["terminated"], d["truncated"],
            behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"], gamma=0.99,
            bootstrap_value=d["bootstrap_value"], backend="triton")),
    }


def timed(fn, variant):
    scan, block_n = VARIANTS[variant]
    scan_module.scan_by_rows = scan
    _triton_ops.config["interp_block_n"] = block_n
    _triton_ops.clear_plans()
    try:
        t = time.perf_counter()
        out = fn()
        return time.perf_counter() - t, out
    finally:
        scan_module.scan_by_rows = BY_ROWS
        _triton_ops.config["interp_block_n"] = WIDE
        _triton_ops.clear_plans()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="64x128,16x1000,1024x64,4096x16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="time_interpreter.json", help="where the JSON goes (default: %(default)s)")
    a = ap.parse_args()
    rows = []
    for shape in a.shapes.split(","):
        N, T = (int(x) for x in shape.split("x"))
        for name, fn in calls(inputs(T, N)).items():
            outs = {v: timed(fn, v)[1] for v in VARIANTS}  # warm-up (plan, interpreted module)
            times = {v: [] for v in VARIANTS}
            for _ in range(a.reps):
                for v in VARIANTS:
                    times[v].append(timed(fn, v)[0])
            first = outs["tritons_scan_16"]
            same = {v: all(torch.equal(x, y) for x, y in zip(o, first)) for v, o in outs.items()}
            med = {v: statistics.median(t) for v, t in times.items()}
            speedup = {v: med["tritons_scan_16"] / m for v, m in med.items()}
            rows.append(dict(estimator=name, N=N, T=T, seconds=times, median_s=med, speedup_vs_tritons_scan_16=speedup,
                             bit_identical_to_tritons_scan_16=same))
            print(f"{name:7s} {N}x{T}: " + ", ".join(f"{v} {med[v]:.3f} s ({speedup[v]:.1f}x)" for v in VARIANTS)
                  + f", bit-identical {all(same.values())}", flush=True)
    meta = dict(script="scripts/time_interpreter.py", date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
                machine=platform.machine(), cpus=os.cpu_count(), reps=a.reps, interp_block_n=WIDE,
                interp_max_tile=_triton_ops.config["interp_max_tile"],
                triton_interpret_env=os.environ.get("TRITON_INTERPRET"))
    with open(a.out, "w") as f:
        json.dump(dict(meta=meta, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
