#!/usr/bin/env python
"""Does walking time backwards cost memory bandwidth? (CUDA only)

At 65536x128 discounted returns take 40-47 us with every plan tried, while eligibility traces, which move the
same 10 bytes per element (float32 in and out, two uint8 flags), take 27 us; the one structural difference is
the direction of the recurrence: the backward estimators visit their chunks from the last row to the first, so
every warp walks memory downwards. This probe runs both estimators' own load and coefficient code
(kernels._triton_kernels: _forward_load/_forward_terms and _discounted_load/_discounted_terms, through the
same _solve) in both directions, for the plans in question, so that direction and estimator are separated.
Runs in the "wrong" direction give meaningless numbers but move exactly the same bytes with the same
arithmetic. Timed with CUDA events after an L2 eviction (bench_kernels.time_clean_l2), rounds interleaved, next
to the production calls and a copy of the same bytes. Writes JSON.

Result on the H200 (benchmarks/results/direction-probe-nvidia-h200-2026-11-30.json, from this probe's first
version on the kernels of 3220494, before _solve took PRELOAD): backwards,
the forward estimator's 8-row chunk walk took 46.1 us instead of 25.6 us at 65536x128, but one 128-row segment
chunk only 28.2 instead of 26.8 us. The cost came with the reverse scan of every chunk (Triton lowered it with
warp shuffles, scripts/sass_shuffles.py), not with the direction of the memory walk; the kernels have since
held rows in the recurrence's order and scan forwards (kernels._triton_kernels._visit_order), so this probe
now runs both directions without that cost.

Usage: python scripts/probe_direction.py --out direction.json [--shapes 65536x128,16384x128] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as KP  # noqa: E402
from kernels import _triton_kernels as K  # noqa: E402

# (T_BLOCK, BLOCK_N, num_warps, SEG_L); _solve double-buffers the tile scan's chunks of at most 256 elements
PLANS = [(8, 32, 1, 0), (4, 32, 1, 0), (64, 32, 8, 8), (128, 32, 16, 8)]


@triton.jit
def direction_probe(X, TE, TR, BV, OUT, T, N, s_t, f, KIND: tl.constexpr, REVERSE: tl.constexpr,
                    T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    link = (0, 0, 0, 0, offs_n, mn, N)  # no split: never read
    outs = (OUT, s_t, 1, offs_n)
    zero = tl.zeros([BLOCK_N], tl.float32)
    if KIND == 0:
        args = (X, TE, TR, offs_n, T, mn, s_t, 1, s_t, 1, s_t, 1, f)
        K._solve(K._forward_load, K._forward_terms, K._emit_y, args, outs, zero, T, mn, tl.float32, False, True,
                 None, None, T_BLOCK, N_CHUNKS, SEG_L, REVERSE, False, 0, 0, link, 0, False, None)
    else:
        boot = tl.load(BV + offs_n, mask=mn, other=0)
        args = (X, TE, TR, X, boot, offs_n, T, mn, s_t, 1, s_t, 1, s_t, 1, s_t, 1, f)
        K._solve(K._discounted_load, K._discounted_terms, K._emit_y, args, outs, zero, T, mn, tl.float32, False,
                 True, True, False, T_BLOCK, N_CHUNKS, SEG_L, REVERSE, False, 0, 0, link, 0, False, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="65536x128,16384x128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    res = B.run_info(timer="CUDA events around one call after a read of 4x L2 (bench_kernels.time_clean_l2), "
                           "median per round, rounds interleaved", plans=PLANS, shapes={})
    fast = B.fast_calls(KP)
    for shape in args.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        d = B.make_inputs(N, T, dev, seed=0)
        out = torch.empty(T, N, device=dev)
        x, te, tr, bv = d["rewards"], d["terminated"], d["truncated"], d["bootstrap_value"]
        calls = {}
        for kind, kname in ((0, "forward"), (1, "discounted")):
            for reverse in (False, True):
                for tb, bn, nw, seg_l in PLANS:
                    key = f"{kname}/{'down' if reverse else 'up'}/{tb}x{bn}x{nw}x{seg_l}"

                    def call(kind=kind, reverse=reverse, tb=tb, bn=bn, nw=nw, seg_l=seg_l):
                        direction_probe[(triton.cdiv(N, bn),)](
                            x, te, tr, bv, out, T, N, x.stride(0), 0.99, KIND=kind, REVERSE=reverse, T_BLOCK=tb,
                            BLOCK_N=bn, N_CHUNKS=triton.cdiv(T, tb), SEG_L=seg_l, num_warps=nw)
                    calls[key] = call
        for name in ("eligibility_traces", "discounted_returns"):
            o = fast[name](d)
            calls["production/" + name] = lambda name=name, o=o: fast[name](d, out=o)
        a, b = torch.empty(N * T * 10 // 8, device=dev), torch.empty(N * T * 10 // 8, device=dev)
        calls["copy_same_bytes"] = lambda: b.copy_(a)
        for fn in calls.values():
            fn()
        torch.cuda.synchronize()
        times = {k: [] for k in calls}
        for r in range(args.rounds):
            keys = list(calls) if r % 2 == 0 else list(reversed(calls))
            for k in keys:
                times[k].append(B.time_clean_l2(calls[k], args.reps, l2))
        res["shapes"][shape] = {k: dict(us=v, median_us=statistics.median(v)) for k, v in times.items()}
        for k, v in res["shapes"][shape].items():
            print(f"{shape} {k:40s} {v['median_us']:7.1f} us", flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
