#!/usr/bin/env python
"""Random GAE and V-trace cases (or Retrace's and lambda-returns', --estimators) with inputs near the end of
float64's range, through the Triton kernels in six plans under the interpreter and through the torch backend,
against the float64 reference: counts the outputs whose class (finite, inf, NaN) differs from the reference's, as
finite only in the result, finite only in the reference, or inf against NaN.

Each case: T in 1..7, N in 1..3; rewards, values and the bootstrap (or next_values) standard normal, about 40% of
them replaced by +-U(0, 1) * 1.5e308; terminated with probability 0.25, truncated 0.15; gamma in {0.5, 0.99, 1}; GAE
lambda_ in {0, 0.95, 1}, lambda-returns' in {0, 0.5, 0.95, 1}; V-trace log ratios N(0, 1) scaled by 1, 30 or 200,
rho_clip and pg_rho_clip 1 or inf; Retrace lambda_ in {0, 0.95, 1}, q_values drawn as the values are, log ratios as
V-trace's, c_clip 1 or inf. The estimator of each case is drawn from --estimators (default gae,vtrace: the cases of
the earlier runs). For Retrace and lambda-returns, the elements finite only in the result are also compared with the
recurrence in numpy's long double (x87 80-bit on x86-64, whose range reaches 1e4932, so none of these sums
overflows): its value within float64's range there means only the reference's order overflowed, and the JSON keeps
the largest relative difference from it. A class mismatch is one of the known differences (docs/kernels.md, "Known
differences (open)"), a finding, or a case where the reference's order overflows and the kernels' does not; the JSON
keeps every mismatch's case index so a case can be rebuilt with the same seed. CPU only (TRITON_INTERPRET=1 is set
here). The kernels are those of the checkout the script lies in: to run another version's, copy the script into that
checkout's scripts/.

Usage: python scripts/fuzz_near_range_end.py [--cases 300] [--seed 0] [--estimators gae,vtrace] [--out fuzz.json]
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

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import kernels  # noqa: E402
from kernels import _triton_ops  # noqa: E402
from kernels import reference as RF  # noqa: E402

PLANS = {"default": {}, "chunks_of_two": {"max_time_block": 2}, "segments": {"interp_seg": (2, 2)},
         "segments_prefetch": {"interp_seg": (1, 2, 2)}, "split_tile": {"force": (2, 2, 1, 0, True)},
         "split_segments": {"force": (2, 2, 1, 1, True)}}
BIG = 1.5e308


ESTIMATORS = {"gae": (kernels.compute_gae, RF.gae), "vtrace": (kernels.compute_vtrace, RF.vtrace),
              "retrace": (kernels.compute_retrace, RF.retrace),
              "lambda_returns": (kernels.compute_lambda_returns, RF.lambda_returns)}


def make_case(rng: random.Random, gen: torch.Generator, estimators: list[str]):
    T, N = rng.randint(1, 7), rng.randint(1, 3)

    def arr(*shape):
        x = torch.randn(*shape, dtype=torch.float64, generator=gen)
        near = torch.rand(*shape, generator=gen) < 0.4
        far = torch.sign(x) * BIG * torch.rand(*shape, dtype=torch.float64, generator=gen)
        return torch.where(near, far, x)

    r, v = arr(T, N), arr(T, N)
    terminated = torch.rand(T, N, generator=gen) < 0.25
    truncated = torch.rand(T, N, generator=gen) < 0.15
    name = rng.choice(estimators)
    kw = dict(gamma=rng.choice([0.5, 0.99, 1.0]))
    if rng.random() < 0.5:
        kw["next_values"] = arr(T, N)
    else:
        kw["bootstrap_value"] = arr(N)
    if name == "gae":
        kw["lambda_"] = rng.choice([0.0, 0.95, 1.0])
    elif name == "lambda_returns":
        kw["lambda_"] = rng.choice([0.0, 0.5, 0.95, 1.0])
    elif name == "retrace":
        kw.update(lambda_=rng.choice([0.0, 0.95, 1.0]), behaviour_log_probs=torch.zeros(T, N, dtype=torch.float64),
                  target_log_probs=torch.randn(T, N, dtype=torch.float64, generator=gen) * rng.choice([1, 30, 200]),
                  c_clip=rng.choice([1.0, math.inf]))
        return name, (r, arr(T, N), v, terminated, truncated), kw
    else:
        kw.update(behaviour_log_probs=torch.zeros(T, N, dtype=torch.float64),
                  target_log_probs=torch.randn(T, N, dtype=torch.float64, generator=gen) * rng.choice([1, 30, 200]),
                  rho_clip=rng.choice([1.0, math.inf]), pg_rho_clip=rng.choice([1.0, math.inf]))
    return name, (r, v, terminated, truncated), kw


def retrace_long_double(rewards, q_values, values, terminated, truncated, *, behaviour_log_probs, target_log_probs,
                        gamma, lambda_, c_clip, bootstrap_value=None, next_values=None):
    """kernels.reference.retrace's recurrence in np.longdouble ([T, N] arrays): Q_ret[t] = r + gamma*(1-term) *
    (V+[t] + k[t]*c[t+1]*(Q_ret[t+1] - q[t+1])), c = lambda_*min(c_clip, pi/mu), 0 where gamma or lambda_ is 0 and
    a zero coefficient giving 0 whatever it multiplies, as there."""
    L = np.longdouble
    ld = lambda x: None if x is None else x.numpy().astype(L)  # noqa: E731
    r, q, v, bv, nv = ld(rewards), ld(q_values), ld(values), ld(bootstrap_value), ld(next_values)
    term = terminated.numpy()
    done = term | truncated.numpy()
    g = L(gamma)
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.zeros_like(r) if gamma == 0 or lambda_ == 0 else \
            L(lambda_) * np.minimum(L(c_clip), np.exp(ld(target_log_probs) - ld(behaviour_log_probs)))
        T = r.shape[0]
        out = np.zeros_like(r)
        nxt = np.zeros_like(r[0])
        for t in reversed(range(T)):
            vn = nv[t] if nv is not None else (v[t + 1] if t < T - 1 else bv)
            trace = np.zeros_like(nxt)
            if t < T - 1:
                coef = g * np.where(done[t], L(0), c[t + 1])
                trace = np.where(coef == 0, L(0), coef * (nxt - q[t + 1]))
            nxt = np.where(term[t], r[t], r[t] + g * vn + trace)
            out[t] = nxt
    return out


def lambda_returns_long_double(rewards, values, terminated, truncated, *, gamma, lambda_, bootstrap_value=None,
                               next_values=None):
    """kernels.reference.lambda_returns' recurrence in np.longdouble ([T, N] arrays): G[t] = r + gamma*(1-term) *
    ((1-l)*V+[t] + l*G[t+1]), l = lambda_*(1-done) (0 at T-1), the carry not read where gamma*l is 0, as there."""
    L = np.longdouble
    ld = lambda x: None if x is None else x.numpy().astype(L)  # noqa: E731
    r, v, bv, nv = ld(rewards), ld(values), ld(bootstrap_value), ld(next_values)
    term = terminated.numpy()
    done = term | truncated.numpy()
    g = L(gamma)
    with np.errstate(over="ignore", invalid="ignore"):
        T = r.shape[0]
        out = np.zeros_like(r)
        nxt = np.zeros_like(r[0])
        for t in reversed(range(T)):
            vn = nv[t] if nv is not None else (v[t + 1] if t < T - 1 else bv)
            lam = np.where(done[t], L(0), L(lambda_)) if t < T - 1 else np.zeros_like(nxt)
            carried = np.where((lam == 0) | (g == 0), L(0), lam * nxt)
            nxt = np.where(term[t], r[t], r[t] + g * ((1 - lam) * vn + carried))
            out[t] = nxt
    return out


EXACT = ({"retrace": retrace_long_double, "lambda_returns": lambda_returns_long_double}
         if np.finfo(np.longdouble).maxexp > 1024 else {})


def exact_check(name, args, kw, got, exp):
    """For the elements of got (Retrace's or lambda-returns' one output) finite where exp is not: (how many, how many
    of them have an exact value within float64's range, the largest |got - exact| / |exact| over those), or None where
    EXACT has no estimator of that name."""
    if name not in EXACT:
        return None
    sel = (torch.isfinite(got) & ~torch.isfinite(exp)).numpy()
    exact = EXACT[name](*args, **kw)[sel]
    in_range = np.isfinite(exact) & (np.abs(exact) <= np.longdouble(np.finfo(np.float64).max))
    g = got.numpy()[sel].astype(np.longdouble)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(g - exact)[in_range] / np.abs(exact)[in_range]
    return int(sel.sum()), int(in_range.sum()), float(rel.max()) if rel.size else None


def _outputs(x):
    """An estimator's outputs as a tuple (Retrace returns one tensor)."""
    return (x,) if isinstance(x, torch.Tensor) else tuple(x)


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
    ap.add_argument("--estimators", default="gae,vtrace",
                    help="comma-separated, drawn from per case: " + ",".join(ESTIMATORS))
    ap.add_argument("--out", default="fuzz_near_range_end.json")
    a = ap.parse_args()
    estimators = a.estimators.split(",")
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown or not estimators:
        ap.error(f"--estimators takes names from {', '.join(ESTIMATORS)}; got {a.estimators!r}")
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    saved = dict(_triton_ops.config)
    mismatches = []
    for i in range(a.cases):
        name, args, kw = make_case(rng, gen, estimators)
        fn, reference = ESTIMATORS[name]
        exp = _outputs(reference(*args, **kw))
        runs = {"torch": lambda: fn(*args, backend="torch", **kw)}
        for plan, cfg in PLANS.items():
            def run(cfg=cfg):
                _triton_ops.config.update(saved)
                _triton_ops.config.update(cfg)
                _triton_ops.clear_plans()
                return fn(*args, backend="triton", **kw)
            runs["triton " + plan] = run
        for label, run in runs.items():
            got = [g.double() for g in _outputs(run())]
            counts = class_mismatches(got, exp)
            if any(any(c) for c in counts):
                mismatches.append(dict(case=i, estimator=name, path=label, per_output=counts,
                                       form="next_values" if "next_values" in kw else "bootstrap_value"))
                if counts[0][0]:
                    check = exact_check(name, args, kw, got[0], exp[0])
                    if check is not None:
                        n, n_in_range, worst = check
                        mismatches[-1]["finite_only_in_result_vs_long_double"] = dict(
                            elements=n, exact_within_float64=n_in_range, worst_rel_diff=worst)
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
               cases=a.cases, seed=a.seed, estimators=estimators,
               plans=PLANS, cases_with_a_mismatch_per_path=summary, mismatches=mismatches)
    checked = [m["finite_only_in_result_vs_long_double"] for m in mismatches
               if "finite_only_in_result_vs_long_double" in m]
    if checked:
        worst = [c["worst_rel_diff"] for c in checked if c["worst_rel_diff"] is not None]
        out["finite_only_in_result_vs_long_double"] = dict(
            elements=sum(c["elements"] for c in checked),
            exact_within_float64=sum(c["exact_within_float64"] for c in checked),
            worst_rel_diff=max(worst) if worst else None)
        print("finite only in the result, against long double:", out["finite_only_in_result_vs_long_double"])
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for k, n in sorted(summary.items()):
        print(f"{k:70s} {n} of {a.cases} cases")
    print(f"{len({m['case'] for m in mismatches})} cases with a mismatch somewhere; wrote {a.out}")


if __name__ == "__main__":
    main()
