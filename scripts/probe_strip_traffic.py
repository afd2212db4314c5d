#!/usr/bin/env python
"""Is the split plan at 512x2048 bound by its memory access pattern or by its scan? (GAE's traffic, CUDA only)

The split plan (kernels/_triton_ops._tile: T_BLOCK = 256 rows, BLOCK_N = 32 environments, 16 warps, segments of
SEG_L = 16 rows, one program per chunk) takes 18-20 us at 512x2048 for GAE, about twice a copy of the same bytes,
and every chunking in the split sweep landed near the same time. This probe keeps the plan's access pattern and
drops everything else: each program reads its chunk of rewards, values (and the next row's value), terminated
and truncated with the same [T_BLOCK // SEG_L, BLOCK_N] loads per step j of its segments, and writes two float32
outputs per element computed from the row alone (no scan, no link between chunks). If this takes about as long
as the GAE kernel, the access pattern is the limit and wider strips (BLOCK_N 64 or 128) or other chunkings are
the next thing to try; if it takes about as long as a copy, the scan and the link are. Variants: the plan's
own shape and wider or shorter ones. Timed with CUDA events after an L2 eviction (bench_kernels.time_clean_l2),
next to the production GAE call and a copy of the same bytes. Writes JSON.

Usage: python scripts/probe_strip_traffic.py --out strips.json [--shape 512x2048]
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
import kernels as K  # noqa: E402

# (T_BLOCK, BLOCK_N, SEG_L): the GAE split plan at 512x2048 first
VARIANTS = [(256, 32, 16), (256, 64, 16), (256, 128, 16), (128, 32, 16), (64, 32, 16), (256, 32, 8)]


@triton.jit
def strip_traffic(R, V, TE, TR, OUT_A, OUT_B, T, N, s_t,
                  T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, SEG_L: tl.constexpr):
    n_blocks = tl.cdiv(N, BLOCK_N)
    c = tl.program_id(0) // n_blocks
    offs_n = (tl.program_id(0) % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    wi = tl.arange(0, T_BLOCK // SEG_L)
    for j in tl.static_range(SEG_L):
        offs_t = c * T_BLOCK + wi * SEG_L + j
        m = (offs_t < T)[:, None] & mn[None, :]
        m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
        o = offs_t[:, None] * s_t + offs_n[None, :]
        r = tl.load(R + o, mask=m, other=0)
        v = tl.load(V + o, mask=m, other=0)
        v1 = tl.load(V + o + s_t, mask=m1, other=0)
        keep = (tl.load(TE + o, mask=m, other=0) == 0) & (tl.load(TR + o, mask=m, other=0) == 0)
        a = r + tl.where(keep, v1, 0.0) - v
        tl.store(OUT_A + o, a, mask=m)
        tl.store(OUT_B + o, a + v, mask=m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="512x2048")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    N, T = (int(v) for v in args.shape.split("x"))
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    d = B.make_inputs(N, T, dev, seed=3)
    r, v, te, tr = d["rewards"], d["values"], d["terminated"], d["truncated"]
    out_a, out_b = torch.empty_like(r), torch.empty_like(r)
    gae_out = (torch.empty_like(r), torch.empty_like(r))

    def probe(tb, bn, seg):
        grid = (triton.cdiv(N, bn) * triton.cdiv(T, tb),)
        return lambda: strip_traffic[grid](r, v, te, tr, out_a, out_b, T, N, N, T_BLOCK=tb, BLOCK_N=bn, SEG_L=seg,
                                           num_warps=tb // seg)

    gae = lambda: B.fast_calls(K)["gae"](d, out=gae_out)  # noqa: E731
    keep = (te == 0) & (tr == 0)
    v_next = torch.cat([v[1:], torch.zeros_like(v[:1])])
    want = r + torch.where(keep, v_next, torch.zeros_like(v)) - v
    fns = {"gae_kernel": gae}
    res = B.run_info(shape=args.shape, timer="CUDA events around one call after a read of 4x L2 "
                     "(bench_kernels.time_clean_l2), median per round, rounds interleaved", variants={})
    for tb, bn, seg in VARIANTS:
        fn = probe(tb, bn, seg)
        fn()
        torch.cuda.synchronize()
        ok = torch.allclose(out_a, want) and torch.allclose(out_b, want + v)
        res["variants"][f"{tb}x{bn}x{seg}"] = dict(T_BLOCK=tb, BLOCK_N=bn, SEG_L=seg, ok=ok, us=[])
        fns[f"{tb}x{bn}x{seg}"] = fn
    res["variants"]["gae_kernel"] = dict(us=[])
    res["variants"]["copy_same_bytes"] = dict(us=[])
    for _ in range(args.rounds):
        for name, fn in fns.items():
            res["variants"][name]["us"].append(B.time_clean_l2(fn, args.reps, l2))
        res["variants"]["copy_same_bytes"]["us"].append(B.copy_same_bytes_us(B.BYTES["gae"] * N * T, args.reps, l2))
    for name, v_ in res["variants"].items():
        v_["median_us"] = statistics.median(v_["us"])
        print(f"{name:18s} {v_['median_us']:7.2f} us  {'' if v_.get('ok', True) else 'WRONG'}", flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
