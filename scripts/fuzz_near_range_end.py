#!/usr/bin/env python
"""Random GAE and V-trace cases with inputs near the end of float64's range, through the Triton kernels in six
plans under the interpreter and through the torch backend, against the float64 reference: counts the outputs whose
class (finite, inf, NaN) differs from the reference's, as finite only in the result, finite only in the
reference, or inf against NaN.

Each case: T in 1..7, N in 1..3; rewards, values and the bootstrap (or next_values) standard normal, about 40% of
them replaced by +-U(0, 1) * 1.5e308; terminated with probability 0.25, truncated 0.15; gamma in {0.5, 0.99, 1};
GAE lambda_ in {0, 0.95, 1}; V-trace log ratios N(0, 1) scaled by 1, 30 or 200, rho_clip and pg_rho_clip 1 or inf.
A class mismatch is one of the known differences (docs/kernels.md, "Known differences (open)"), a finding, or a
case where the reference's order overflows and the kernels' does not; the JSON keeps every mismatch's case index
so a case can be rebuilt with the same seed. CPU only (TRITON_INTERPRET=1 is set here). The kernels are those of the
checkout the script lies in: to run another version's, copy the script into that checkout's scripts/.

Usage: python scripts/fuzz_near_range_end.py [--cases 300] [--seed 0] [--out fuzz.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import sys

os.environ["TRITON_INTERPRET"] = "1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import triton  # noqa: E402

import kernels  # noqa: E402
from kernels import _triton_ops  # noqa: E402
from kernels import reference as RF  # noqa: E402

PLANS = {"default": {}, "chunks_of_two": {"max_time_block": 2}, "segments": {"interp_seg": (2, 2)},
         "segments_prefetch": {"interp_seg": (1, 2, 2)}, "split_tile": {"force": (2, 2, 1, 0, True)},
         "split_segments": {"force": (2, 2, 1, 1, True)}}
BIG = 1.5e308


def make_case(rng: random.Random, gen: torch.Generator):
    T, N = rng.randint(1, 7), rng.randint(1, 3)

    def arr(*shape):
        x = torch.randn(*shape, dtype=torch.float64, generator=gen)
        near = torch.rand(*shape, generator=gen) < 0.4
        far = torch.sign(x) * BIG * torch.rand(*shape, dtype=torch.float64, generator=gen)
        return torch.where(near, far, x)

    r, v = arr(T, N), arr(T, N)
    terminated = torch.rand(T, N, generator=gen) < 0.25
    truncated = torch.rand(T, N, generator=gen) < 0.15
    name = rng.choice(["gae", "vtrace"])
    kw = dict(gamma=rng.choice([0.5, 0.99, 1.0]))
    if rng.random() < 0.5:
        kw["next_values"] = arr(T, N)
    else:
        kw["bootstrap_value"] = arr(N)
    if name == "gae":
        kw["lambda_"] = rng.choice([0.0, 0.95, 1.0])
    else:
        kw.update(behaviour_log_probs=torch.zeros(T, N, dtype=torch.float64),
                  target_log_probs=torch.randn(T, N, dtype=torch.float64, generator=gen) * rng.choice([1, 30, 200]),
                  rho_clip=rng.choice([1.0, math.inf]), pg_rho_clip=rng.choice([1.0, math.inf]))
    return name, (r, v, terminated, truncated), kw


def class_mismatches(got, exp):
    """Per output: [elements finite only in got, finite only in the reference, other class differences (inf
    against NaN)]."""
    out = []
    for g, e in zip(got, exp):
        only_got = torch.isfinite(g) & ~torch.isfinite(e)
        only_ref = ~torch.isfinite(g) & torch.isfinite(e)
        other = ~torch.isfinite(g) & ~torch.isfinite(e) & (torch.isnan(g) != torch.isnan(e))
        out.append([int(only_got.sum()), int(only_ref.sum()), int(other.sum())])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz_near_range_end.json")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    saved = dict(_triton_ops.config)
    mismatches = []
    for i in range(a.cases):
        name, args, kw = make_case(rng, gen)
        fn = kernels.compute_gae if name == "gae" else kernels.compute_vtrace
        exp = (RF.gae if name == "gae" else RF.vtrace)(*args, **kw)
        runs = {"torch": lambda: fn(*args, backend="torch", **kw)}
        for plan, cfg in PLANS.items():
            def run(cfg=cfg):
                _triton_ops.config.update(saved)
                _triton_ops.config.update(cfg)
                _triton_ops.clear_plans()
                return fn(*args, backend="triton", **kw)
            runs["triton " + plan] = run
        for label, run in runs.items():
            counts = class_mismatches([g.double() for g in run()], exp)
            if any(any(c) for c in counts):
                mismatches.append(dict(case=i, estimator=name, path=label, per_output=counts,
                                       form="next_values" if "next_values" in kw else "bootstrap_value"))
    _triton_ops.config.update(saved)
    _triton_ops.clear_plans()
    summary = {}
    for m in mismatches:
        for j, what in enumerate(("finite only in the result", "finite only in the reference", "inf against NaN")):
            if any(c[j] for c in m["per_output"]):
                key = f"{m['estimator']} {m['path']}: {what}"
                summary[key] = summary.get(key, 0) + 1
    out = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               torch=torch.__version__, triton=triton.__version__, kernels=os.path.dirname(kernels.__file__),
               cases=a.cases, seed=a.seed,
               plans=PLANS, cases_with_a_mismatch_per_path=summary, mismatches=mismatches)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for k, n in sorted(summary.items()):
        print(f"{k:70s} {n} of {a.cases} cases")
    print(f"{len({m['case'] for m in mismatches})} cases with a mismatch somewhere; wrote {a.out}")


if __name__ == "__main__":
    main()
