#!/usr/bin/env python
"""Prototype for few environments and long horizons (512x2048): GAE with the time axis split over programs.

Today a program owns BLOCK_N environments and all T rows, so 512x2048 gets 128 programs that each scan a
[2048, 4] tile (27.5 us device time on the H200 against a 4.6 us roofline and an 8.8 us
copy of the same bytes; benchmarks/results/kernels-nvidia-h200.json). Here the grid is
(env blocks, P time chunks of TC rows), two launches:

  1. ``gae_chunk_maps_kernel``: each program composes its chunk's affine map (A_c, B_c) (the advantage at
     the chunk's first row given 0 after it, and the product of b over the chunk) into a [P, N] scratch;
  2. ``gae_chunk_solve_kernel``: each program composes the maps of the chunks after its own to get the
     advantage just after its chunk, then solves its chunk with the library's chunk solver (``_solve``,
     tile scan or segments), as an independent problem whose bootstrap is the values row after the chunk.

Both passes read the inputs, so the bytes are about 1.6x GAE's (28 instead of 18 per element). Prediction
for 512x2048 before any measurement: 10-13 us device time for the two launches together (about 29 MB at
4.1 TB/s is 7 us, plus two launch ramps), against 27.5 us. Graph-safe (no flags or counters between
programs); the price is a second launch, about 4.6 us of host time on the H200 machine.

Measured on the H200 (2026-11-30, benchmarks/results/time-split-nvidia-h200-2026-11-30.json), against
the library's single-launch split plan (kernels/_triton_kernels._lookback), then planned with 64-row chunks
(``current``): 23.7-38.6 us at 512x2048 against 25.6 us, and 21.9-79 us at 1024x1024 and 2048x512 against
15.8-17.2 us. The prediction above was wrong by about 2x; the library keeps the single launch, with the
rule's larger chunks (19.4 us for GAE at 512x2048 in benchmarks/results/kernels-nvidia-h200.json).

Every variant is checked against the float64 reference first; on a GPU the two launches are timed
together with CUDA events after a read-only L2 eviction (bench_kernels.time_clean_l2), beside
kernels.compute_gae in the same run. On a CPU (TRITON_INTERPRET=1) only the checks run, on small shapes.

Usage: python scripts/proto_time_split.py --out time-split.json          (GPU: 512x2048, 1024x1024, 2048x512)
       TRITON_INTERPRET=1 python scripts/proto_time_split.py --check   (CPU)
"""
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

import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels._triton_kernels import _combine, _gae_emit, _gae_load, _gae_terms, _row, _scalar, _solve  # noqa: E402

GAMMA, LAM = 0.99, 0.95


