#!/usr/bin/env python
"""Finite inputs that overflow inside one episode must not reach the episode before a done, in the segment plans
(split or not) on a GPU.

The GPU form of tests/test_kernels_backends.py::test_an_overflow_of_finite_inputs_does_not_cross_a_done, with the
plans kernels._triton_ops._tile picks (split segments at 512x2048 and 1024x1024; segments in one program at
4096x128, 16384x32 and 16384x128): float64, every column its own case at an edge e between segments, each case
built so that the rows before the edge see a finite map of their own and a finite y entering them and overflow only
in y = A + B*y_in (docs/kernels.md, "Segment plans, finite inputs that overflow"). Backward estimators: rewards
of -1.5e308 on the edge's row and the row before it (V-trace: on the edge's row, traces e^3 on the 4 rows before
it; Retrace: traces on the 4 rows up to the edge, its trace at t being c[t+1]) and a done before them; forward
ones mirror it after the edge. Two layouts (--layout):

* between: the edges are chunk edges (rows 128*k), the done 5 rows before the edge, in another segment (the split
  plans' case);
* inside: the edges are rows 16*k, the done 2 rows before the edge, inside the segment that overflows (every
  segment plan's case: segments hold 4, 8 or 16 rows, so 16*k is a segment edge in all of them).

Compared with the torch backend on the same GPU: no NaN anywhere, and every row of the other episode equal to
within rtol = atol = 1e-10, as in the test (the two backends add in different orders, so values near 0 differ
relatively by more than float64's rounding). Writes JSON with --out.

Usage: python scripts/check_split_overflow.py --out check.json [--shapes 512x2048,1024x1024] [--layout between,inside]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kernels  # noqa: E402

BIG = -1.5e308
NAMES = ("gae", "vtrace", "lambda_returns", "discounted_returns", "retrace", "eligibility_traces",
         "episodic_prefix_sum")


def inputs(T, N, name, dev, layout):
    """(inputs, mask of the other episode's rows) with one case per column (layout: see the module docstring)."""
    g = torch.Generator(device="cpu").manual_seed(49)
    d = {k: torch.randn(T, N, generator=g, dtype=torch.float64) for k in ("r", "v", "q", "x")}
    mu = -torch.rand(T, N, generator=g, dtype=torch.float64)
    pi = mu.clone()
    trunc = torch.zeros(T, N, dtype=torch.bool)
    other = torch.zeros(T, N, dtype=torch.bool)
    forward = name in ("eligibility_traces", "episodic_prefix_sum")
    step, gap = (128, 4) if layout == "between" else (16, 1)
    for n in range(N):
        edge = step * (1 + n % (T // step - 1))
        if forward:
            d["x"][edge - 1:edge + 1, n] = BIG
            trunc[edge + gap - 1, n] = True
            other[edge + gap:, n] = True
        else:
            trunc[edge - gap - 1, n] = True
            other[:edge - gap, n] = True
            if name == "vtrace":
                d["r"][edge, n] = BIG
                pi[edge - 4:edge, n] += 3.0
            elif name == "retrace":
                d["r"][edge, n] = BIG
                pi[edge - 3:edge + 1, n] += 3.0
            else:
                d["r"][edge - 1:edge + 1, n] = BIG
    d.update(mu=mu, pi=pi, term=torch.zeros(T, N, dtype=torch.bool), trunc=trunc,
             boot=torch.randn(N, generator=g, dtype=torch.float64))
    return {k: t.to(dev) for k, t in d.items()}, other.to(dev)


def run(name, d, backend):
    common = dict(backend=backend)
    if name == "gae":
        return kernels.compute_gae(d["r"], d["v"], d["term"], d["trunc"], gamma=0.99, lambda_=0.95,
                                   bootstrap_value=d["boot"], **common)
    if name == "vtrace":
        return kernels.compute_vtrace(d["r"], d["v"], d["term"], d["trunc"], behaviour_log_probs=d["mu"],
                                      target_log_probs=d["pi"], gamma=0.99, lambda_=1.0, rho_clip=1e6, c_clip=1e6,
                                      pg_rho_clip=1e6, bootstrap_value=d["boot"], **common)
    if name == "lambda_returns":
        return (kernels.compute_lambda_returns(d["r"], d["v"], d["term"], d["trunc"], gamma=0.99, lambda_=0.95,
                                               bootstrap_value=d["boot"], **common),)
    if name == "discounted_returns":
        return (kernels.compute_discounted_returns(d["r"], d["term"], d["trunc"], gamma=0.99,
                                                   bootstrap_value=d["boot"], **common),)
    if name == "retrace":
        return (kernels.compute_retrace(d["r"], d["q"], d["v"], d["term"], d["trunc"], behaviour_log_probs=d["mu"],
                                        target_log_probs=d["pi"], gamma=0.99, lambda_=1.0, c_clip=1e6,
                                        bootstrap_value=d["boot"], **common),)
    if name == "eligibility_traces":
        return (kernels.compute_eligibility_traces(d["x"], d["term"], d["trunc"], gamma=0.99, lambda_=0.95,
                                                   **common),)
    return (kernels.compute_episodic_prefix_sum(d["x"], d["term"], d["trunc"], **common),)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="check_split_overflow.json", help="where the JSON goes (default: %(default)s)")
    ap.add_argument("--shapes", default="512x2048,1024x1024")
    ap.add_argument("--layout", default="between,inside")
    args = ap.parse_args()
    results, ok_all = [], True
    for shape, layout in ((s, l) for s in args.shapes.split(",") for l in args.layout.split(",")):
        N, T = (int(v) for v in shape.split("x"))
        if layout not in ("between", "inside"):
            raise ValueError(f"--layout takes between and inside, got {layout!r}")
        if T < (256 if layout == "between" else 32):
            raise ValueError(f"--shapes: {shape} has too few steps for the {layout} layout's edges")
        for name in NAMES:
            d, other = inputs(T, N, name, "cuda", layout)
            got = run(name, d, "triton")
            exp = run(name, d, "torch")
            checks = dict(overflowed=bool(any(torch.isinf(e).any() for e in exp)),
                          nan_triton=int(sum(g.isnan().sum() for g in got)),
                          nan_torch=int(sum(e.isnan().sum() for e in exp)),
                          other_episode_mismatches=int(sum((~torch.isclose(g[other], e[other], rtol=1e-10, atol=1e-10))
                                                           .sum() for g, e in zip(got, exp))),
                          other_episode_worst_abs_err=max(float((g[other] - e[other]).abs().nan_to_num(float("inf"))
                                                                .max()) for g, e in zip(got, exp)))
            ok = checks["overflowed"] and not checks["nan_triton"] and not checks["nan_torch"] \
                and not checks["other_episode_mismatches"]
            ok_all &= ok
            results.append(dict(estimator=name, N=N, T=T, layout=layout, ok=ok, **checks))
            print(f"{name:20s} {shape:10s} {layout:8s} {'ok' if ok else 'FAIL'} {checks}", flush=True)
    doc = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=datetime.date.today().isoformat(),
               all_ok=ok_all, results=results)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("all ok" if ok_all else "FAILURES")


if __name__ == "__main__":
    main()
