#!/usr/bin/env python
"""Wall time of ``backend="triton"`` calls on CPU tensors (Triton's interpreter) with the row-by-row scan our
launches use (kernels/_interpreter_scan.py) against Triton's own element-by-element scan.

Both variants run in one process, alternating, on the same inputs; each is warmed up once per shape, then timed
``--reps`` times (median). The outputs of the two are compared bit for bit. Estimators: GAE and V-trace, the
default (tile) plan, float32, bool flags, both flags given, bootstrap_value form.

Usage: python scripts/time_interpreter.py [--shapes 64x128,16x1000,1024x64] [--reps 3] --out F.json
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

BY_ROWS = scan_module.scan_by_rows


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


def timed(fn, scan):
    scan_module.scan_by_rows = scan
    try:
        t = time.perf_counter()
        out = fn()
        return time.perf_counter() - t, out
    finally:
        scan_module.scan_by_rows = BY_ROWS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="64x128,16x1000,1024x64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    for shape in a.shapes.split(","):
        N, T = (int(x) for x in shape.split("x"))
        for name, fn in calls(inputs(T, N)).items():
            times = {"by_rows": [], "tritons": []}
            outs = {}
            for variant, scan in (("by_rows", BY_ROWS), ("tritons", ScanOps.generic_scan)):
                outs[variant] = timed(fn, scan)[1]  # warm-up (plan, interpreted module)
            for _ in range(a.reps):
                for variant, scan in (("by_rows", BY_ROWS), ("tritons", ScanOps.generic_scan)):
                    times[variant].append(timed(fn, scan)[0])
            same = all(torch.equal(x, y) for x, y in zip(outs["by_rows"], outs["tritons"]))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append(dict(estimator=name, T=T, N=N, seconds=times, median_s=med,
                             speedup=med["tritons"] / med["by_rows"], bit_identical=same))
            print(f"{name:7s} {N}x{T}: by rows {med['by_rows']:.3f} s, Triton's scan {med['tritons']:.3f} s, "
                  f"{med['tritons'] / med['by_rows']:.2f}x, bit-identical {same}", flush=True)
    meta = dict(script="scripts/time_interpreter.py", date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
                machine=platform.machine(), cpus=os.cpu_count(), reps=a.reps,
                triton_interpret_env=os.environ.get("TRITON_INTERPRET"))
    with open(a.out, "w") as f:
        json.dump(dict(meta=meta, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
