#!/usr/bin/env python
"""Does loading chunk i+1 while chunk i is solved speed up the chunked tile scan? (GAE, CUDA only)

The production plans for 32768+ environments walk the horizon in chunks of 4 rows, one warp per 32
environments (kernels/_triton_kernels.py, _solve with SEG_L = 0): every chunk's loads are issued only after
the previous chunk has been solved and stored, so each warp waits one memory latency per chunk. This
script copies that loop for GAE (contiguous float32 inputs, bool flags, the bootstrap_value form) in two
versions, PREFETCH = False (the production order) and True (the raw loads of chunk i+1 are issued before
chunk i is solved and carried into the next iteration), checks both against the float64 reference, and
times them (CUDA events after an L2 eviction, bench_kernels.time_clean_l2) next to the production kernel
with the same plan forced and a copy of the same bytes. Writes JSON.

Usage: python scripts/probe_prefetch.py --out prefetch.json [--cases "65536x128:4x32x1,8x32x1"]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as KK  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels import reference as RF  # noqa: E402
from kernels._triton_kernels import _combine  # noqa: E402


@triton.jit
def _raw(R, V, TE, TR, offs_t, offs_n, T, mn, s_t):
    m = (offs_t < T)[:, None] & mn[None, :]
    m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
    o = offs_t[:, None] * s_t + offs_n[None, :]
    return (tl.load(R + o, mask=m, other=0), tl.load(V + o, mask=m, other=0), tl.load(V + o + s_t, mask=m1, other=0),
            tl.load(TE + o, mask=m, other=0), tl.load(TR + o, mask=m, other=0))


@triton.jit
def gae_chunks_probe(R, V, TE, TR, BV, ADV, RET, T, N, s_t, gamma, gl,
                     T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, PREFETCH: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    boot = tl.load(BV + offs_n, mask=mn, other=0)
    carry = tl.zeros([BLOCK_N], tl.float32)
    ar = tl.arange(0, T_BLOCK)
    nxt = _raw(R, V, TE, TR, (N_CHUNKS - 1) * T_BLOCK + ar, offs_n, T, mn, s_t)
    for i in range(N_CHUNKS):
        offs_t = (N_CHUNKS - 1 - i) * T_BLOCK + ar
        if PREFETCH:
            cur = nxt
            nxt = _raw(R, V, TE, TR, offs_t - T_BLOCK, offs_n, T, mn, s_t)  # masked off below t = 0
        else:
            cur = _raw(R, V, TE, TR, offs_t, offs_n, T, mn, s_t)
        r, v, vn, te, tr = cur
        term = te != 0
        done = term | (tr != 0)
        vn = tl.where((offs_t == T - 1)[:, None], boot[None, :], vn)
        a = tl.where(term, r, r + gamma * vn) - v
        b = gl * (1 - done.to(tl.float32))
        A, Bc = tl.associative_scan((a, b), 0, _combine, reverse=True)
        y = A + Bc * carry[None, :]
        m = (offs_t < T)[:, None] & mn[None, :]
        o = offs_t[:, None] * s_t + offs_n[None, :]
        tl.store(ADV + o, y, mask=m)
        tl.store(RET + o, y + v, mask=m)
        carry = tl.sum(tl.where((ar == 0)[:, None], y, 0.0), axis=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="65536x128:4x32x1,8x32x1,16x32x1;16384x128:4x32x1,8x32x1")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    res = B.run_info(timer="CUDA events after a read of 4x L2, median (bench_kernels.time_clean_l2)", shapes={})
    for case in args.cases.split(";"):
        shape, plans = case.split(":")
        N, T = (int(v) for v in shape.split("x"))
        d = B.make_inputs(N, T, dev, seed=7)
        dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
        exp = RF.gae(dd["rewards"], dd["values"], dd["terminated"], dd["truncated"], gamma=B.GAMMA, lambda_=B.LAM,
                     bootstrap_value=dd["bootstrap_value"])
        adv, ret = torch.empty(T, N, device=dev), torch.empty(T, N, device=dev)

        def err():
            torch.cuda.synchronize()
            return max((adv.double() - exp[0]).abs().max().item(), (ret.double() - exp[1]).abs().max().item())

        out = dict(copy_same_bytes_us=B.copy_same_bytes_us(B.BYTES["gae"] * N * T, args.reps, l2), plans={})
        for p in plans.split(","):
            tb, bn, nw = (int(v) for v in p.split("x"))
            r = dict(plan=[tb, bn, nw])
            O.config["force"] = (tb, bn, nw)
            O.clear_plans()
            prod = lambda: KK.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"],  # noqa: E731
                                          gamma=B.GAMMA, lambda_=B.LAM, bootstrap_value=d["bootstrap_value"],
                                          out=(adv, ret))
            prod()
            r["production_max_err"] = err()
            r["production_us"] = B.time_clean_l2(prod, args.reps, l2)
            O.config["force"] = None
            O.clear_plans()
            for pf in (False, True):
                def launch(pf=pf):
                    gae_chunks_probe[(triton.cdiv(N, bn),)](
                        d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"], adv, ret,
                        T, N, N, B.GAMMA, B.GAMMA * B.LAM, T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=triton.cdiv(T, tb),
                        PREFETCH=pf, num_warps=nw)
                adv.zero_()
                launch()
                name = "prefetch" if pf else "in_order"
                r[name + "_max_err"] = err()
                r[name + "_us"] = B.time_clean_l2(launch, args.reps, l2)
            O.config["force"] = (tb, bn, nw)  # the production kernel once more: the drift across this plan's timings
            O.clear_plans()
            prod()
            r["production_again_us"] = B.time_clean_l2(prod, args.reps, l2)
            O.config["force"] = None
            O.clear_plans()
            print(shape, json.dumps(r), flush=True)
            out["plans"][p] = r
        res["shapes"][shape] = out
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
