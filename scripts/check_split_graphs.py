#!/usr/bin/env python
"""GPU check of the split plan's workspaces under CUDA graphs and concurrent streams (few envs, long T).

Cases, each compared with the float64 reference (GAE backward, eligibility traces forward, 512x2048):
  * two graphs captured with torch.cuda.graph's defaults (one capture stream for both), the second
    replayed before the first has ever run;
  * both graphs replayed concurrently on two streams, many times;
  * eager calls with different inputs on two streams at once, many times;
  * eager calls on the default stream after all that.
A broken workspace scheme shows up as wrong values or as a hang (run it under `timeout`). Writes JSON.

Usage: timeout 120 python scripts/check_split_graphs.py --out split-graphs.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import kernels  # noqa: E402
from kernels import reference as ref  # noqa: E402

T, N = 2048, 512


def inputs(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return dict(r=torch.randn(T, N, device="cuda", generator=g), v=torch.randn(T, N, device="cuda", generator=g),
                te=torch.rand(T, N, device="cuda", generator=g) < 0.02, bv=torch.randn(N, device="cuda", generator=g))


def gae(d, out):
    return kernels.compute_gae(d["r"], d["v"], d["te"], gamma=0.99, lambda_=0.95, bootstrap_value=d["bv"], out=out)


def traces(d, out):
    return kernels.compute_eligibility_traces(d["r"], d["te"], gamma=0.99, lambda_=0.95, initial=d["bv"], out=out)


def expected(name, d):
    dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
    if name == "gae":
        return ref.gae(dd["r"], dd["v"], dd["te"], gamma=0.99, lambda_=0.95, bootstrap_value=dd["bv"])[0]
    return ref.eligibility_traces(dd["r"], dd["te"], gamma=0.99, lambda_=0.95, initial=dd["bv"])


def err(got, exp):
    return ((got.double() - exp).abs() / (1 + exp.abs())).max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    res = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cases={})
    for name, fn in (("gae", gae), ("eligibility_traces", traces)):
        A, B = inputs(1), inputs(2)
        eA, eB = expected(name, A), expected(name, B)
        mk = lambda: (torch.empty(T, N, device="cuda"), torch.empty(T, N, device="cuda")) if name == "gae" \
            else torch.empty(T, N, device="cuda")  # noqa: E731
        oA, oB = mk(), mk()
        first = lambda o: o[0] if isinstance(o, tuple) else o  # noqa: E731
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            fn(A, oA)
            fn(B, oB)
        torch.cuda.synchronize()
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            fn(A, oA)
        with torch.cuda.graph(g2):
            fn(B, oB)
        for o in (oA, oB):
            first(o).fill_(float("nan"))
        g2.replay()
        torch.cuda.synchronize()
        res["cases"][f"{name}/second_graph_replayed_first"] = err(first(oB), eB)
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        for _ in range(200):
            with torch.cuda.stream(s1):
                g1.replay()
            with torch.cuda.stream(s2):
                g2.replay()
        torch.cuda.synchronize()
        res["cases"][f"{name}/graphs_concurrent_on_two_streams"] = max(err(first(oA), eA), err(first(oB), eB))
        for o in (oA, oB):
            first(o).fill_(float("nan"))
        for _ in range(200):
            with torch.cuda.stream(s1):
                fn(A, oA)
            with torch.cuda.stream(s2):
                fn(B, oB)
        torch.cuda.synchronize()
        res["cases"][f"{name}/eager_concurrent_on_two_streams"] = max(err(first(oA), eA), err(first(oB), eB))
        first(oA).fill_(float("nan"))
        for _ in range(50):
            fn(A, oA)
        torch.cuda.synchronize()
        res["cases"][f"{name}/eager_default_stream_after"] = err(first(oA), eA)
    res["ok"] = all(e < 1e-4 for e in res["cases"].values())
    print(json.dumps(res, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
