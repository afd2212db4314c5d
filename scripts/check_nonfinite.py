#!/usr/bin/env python
"""Non-finite inputs on a CUDA GPU: every estimator through the compiled Triton kernels against the float64
reference, with and without inf/NaN entries, at the plans the H200 rule picks for each shape.

With ``poison``, about one environment in eight gets an inf or NaN reward (and x) at one random step, and the
environments with a termination get a NaN value on the row after it (the final observation of the
bootstrap_value form); the forward estimators get a NaN ``initial`` in those environments. The kernels must be
non-finite exactly where the reference is, and match it elsewhere: nothing may cross a done (kernels._triton_kernels
._solve runs its fallback for such programs). Also records the device time of one call with and without the
poison (CUDA events, median of --reps calls), the cost of that fallback.

Usage: python scripts/check_nonfinite.py --out nonfinite.json [--shapes 4096x16,512x2048] [--reps 20] [--only vtrace,gae]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import kernels as K  # noqa: E402
from kernels import reference as RF  # noqa: E402

SHAPES = "64x33,4096x16,4096x128,16384x128,512x2048,1024x1024,65536x128"
FORMS = {"gae": ("bootstrap", "next_values"), "vtrace": ("bootstrap", "next_values"),
         "lambda_returns": ("bootstrap", "next_values"), "discounted_returns": ("bootstrap", "next_values"),
         "retrace": ("bootstrap", "next_values"), "eligibility_traces": ("initial", "none"),
         "episodic_prefix_sum": ("initial", "none")}


def inputs(N, T, poison, seed):
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64

    def rnd(*s):
        return torch.randn(*s, generator=g, dtype=f64)

    d = dict(rewards=rnd(T, N), values=rnd(T, N), q_values=rnd(T, N), next_values=rnd(T, N), x=rnd(T, N),
             behaviour_log_probs=-torch.rand(T, N, generator=g, dtype=f64) * 2,
             target_log_probs=-torch.rand(T, N, generator=g, dtype=f64) * 2,
             terminated=torch.rand(T, N, generator=g) < 0.02, truncated=torch.rand(T, N, generator=g) < 0.02,
             bootstrap_value=rnd(N), initial=rnd(N))
    if poison:
        cols = torch.rand(N, generator=g) < 0.125
        rows = torch.randint(0, T, (N,), generator=g)
        hit = (torch.arange(T)[:, None] == rows) & cols
        bad = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=f64)[torch.arange(N) % 3]
        d["rewards"] = torch.where(hit, bad, d["rewards"])
        d["x"] = torch.where(hit, bad, d["x"])
        after = torch.zeros_like(d["terminated"])
        after[1:] = d["terminated"][:-1] & cols
        d["values"] = torch.where(after, float("nan"), d["values"])
        d["initial"] = torch.where(cols, float("nan"), d["initial"])
    return d


def call(name, d, form, ref):
    """One estimator on the dict's tensors (the reference when ref), as a tuple of tensors."""
    b = {"bootstrap": dict(bootstrap_value=d["bootstrap_value"]), "next_values": dict(next_values=d["next_values"]),
         "initial": dict(initial=d["initial"]), "none": {}}[form]
    kw = {} if ref else dict(backend="triton")
    lp = dict(behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"])
    fl = (d["terminated"], d["truncated"])
    if name == "gae":
        return tuple((RF.gae if ref else K.compute_gae)(d["rewards"], d["values"], *fl, gamma=0.99, lambda_=0.95,
                                                        **b, **kw))
    if name == "vtrace":
        return tuple((RF.vtrace if ref else K.compute_vtrace)(d["rewards"], d["values"], *fl, **lp, gamma=0.99,
                                                              lambda_=0.95, rho_clip=1.0, c_clip=1.0, **b, **kw))
    if name == "lambda_returns":
        return ((RF.lambda_returns if ref else K.compute_lambda_returns)(d["rewards"], d["values"], *fl, gamma=0.99,
                                                                        lambda_=0.95, **b, **kw),)
    if name == "discounted_returns":
        return ((RF.discounted_returns if ref else K.compute_discounted_returns)(d["rewards"], *fl, gamma=0.99, **b,
                                                                                **kw),)
    if name == "retrace":
        return ((RF.retrace if ref else K.compute_retrace)(d["rewards"], d["q_values"], d["values"], *fl, **lp,
                                                           gamma=0.99, lambda_=0.95, c_clip=1.0, **b, **kw),)
    if name == "eligibility_traces":
        return ((RF.eligibility_traces if ref else K.compute_eligibility_traces)(d["x"], *fl, gamma=0.99,
                                                                                lambda_=0.95, **b, **kw),)
    return ((RF.episodic_prefix_sum if ref else K.compute_episodic_prefix_sum)(d["x"], *fl, **b, **kw),)


def device_us(fn, reps):
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="check_nonfinite.json", help="where the JSON goes (default: %(default)s)")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default=",".join(FORMS), help="comma-separated estimators (default: all seven)")
    args = ap.parse_args()
    names = args.only.split(",")
    unknown = sorted(set(names) - set(FORMS))
    if unknown:
        sys.exit(f"--only: unknown estimators {unknown}; known: {list(FORMS)}")
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    from kernels import _triton_ops
    rows, failures = [], 0
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        for poison in (False, True):
            d = inputs(N, T, poison, seed=N + T)
            gpu = {k: v.to("cuda", torch.float32) if v.is_floating_point() else v.cuda() for k, v in d.items()}
            for name in names:
                for form in FORMS[name]:
                    got = call(name, gpu, form, ref=False)
                    exp = call(name, d, form, ref=True)
                    ok, worst, finite_mismatch = True, 0.0, 0
                    for g_, e_ in zip(got, exp):
                        g_ = g_.double().cpu()
                        fin = torch.isfinite(e_)
                        finite_mismatch += int((torch.isfinite(g_) != fin).sum())
                        err = ((g_ - e_).abs() / (1 + e_.abs()))[fin & torch.isfinite(g_)]
                        worst = max(worst, float(err.max()) if err.numel() else 0.0)
                    ok = finite_mismatch == 0 and worst < 1e-3
                    failures += not ok
                    t = device_us(lambda: call(name, gpu, form, ref=False), args.reps)
                    kernel = {"gae": "gae_kernel", "vtrace": "vtrace_kernel", "lambda_returns": "lambda_returns_kernel",
                              "discounted_returns": "discounted_kernel", "retrace": "retrace_kernel"}.get(
                                  name, "forward_kernel")
                    row = dict(estimator=name, shape=f"{N}x{T}", form=form, poison=poison, ok=ok,
                               nonfinite_where_reference_is_not=finite_mismatch, worst_rel_err=worst,
                               device_us=t, plan=list(_triton_ops._tile(T, N, True, getattr(_triton_ops.K, kernel))))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, python=platform.python_version(),
               triton=__import__("triton").__version__, failures=failures, rows=rows)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{failures} failures of {len(rows)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
