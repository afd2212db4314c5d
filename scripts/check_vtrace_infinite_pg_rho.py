#!/usr/bin/env python
"""V-trace's pg_advantages with an infinite pg_rho, on a CUDA GPU: the compiled kernels against the torch backend
on the same float32 inputs.

pg_advantages[t] = pg_rho[t] * (r + gamma*w - values[t]); both sides form the bracket before multiplying it by
pg_rho (kernels._triton_kernels._vtrace_emit), so with pg_rho_clip inf and a behaviour log-prob of -inf they must
agree, inf and NaN included (scripts/check_retrace_rows_form.compare: same NaN entries, the same infs with their
signs, finite entries within 1e-4 relative to 1 + |torch|). About one environment in eight gets that log-prob at
one random step; rho_clip and c_clip stay 1, so vs is finite. Every plan, split plans included (they share the
emit). Also the hand case of tests/test_kernels_backends.py (column 0). With --base, counts the entries where
another kernels/ directory gives NaN and the torch backend does not. Writes JSON with --out; exits 1 on a failure.

Usage: python scripts/check_vtrace_infinite_pg_rho.py --out F.json [--shapes 4096x16,512x2048] [--base old/kernels]
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
from check_retrace_rows_form import GAMMA, LAM, compare, hit_one_step, parse_args  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402


def inputs(N, T, seed, next_values):
    d, hit, g = hit_one_step(N, T, seed, 0)
    d["behaviour_log_probs"] = torch.where(hit, -math.inf, d["behaviour_log_probs"])
    if next_values:
        d["next_values"] = torch.randn(T, N, generator=g, device="cuda")
    return d


def vtrace(d, backend, next_values, mod=K):
    boot = dict(next_values=d["next_values"]) if next_values else dict(bootstrap_value=d["bootstrap_value"])
    return mod.compute_vtrace(d["rewards"], d["values"], d["terminated"], d["truncated"],
                              behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"],
                              gamma=GAMMA, lambda_=LAM, pg_rho_clip=math.inf, backend=backend, **boot)


def hand_case():
    """Column 0 of test_an_infinite_pg_rho_multiplies_the_whole_bracket: pg_advantages[0] is +inf."""
    T = 9
    beh = torch.zeros(T, 1, device="cuda")
    beh[0, 0] = -math.inf
    r = torch.linspace(1.0, 5.0, T, device="cuda")[:, None]
    v = torch.full((T, 1), 0.2, device="cuda")
    v[0, 0] = 2.0
    vs, pg = K.compute_vtrace(r, v, torch.zeros(T, 1, dtype=torch.bool, device="cuda"), None,
                              behaviour_log_probs=beh, target_log_probs=torch.zeros_like(beh), gamma=0.9,
                              lambda_=0.95, pg_rho_clip=math.inf, bootstrap_value=torch.full((1,), 0.3, device="cuda"),
                              backend="triton")
    return dict(pg=pg.flatten().tolist(), ok=pg[0, 0].item() == math.inf and bool(torch.isfinite(pg[1:]).all())
                and bool(torch.isfinite(vs).all()))


def main():
    args, base = parse_args("another kernels/ directory: also count its NaN entries where the torch backend has none")
    rows, failures = [], 0
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        plan = list(O._tile(T, N, True, O.K.vtrace_kernel))
        for next_values in (False, True):
            d = inputs(N, T, seed=N + T, next_values=next_values)
            want = vtrace(d, "torch", next_values)
            got = vtrace(d, "triton", next_values)
            row = dict(shape=shape, form="next_values" if next_values else "bootstrap", plan=plan,
                       split=bool(plan[4]), envs_with_an_infinite_pg_rho=int(torch.isinf(d["behaviour_log_probs"])
                                                                           .any(0).sum()))
            for field, g_, w_ in zip(want._fields, got, want):
                agree, counts = compare(g_, w_)
                failures += not agree
                row[field] = dict(agree=agree, **counts)
            if base is not None:
                old = vtrace(d, "triton", next_values, base)
                row["base_nan_where_torch_is_not"] = {
                    field: int((torch.isnan(o_) & ~torch.isnan(w_)).sum()) for field, o_, w_ in
                    zip(want._fields, old, want)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    hand = hand_case()
    failures += not hand["ok"]
    print(json.dumps(hand), flush=True)
    with open(args.out, "w") as f:
        json.dump(B.run_info(rows=rows, hand_case=hand, failures=failures), f, indent=1)
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