@triton.jit
def _chunk_args(R, V, TE, TR, BV, c, T, N, s_t, TC: tl.constexpr, BLOCK_N: tl.constexpr, CT: tl.constexpr):
    """GAE's terms arguments for chunk c of contiguous [T, N] inputs, as a problem of its own: rows from
    c*TC, its bootstrap the values row after the chunk (bootstrap_value after the last chunk)."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    t0 = c * TC
    Tc = tl.minimum(T - t0, TC)
    if t0 + TC < T:
        boot = tl.load(V + (t0 + TC) * s_t + offs_n, mask=mn, other=0).to(CT)
    else:
        boot = tl.load(BV + offs_n, mask=mn, other=0).to(CT)
    base = t0 * s_t
    return (R + base, V + base, TE + base, TR + base, V, boot, offs_n, Tc, mn, s_t, 1, s_t, 1, s_t, 1, s_t, 1,
            0, 0), offs_n, mn, Tc, base


@triton.jit
def gae_chunk_maps_kernel(R, V, TE, TR, BV, AGG, T, N, s_t, g_hi, g_lo, gl_hi, gl_lo,
                          CT: tl.constexpr, TC: tl.constexpr, BLOCK_N: tl.constexpr, N_SPLIT: tl.constexpr):
    c = tl.program_id(1)
    args, offs_n, mn, Tc, base = _chunk_args(R, V, TE, TR, BV, c, T, N, s_t, TC, BLOCK_N, CT)
    args = args + (_scalar(g_hi, g_lo, CT), _scalar(gl_hi, gl_lo, CT))
    offs_t = tl.arange(0, TC)
    a, b, _v = _gae_terms(args, _gae_load(args, offs_t, False, True, False, None), offs_t, CT, True, False, None)
    b = tl.where((offs_t < Tc)[:, None], b, 1.0)  # rows past the end: the identity map
    A, B = tl.associative_scan((a, b), 0, _combine, reverse=True)
    tl.store(AGG + c * N + offs_n, _row(A, offs_t, 0), mask=mn)
    tl.store(AGG + (N_SPLIT + c) * N + offs_n, _row(B, offs_t, 0), mask=mn)


@triton.jit
def gae_chunk_solve_kernel(R, V, TE, TR, BV, AGG, ADV, RET, T, N, s_t, g_hi, g_lo, gl_hi, gl_lo,
                           CT: tl.constexpr, TC: tl.constexpr, BLOCK_N: tl.constexpr, T_BLOCK: tl.constexpr,
                           SEG_L: tl.constexpr, N_SPLIT: tl.constexpr):
    c = tl.program_id(1)
    args, offs_n, mn, Tc, base = _chunk_args(R, V, TE, TR, BV, c, T, N, s_t, TC, BLOCK_N, CT)
    args = args + (_scalar(g_hi, g_lo, CT), _scalar(gl_hi, gl_lo, CT))
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_SPLIT - 1):  # the advantage just after chunk c: the maps of chunks N_SPLIT-1 .. c+1
        k = N_SPLIT - 1 - i
        later = mn & (k > c)
        carry = tl.where(later, tl.load(AGG + k * N + offs_n, mask=later, other=0) +
                         tl.load(AGG + (N_SPLIT + k) * N + offs_n, mask=later, other=0) * carry, carry)
    _solve(_gae_load, _gae_terms, _gae_emit, args, (ADV + base, RET + base, s_t, 1, s_t, 1, offs_n), carry, Tc, mn,
           CT, False, True, False, None, T_BLOCK, TC // T_BLOCK, SEG_L, True, False, 0, 0, (), False, False)


def launch(d, out, agg, TC, BN, T_BLOCK, SEG_L, nw):
    r, v, te, tr, bv = d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"]
    T, N = r.shape
    g, gl = O._split(GAMMA), O._split(GAMMA * LAM)
    grid = (triton.cdiv(N, BN), triton.cdiv(T, TC))
    gae_chunk_maps_kernel[grid](r, v, te, tr, bv, agg, T, N, N, *g, *gl, CT=tl.float32, TC=TC, BLOCK_N=BN,
                                N_SPLIT=grid[1], num_warps=4 if TC * BN <= 2048 else 8)
    gae_chunk_solve_kernel[grid](r, v, te, tr, bv, agg, out[0], out[1], T, N, N, *g, *gl, CT=tl.float32, TC=TC,
                                 BLOCK_N=BN, T_BLOCK=T_BLOCK, SEG_L=SEG_L, N_SPLIT=grid[1], num_warps=nw)


def variants(T, cpu):
    """(TC, BLOCK_N, T_BLOCK, SEG_L, num_warps)."""
    if cpu:
        return [(8, 4, 8, 0, 1), (8, 4, 8, 2, 4), (4, 8, 4, 1, 4), (16, 4, 8, 4, 2)]
    out = []
    for tc in (64, 128, 256):
        if tc > T:
            continue
        out += [(tc, 16, tc, 0, 4), (tc, 32, tc, 0, 8)]  # tile scan over the chunk
        out += [(tc, 32, min(tc, 128), 8, min(tc, 128) // 8)]  # segments of 8 rows, up to 16 warps
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true", help="correctness only, small shapes (CPU interpreter)")
    args = ap.parse_args()
    import bench_kernels as B
    from kernels import reference as RF
    cpu = not torch.cuda.is_available()
    dev = torch.device("cpu" if cpu else "cuda")
    shapes = [(5, 37), (13, 16), (1, 9)] if (cpu or args.check) else [(512, 2048), (1024, 1024), (2048, 512)]
    res = dict(gpu="cpu" if cpu else torch.cuda.get_device_name(), torch=torch.__version__,
               triton=triton.__version__, rows=[])
    if not cpu:
        res["copy_bw"] = B.measure_copy_bw()
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
    bad = 0
    for N, T in shapes:
        d = B.make_inputs(N, T, dev, seed=3)
        dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
        exp = RF.gae(dd["rewards"], dd["values"], dd["terminated"], dd["truncated"], gamma=GAMMA, lambda_=LAM,
                     bootstrap_value=dd["bootstrap_value"])
        out = (torch.empty(T, N, device=dev), torch.empty(T, N, device=dev))
        row = dict(N=N, T=T, us={}, err={})
        cur = lambda: K.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"],  # noqa: E731
                                    gamma=GAMMA, lambda_=LAM, bootstrap_value=d["bootstrap_value"], out=out,
                                    backend="triton")
        for v_ in [None] + variants(T, cpu):
            name = "current" if v_ is None else "split_tc{}_bn{}_tb{}_seg{}_w{}".format(*v_)
            if v_ is None:
                fn = cur
            else:
                agg = torch.empty(2 * triton.cdiv(T, v_[0]), N, device=dev)
                fn = lambda v_=v_, agg=agg: launch(d, out, agg, *v_)  # noqa: E731
            out[0].fill_(float("nan"))
            fn()
            err = max((out[0].double() - exp[0]).abs().max().item(), (out[1].double() - exp[1]).abs().max().item())
            row["err"][name] = err
            if not err < 1e-4:
                bad += 1
                print(f"{N}x{T} {name}: WRONG (max err {err:.2e})", flush=True)
                continue
            if not cpu:
                row["us"][name] = B.time_clean_l2(fn, 100, l2)
                print(f"{N}x{T} {name:34s} {row['us'][name]:7.2f} us", flush=True)
        res["rows"].append(row)
    print(f"{'all correct' if not bad else f'{bad} WRONG'}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
