#!/usr/bin/env python
"""A GPU check of the twenty-third session's change: a sparse tensor is a ValueError naming it even after the call's
shapes have a cached plan and a direct launcher (GAE, four arguments), and all seven estimators through
backend="triton" against the float64 reference (kernels.reference) at five shapes, both bootstrap forms (error
relative to 1 + |reference|, float32, pass under 5e-4). Writes $OUT/check_s23.json (or ./check_s23.json).

Usage: python scripts/check_sparse_and_accuracy.py      (CHECK_DEV=cpu TRITON_INTERPRET=1: two small shapes on the CPU)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import triton  # noqa: E402

import kernels as K  # noqa: E402
from kernels import reference as R  # noqa: E402

dev = os.environ.get("CHECK_DEV", "cuda")
out = {"gpu": (torch.cuda.get_device_name() if dev == "cuda" else "cpu"), "torch": torch.__version__, "triton": triton.__version__,
       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "sparse": {}, "accuracy": []}
g = torch.Generator(device=dev).manual_seed(0)

def inputs(T, N, dt=torch.float32):
    f = dict(device=dev, dtype=dt)
    return dict(r=torch.randn(T, N, generator=g, **f), v=torch.randn(T, N, generator=g, **f),
                q=torch.randn(T, N, generator=g, **f), blp=-torch.rand(T, N, generator=g, **f),
                tlp=-torch.rand(T, N, generator=g, **f),
                te=torch.rand(T, N, generator=g, device=dev) < 0.05, tr=torch.rand(T, N, generator=g, device=dev) < 0.03,
                bv=torch.randn(N, generator=g, **f), nv=torch.randn(T, N, generator=g, **f))

def calls(d, mod, nv):
    bk = dict(next_values=d["nv"]) if nv else dict(bootstrap_value=d["bv"])
    kw = {} if mod is R else dict(backend="triton")
    cv = (lambda x: x.double()) if mod is R else (lambda x: x)
    D = {k: (cv(x) if x.dtype.is_floating_point else x) for k, x in d.items()}
    bk = {k: cv(x) for k, x in bk.items()}
    return {
        "gae": lambda: tuple(mod.compute_gae(D["r"], D["v"], D["te"], D["tr"], gamma=.99, lambda_=.95, **bk, **kw)) if mod is K else R.gae(D["r"], D["v"], D["te"], D["tr"], gamma=.99, lambda_=.95, **bk),
        "vtrace": lambda: tuple(mod.compute_vtrace(D["r"], D["v"], D["te"], D["tr"], behaviour_log_probs=D["blp"], target_log_probs=D["tlp"], gamma=.99, lambda_=.9, rho_clip=1.0, c_clip=1.0, **bk, **kw)) if mod is K else R.vtrace(D["r"], D["v"], D["te"], D["tr"], behaviour_log_probs=D["blp"], target_log_probs=D["tlp"], gamma=.99, lambda_=.9, rho_clip=1.0, c_clip=1.0, **bk),
        "lambda_returns": lambda: (mod.compute_lambda_returns(D["r"], D["v"], D["te"], D["tr"], gamma=.99, lambda_=.95, **bk, **kw),) if mod is K else (R.lambda_returns(D["r"], D["v"], D["te"], D["tr"], gamma=.99, lambda_=.95, **bk),),
        "discounted_returns": lambda: (mod.compute_discounted_returns(D["r"], D["te"], D["tr"], gamma=.99, **bk, **kw),) if mod is K else (R.discounted_returns(D["r"], D["te"], D["tr"], gamma=.99, **bk),),
        "retrace": lambda: (mod.compute_retrace(D["r"], D["q"], D["v"], D["te"], D["tr"], behaviour_log_probs=D["blp"], target_log_probs=D["tlp"], gamma=.99, lambda_=.95, **bk, **kw),) if mod is K else (R.retrace(D["r"], D["q"], D["v"], D["te"], D["tr"], behaviour_log_probs=D["blp"], target_log_probs=D["tlp"], gamma=.99, lambda_=.95, **bk),),
        "eligibility_traces": lambda: (mod.compute_eligibility_traces(D["r"], D["te"], D["tr"], gamma=.99, lambda_=.95, initial=D["bv"], **kw),) if mod is K else (R.eligibility_traces(D["r"], D["te"], D["tr"], gamma=.99, lambda_=.95, initial=D["bv"]),),
        "episodic_prefix_sum": lambda: (mod.compute_episodic_prefix_sum(D["r"], D["te"], D["tr"], initial=D["bv"], **kw),) if mod is K else (R.episodic_prefix_sum(D["r"], D["te"], D["tr"], initial=D["bv"]),),
    }

ok = True
SHAPES = [(5, 7), (4096, 16), (512, 2048), (16384, 128), (37, 300)] if dev == "cuda" else [(5, 7), (3, 40)]
for (N, T) in SHAPES:
    for nv in (False, True):
        d = inputs(T, N)
        got, want = calls(d, K, nv), calls(d, R, nv)
        for name in got:
            a, b = got[name](), want[name]()
            err = max(((x.double() - y).abs() / (1 + y.abs())).max().item() for x, y in zip(a, b))
            good = err < 5e-4
            ok &= good
            out["accuracy"].append(dict(N=N, T=T, next_values=nv, estimator=name, max_rel_err=err, ok=good))

d = inputs(16, 64)
for arg in ("r", "v", "te", "bv"):
    fn = lambda dd: K.compute_gae(dd["r"], dd["v"], dd["te"], gamma=.9, lambda_=.9, bootstrap_value=dd["bv"])
    fn(d); fn(d)  # cached plan and direct launcher
    dd = dict(d); dd[arg] = d[arg].to_sparse()
    try:
        fn(dd); res = "no error"
    except ValueError as e:
        res = "ValueError: " + str(e)
    except Exception as e:  # noqa: BLE001
        res = f"{type(e).__name__}: {e}"
    out["sparse"][arg] = res
    ok &= res.startswith("ValueError")
out["all_ok"] = bool(ok)
print(json.dumps(out["sparse"], indent=1)); print("accuracy checks:", len(out["accuracy"]), "all ok:", ok)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "check_s23.json"), "w"), indent=1)
