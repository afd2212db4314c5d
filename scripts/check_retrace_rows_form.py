#!/usr/bin/env python
"""Retrace's row-by-row solve in the reference's form, on a CUDA GPU: the compiled kernels against the torch backend
on the same float32 inputs, where traces are huge or infinite.

Both sides form Q_ret[t+1] - q[t+1] before multiplying it by the trace (the kernels in the row-by-row solve that a
program with a non-finite value takes, kernels._triton_kernels._retrace_rows_terms), so they must agree, inf and
NaN included: same finite entries within 1e-4 relative to 1 + |torch|, the same inf with its sign, NaN at the
same entries. With `c_clip` inf and on-policy log-probs (traces lambda_), about one environment in eight gets a
log ratio of 85 at one step (a trace of 8.2e36) where q_values is 100 and a terminated step has a reward of 100.5:
the trace times q overflows float32, the trace times Q_ret - q = 0.5 does not. One in sixteen of those gets a
behaviour log-prob of -inf there instead (an infinite trace). Split plans (fewer than 4096 environments,
T >= 1024) solve in the reference's form too since the twenty-fifth session and count like the others (before,
they composed maps in the scans' form and were recorded, not counted). Also the two hand cases of
tests/test_kernels_backends.py.

Then the row-by-row step's order (--rows-step, on by default): gamma = lambda_ = 1, on-policy, c_clip 1 and
next_values, with s = 1e38 in about one environment in eight at three rows h..h+2 (truncated at h+2): rewards 0,
q_values [0, 3s, 0], next_values [2s, -2s, 2.5s], where the reference's Q_ret is [-0.5s, 0.5s, 2.5s] and the
difference carried row by row, Q_ret - q, overflows float32 at h+1 if r + V+ - q is added first
(_retrace_rows_step); another one in eight has an inf reward at t = 0, which sends most tile and segment programs
to the row-by-row solve. Counted like the shapes above. Writes JSON with --out; exits 1 on a failure.

Usage: python scripts/check_retrace_rows_form.py --out F.json [--shapes 4096x16,16384x128] [--base old/kernels]
       [--no-rows-step]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402

SHAPES = "64x33,4096x16,4096x128,16384x128,65536x128,1024x1024,512x2048"
GAMMA, LAM = 0.99, 0.95


def hit_one_step(N, T, seed, first_row):
    """(bench_kernels.make_inputs(N, T, seed), a [T, N] mask with one step from first_row on in about one environment
    in eight, and the generator that drew it, for further draws)."""
    d = B.make_inputs(N, T, torch.device("cuda"), seed=seed)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    cols = torch.rand(N, generator=g, device="cuda") < 0.125
    rows = torch.randint(first_row, T, (N,), generator=g, device="cuda") if T > first_row else \
        torch.zeros(N, dtype=torch.long, device="cuda")
    return d, (torch.arange(T, device="cuda")[:, None] == rows) & cols, g


def inputs(N, T, seed, next_values):
    d, hit, g = hit_one_step(N, T, seed, 1)
    # On-policy elsewhere (traces lambda_ < 1): with c_clip inf, traces up to e times gamma*lambda_ would amplify
    # float32 rounding over the horizon, and two float32 results would differ by more than 1e-4. The hit row
    # terminates with Q_ret = r = 100.5 against q = 100: Q_ret - q = 0.5 exactly in float32.
    d["target_log_probs"] = torch.where(hit, d["behaviour_log_probs"] + 85.0, d["behaviour_log_probs"])
    d["q_values"] = torch.where(hit, torch.full_like(d["q_values"], 100.0), d["q_values"])
    d["rewards"] = torch.where(hit, torch.full_like(d["rewards"], 100.5), d["rewards"])
    d["terminated"] = d["terminated"] | hit
    inf_cols = torch.rand(N, generator=g, device="cuda") < 0.0625
    d["behaviour_log_probs"] = torch.where(hit & inf_cols[None, :], -math.inf, d["behaviour_log_probs"])
    if next_values:
        d["next_values"] = torch.randn(T, N, generator=g, device="cuda")
    return d


def rows_step_inputs(N, T, seed):
    """The inputs of the row-by-row step's check (module docstring): (inputs, [T, N] mask of the rows h..h+2)."""
    d, hit, g = hit_one_step(N, T, seed, 0)
    s = 1e38
    h = hit.int().argmax(0)
    t = torch.arange(T, device="cuda")[:, None]
    cols = hit.any(0) & (h + 2 < T)
    three = cols & (t >= h) & (t <= h + 2)
    k = (t - h).clamp(0, 2)
    pick = lambda vals: torch.tensor(vals, device="cuda")[k]  # noqa: E731
    d["target_log_probs"] = d["behaviour_log_probs"].clone()
    d["next_values"] = torch.where(three, pick([2 * s, -2 * s, 2.5 * s]),
                                   torch.randn(T, N, generator=g, device="cuda"))
    d["q_values"] = torch.where(three, pick([0.0, 3 * s, 0.0]), d["q_values"])
    d["rewards"] = torch.where(three, 0.0, d["rewards"])
    d["terminated"] = d["terminated"] & ~three
    d["truncated"] = torch.where(three, t == h + 2, d["truncated"])
    inf_cols = ~cols & (torch.rand(N, generator=g, device="cuda") < 0.125)
    d["rewards"][0] = torch.where(inf_cols, math.inf, d["rewards"][0])
    return d, three


def retrace(d, backend, next_values, mod=K, gamma=GAMMA, lambda_=LAM, c_clip=math.inf):
    boot = dict(next_values=d["next_values"]) if next_values else dict(bootstrap_value=d["bootstrap_value"])
    return mod.compute_retrace(d["rewards"], d["q_values"], d["values"], d["terminated"], d["truncated"],
                             behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"],
                             gamma=gamma, lambda_=lambda_, c_clip=c_clip, backend=backend, **boot)


