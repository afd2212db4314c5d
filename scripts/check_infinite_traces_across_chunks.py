#!/usr/bin/env python
"""Infinite traces and values inside long episodes, on a CUDA GPU: Retrace, V-trace and GAE from the compiled kernels
against the torch backend on the same float32 inputs, and what such inputs cost.

About one environment in eight gets a behaviour log-prob of -inf at one random step (c_clip inf: an infinite trace)
and no done anywhere, so the rows before that step are +-inf with the sign of the bracket the trace multiplies, far
back through the window. A split plan (fewer than 4096 environments, T >= 1024) composes the maps of the chunks after
its own; multiplied out, the infinite factor meets a sum of terms of both signs and gives inf - inf = NaN, so since
the twenty-sixth session a chunk whose incoming carry is not finite is solved again row by row, after a walk through
the chunks after it that takes the rows of those whose maps cannot be trusted (kernels._triton_kernels._walk_chunks).
GAE gets a value of +inf instead (the bootstrap_value form: values[t+1] inside an episode, so the reference's
advantages are NaN on the rows before it, inf - inf; the split plans' chunks publish maps of the returns, which give
+-inf there, and their row-by-row solve carries advantages across those maps since the twenty-seventh session,
kernels._triton_kernels._gae_edges). The check wants the same NaN entries, the same infs with their signs and finite
entries within 1e-4 relative to 1 + |torch| (check_retrace_rows_form.compare); on-policy elsewhere, traces lambda_.
It also records the time of one call on these inputs and on the same inputs without the infinite entries
(check_nonfinite.device_us: CUDA events around the call, median of REPS calls; host time included where the call is
host-bound). With --base, counts the entries where another kernels/ directory gives NaN and the torch backend does
not, and the other way round. Writes JSON with --out; exits 1 on a failure.

Usage: python scripts/check_infinite_traces_across_chunks.py --out F.json [--shapes 512x2048] [--base old/kernels]
       (the shapes of check_retrace_rows_form by default)
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
from check_nonfinite import device_us  # noqa: E402
from check_retrace_rows_form import GAMMA, LAM, compare, hit_one_step, parse_args  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402

REPS = 20


def inputs(N, T, seed, next_values, name):
    """(clean, poisoned): on-policy inputs, and the same with the -inf behaviour log-probs (GAE: +inf values) in
    their done-free columns (bench_kernels.make_inputs' dones are cleared there in both)."""
    d, hit, g = hit_one_step(N, T, seed, 1)
    d["target_log_probs"] = d["behaviour_log_probs"].clone()
    cols = hit.any(0)[None, :]
    d["terminated"] = d["terminated"] & ~cols
    d["truncated"] = d["truncated"] & ~cols
    if next_values:
        d["next_values"] = torch.randn(T, N, generator=g, device="cuda")
    if name == "gae":
        return d, dict(d, values=torch.where(hit, math.inf, d["values"]))
    return d, dict(d, behaviour_log_probs=torch.where(hit, -math.inf, d["behaviour_log_probs"]))


def call(name, d, backend, next_values, mod=K):
    """Retrace's targets, V-trace's (vs, pg_advantages) or GAE's (advantages, returns), as a tuple of (field,
    tensor)."""
    boot = dict(next_values=d["next_values"]) if next_values else dict(bootstrap_value=d["bootstrap_value"])
    if name == "gae":
        out = mod.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAM,
                              backend=backend, **boot)
        return tuple(zip(out._fields, out))
    kw = dict(behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"], gamma=GAMMA,
              lambda_=LAM, c_clip=math.inf, backend=backend, **boot)
    if name == "retrace":
        return (("q_targets", mod.compute_retrace(d["rewards"], d["q_values"], d["values"], d["terminated"],
                                                  d["truncated"], **kw)),)
    out = mod.compute_vtrace(d["rewards"], d["values"], d["terminated"], d["truncated"], **kw)
    return tuple(zip(out._fields, out))


def main():
    args, base = parse_args("another kernels/ directory: also count its NaN entries where the torch backend has none, "
                            "and the other way round")
    rows, failures = [], 0
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        for name in ("retrace", "vtrace", "gae"):
            plan = list(O._tile(T, N, True, getattr(O.K, f"{name}_kernel")))
            for next_values in (False, True):
                clean, poisoned = inputs(N, T, seed=N + T, next_values=next_values, name=name)
                hit = torch.isinf(poisoned["values" if name == "gae" else "behaviour_log_probs"])
                row = dict(shape=shape, estimator=name, form="next_values" if next_values else "bootstrap",
                           plan=plan, split=bool(plan[4]), envs_with_an_infinite_input=int(hit.any(0).sum()))
                want = call(name, poisoned, "torch", next_values)
                for (field, w_), (_, g_) in zip(want, call(name, poisoned, "triton", next_values)):
                    agree, counts = compare(g_, w_)
                    failures += not agree
                    row[field] = dict(agree=agree, **counts)
                if base is not None:
                    old = call(name, poisoned, "triton", next_values, base)
                    row["base_nan_where_torch_is_not"] = {
                        field: int((torch.isnan(o_) & ~torch.isnan(w_)).sum()) for (field, w_), (_, o_) in
                        zip(want, old)}
                    row["torch_nan_where_base_is_not"] = {
                        field: int((torch.isnan(w_) & ~torch.isnan(o_)).sum()) for (field, w_), (_, o_) in
                        zip(want, old)}
                row["device_us_clean"] = device_us(lambda: call(name, clean, "triton", next_values), REPS)
                row["device_us_infinite_inputs"] = device_us(lambda: call(name, poisoned, "triton", next_values),
                                                             REPS)
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(B.run_info(rows=rows, failures=failures, reps=REPS), f, indent=1)
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
