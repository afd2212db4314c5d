#!/usr/bin/env python
"""V-trace's and Retrace's traces at their edges, on a CUDA GPU: the compiled kernels against the torch backend on
the same float32 inputs, where an importance ratio overflows float32 or is infinite and `c_clip` is inf.

The trace term is 0 past the window, past a done and wherever gamma or lambda_ is 0, whatever the ratio is
(kernels.reference._traces; before the thirty-fifth session a trace of inf met those zeros as inf * 0 = NaN). About
one environment in eight gets a log ratio of 100 (exp overflows float32) at one step, one in sixteen of those a
behaviour log-prob of -inf there instead; on-policy elsewhere (scripts/check_retrace_rows_form.hit_one_step). Three
settings: gamma 0.99 and lambda_ 0.95 with the step at T-1 (V-trace's vs is then finite everywhere; Retrace's
targets at T-2 are +-inf, its trace c[T-1] multiplying a finite difference), gamma 0 and lambda_ 0 with the step
anywhere (one-step targets: finite). Agreement as in check_retrace_rows_form.compare (same NaN entries, same infs,
finite entries within 1e-4 of 1 + |torch|), and the torch backend must give no NaN. With --base, counts the NaN
entries of another kernels/ directory. Writes JSON with --out; exits 1 on a failure.

Usage: python scripts/check_trace_edges.py --out F.json [--shapes 4096x16,512x2048] [--base old/kernels]
"""
from __future__ import annotations

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
from check_retrace_rows_form import compare, hit_one_step, parse_args  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402

SETTINGS = (("window_end", 0.99, 0.95), ("gamma_0", 0.0, 0.95), ("lambda_0", 0.99, 0.0))


def inputs(N, T, seed, at_last_row):
    d, hit, g = hit_one_step(N, T, seed, 0)
    if at_last_row:
        hit = torch.zeros_like(hit)
        hit[T - 1] = torch.rand(N, generator=g, device="cuda") < 0.125
    d["target_log_probs"] = torch.where(hit, d["behaviour_log_probs"] + 100.0, d["behaviour_log_probs"])
    inf_cols = torch.rand(N, generator=g, device="cuda") < 0.0625
    d["behaviour_log_probs"] = torch.where(hit & inf_cols[None, :], -math.inf, d["behaviour_log_probs"])
    return d, int(hit.any(0).sum())


def both(d, backend, gamma, lam, mod=K):
    logp = dict(behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"])
    kw = dict(gamma=gamma, lambda_=lam, c_clip=math.inf, bootstrap_value=d["bootstrap_value"], backend=backend)
    vs, pg = mod.compute_vtrace(d["rewards"], d["values"], d["terminated"], d["truncated"], **logp, **kw)
    q = mod.compute_retrace(d["rewards"], d["q_values"], d["values"], d["terminated"], d["truncated"], **logp, **kw)
    return {"vs": vs, "pg_advantages": pg, "retrace": q}


def main():
    args, base = parse_args("another kernels/ directory: also count its NaN entries")
    rows, failures = [], 0
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        plans = {name: list(O._tile(T, N, True, kern)) for name, kern in
                 (("vtrace", O.K.vtrace_kernel), ("retrace", O.K.retrace_kernel))}
        for setting, gamma, lam in SETTINGS:
            d, envs_hit = inputs(N, T, seed=N + T, at_last_row=setting == "window_end")
            want = both(d, "torch", gamma, lam)
            got = both(d, "triton", gamma, lam)
            row = dict(shape=shape, setting=setting, gamma=gamma, lambda_=lam, plans=plans, envs_hit=envs_hit)
            for field in want:
                agree, counts = compare(got[field], want[field])  # counts' inf and nan: the torch backend's
                failures += (not agree) + (counts["nan"] > 0)
                row[field] = dict(agree=agree, **counts)
            if base is not None:
                old = both(d, "triton", gamma, lam, base)
                row["base_nan"] = {field: int(torch.isnan(x).sum()) for field, x in old.items()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(B.run_info(rows=rows, failures=failures), f, indent=1)
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