def compare(got, want):
    """(agree, counts): same NaN entries, same infs, finite entries within 1e-4 of 1 + |want|."""
    nan_same = torch.equal(torch.isnan(got), torch.isnan(want))
    inf_same = torch.equal(torch.isinf(got), torch.isinf(want)) and torch.equal(got[torch.isinf(got)],
                                                                                 want[torch.isinf(got)])
    fin = torch.isfinite(got) & torch.isfinite(want)
    err = ((got[fin].double() - want[fin].double()).abs() / (1 + want[fin].double().abs()))
    worst = float(err.max()) if err.numel() else 0.0
    counts = dict(finite=int(torch.isfinite(want).sum()), inf=int(torch.isinf(want).sum()),
                  nan=int(torch.isnan(want).sum()), nan_kernel=int(torch.isnan(got).sum()), worst_rel_err=worst)
    return nan_same and inf_same and worst < 1e-4, counts


def hand_cases():
    """The float32 overflow and the infinite trace of tests/test_kernels_backends.py, on the GPU."""
    f = lambda *rows: torch.tensor(rows, dtype=torch.float32, device="cuda")  # noqa: E731
    out = {}
    kw = dict(behaviour_log_probs=f([0.0], [0.0]), target_log_probs=f([0.0], [85.0]), gamma=0.9, lambda_=1.0,
              c_clip=math.inf, bootstrap_value=f(0.0))
    got = K.compute_retrace(f([1.0], [100.5]), f([3.0], [100.0]), f([0.1], [0.2]),
                            torch.zeros(2, 1, dtype=torch.bool, device="cuda"), backend="triton", **kw)
    want0 = 1.0 + 0.9 * (0.2 + math.exp(85.0) * 0.5)
    out["overflow"] = dict(got=got.flatten().tolist(), want=[want0, 100.5],
                           ok=abs(got[0, 0].item() / want0 - 1) < 1e-5 and got[1, 0].item() == 100.5)
    kw = dict(behaviour_log_probs=f([0.0], [0.0], [0.0]), target_log_probs=f([0.0], [math.inf], [0.0]), gamma=0.9,
              lambda_=1.0, c_clip=math.inf, bootstrap_value=f(0.3))
    got = K.compute_retrace(f([1.0], [2.0], [3.0]), f([0.5], [1.0], [0.7]), f([0.1], [0.2], [0.4]),
                            torch.zeros(3, 1, dtype=torch.bool, device="cuda"), backend="triton", **kw)
    out["infinite_trace"] = dict(got=got.flatten().tolist(), ok=got[0, 0].item() == math.inf
                                 and bool(torch.isfinite(got[1:]).all()))
    return out


def parse_args(base_help):
    """(--out, --shapes and --base parsed, the --base kernels package or None); exits without a CUDA GPU."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.basename(sys.argv[0]).replace(".py", ".json"),
                    help="where the JSON goes (default: %(default)s)")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--base", default=None, help=base_help)
    ap.add_argument("--no-rows-step", dest="rows_step", action="store_false",
                    help="skip the row-by-row step's check (module docstring)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    base = None
    if args.base:
        from ab_kernels import load_package
        base = load_package(os.path.abspath(args.base), "kernels_base")
    return args, base


def check(d, next_values, base, **kw):
    """(agree, fields of the JSON row) for one input set: the kernels against the torch backend (compare), and with
    a base package, its NaN entries and those where it is not finite but the torch backend is."""
    want = retrace(d, "torch", next_values, **kw)
    agree, counts = compare(retrace(d, "triton", next_values, **kw), want)
    if base is not None:
        old = retrace(d, "triton", next_values, base, **kw)
        counts.update(nan_base=int(torch.isnan(old).sum()),
                      base_nonfinite_where_torch_is_finite=int((~torch.isfinite(old) & torch.isfinite(want)).sum()))
    return agree, dict(agree=agree, **counts)


def main():
    args, base = parse_args("another kernels/ directory: also count the entries where its kernels give NaN, and "
                            "those where they are not finite but the torch backend is")
    rows, failures = [], 0
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        plan = list(O._tile(T, N, True, O.K.retrace_kernel))
        split = bool(plan[4])
        for next_values in (False, True):
            d = inputs(N, T, seed=N + T, next_values=next_values)
            agree, fields = check(d, next_values, base)
            row = dict(shape=shape, form="next_values" if next_values else "bootstrap", plan=plan, split=split,
                       envs_with_a_trace_over_exp80=int((d["target_log_probs"] -
                                                         d["behaviour_log_probs"] > 80).any(0).sum()),
                       envs_with_an_infinite_trace=int(torch.isinf(d["behaviour_log_probs"]).any(0).sum()), **fields)
            failures += not agree
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.rows_step:
            d, three = rows_step_inputs(N, T, seed=N + T)
            agree, fields = check(d, True, base, gamma=1.0, lambda_=1.0, c_clip=1.0)
            row = dict(shape=shape, form="rows_step", plan=plan, split=split,
                       envs_with_the_three_rows=int(three.any(0).sum()),
                       envs_with_an_inf_reward=int(torch.isinf(d["rewards"][0]).sum()), **fields)
            failures += not agree
            rows.append(row)
            print(json.dumps(row), flush=True)
    hand = hand_cases()
    failures += sum(not c["ok"] for c in hand.values())
    print(json.dumps(hand), flush=True)
    with open(args.out, "w") as f:
        json.dump(B.run_info(rows=rows, hand_cases=hand, failures=failures), f, indent=1)
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
