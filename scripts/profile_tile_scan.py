#!/usr/bin/env python
"""Where GAE's device time goes at the middle and large shapes, and whether prefetching the next tile helps.

Times, with triton.testing.do_bench (median, L2 flushed), against the same bytes:
  * ``flat``      : a 1-D streaming kernel that reads GAE's inputs and writes two outputs (no scan, ideal
                    coalescing): the floor for these bytes at this size, launch and ramp included;
  * ``tile_copy`` : GAE's own ``[T, BLOCK_N]`` tile and loads, with the scan left out (advantages = delta);
  * ``current``   : ``kernels.compute_gae(..., out=)`` with the plan in force;
  * ``persist``   : a prototype where each program walks several env blocks and loads block i+1 before it
                    scans block i (the loads are carried through the loop), for (BLOCK_N, warps, programs
                    per SM) variants; ``pipelined`` is the same loop left to Triton's software pipeliner
                    (``tl.range(num_stages=)``) without the hand-carried prefetch.
  * ``seg``       : the segment plan's prototype for GAE (warps along time segments, steps inside the
                    threads), which kernels/_triton_kernels.py now implements for all seven estimators.
Each prototype is checked against the float64 reference before it is timed. ``flat``, ``current`` and the
three fastest ``seg`` variants are also timed with CUDA events after a read-only L2 eviction
(bench_kernels.time_clean_l2; the 2026-11-30 "-b" results used a 256 MB read, 4x L2 now).

``--driver`` launches each kernel once per shape for Nsight Compute (``ncu``); the device command is
  ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats -k regex:'^(gae|flat_copy|tile_copy)' python scripts/profile_tile_scan.py --driver

Usage: python scripts/profile_tile_scan.py --out tile-scan.json
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
from kernels._triton_kernels import (_combine, _combine_with_tail, _done, _flags_raw, _offs, _raw,  # noqa: E402
                                     _vnext, _vnext_raw)

GAMMA, LAM = 0.99, 0.95


@triton.jit
def flat_copy_kernel(R, V, TE, TR, ADV, RET, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    r = tl.load(R + offs, mask=m, other=0)
    v = tl.load(V + offs, mask=m, other=0)
    d = (tl.load(TE + offs, mask=m, other=0) != 0) | (tl.load(TR + offs, mask=m, other=0) != 0)
    a = tl.where(d, r, r - v)
    tl.store(ADV + offs, a, mask=m)
    tl.store(RET + offs, a + v, mask=m)


@triton.jit
def _gae_tile(R, V, TE, TR, BV, offs_t, offs_n, T, N, s_n, gamma, gl, CT: tl.constexpr):
    """delta, b, v of one [T_BLOCK, BLOCK_N] tile of contiguous [T, N] inputs (bootstrap_value form)."""
    mn = offs_n < N
    m = (offs_t < T)[:, None] & mn[None, :]
    boot = tl.load(BV + offs_n, mask=mn, other=0).to(CT)
    r = _raw(R, offs_t, offs_n, s_n, 1, m, False).to(CT)
    v = _raw(V, offs_t, offs_n, s_n, 1, m, False).to(CT)
    te_, tr_ = _flags_raw(TE, TR, offs_t, offs_n, s_n, 1, s_n, 1, m, True, False)
    term, done = _done(te_, tr_, True)
    vn = _vnext(_vnext_raw(V, V, offs_t, offs_n, T, s_n, 1, 0, 0, m, mn, False, False), boot, offs_t, T, False, CT)
    delta = tl.where(term, r, r + gamma * vn) - v
    b = gl * (1 - done.to(CT))
    return delta, b, v, m


@triton.jit
def tile_copy_kernel(R, V, TE, TR, BV, ADV, RET, T, N, s_n, gamma, gl,
                     CT: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_t = tl.arange(0, T_BLOCK)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    delta, b, v, m = _gae_tile(R, V, TE, TR, BV, offs_t, offs_n, T, N, s_n, gamma, gl, CT)
    tl.store(ADV + _offs(offs_t, offs_n, s_n, 1, False), delta * b, mask=m)
    tl.store(RET + _offs(offs_t, offs_n, s_n, 1, False), delta + v, mask=m)


@triton.jit
def gae_persist_kernel(R, V, TE, TR, BV, ADV, RET, T, N, s_n, gamma, gl,
                       CT: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, NPROG: tl.constexpr,
                       ITERS: tl.constexpr):
    offs_t = tl.arange(0, T_BLOCK)
    lanes = tl.arange(0, BLOCK_N)
    pid = tl.program_id(0)
    delta, b, v, m = _gae_tile(R, V, TE, TR, BV, offs_t, pid * BLOCK_N + lanes, T, N, s_n, gamma, gl, CT)
    for i in range(ITERS):
        tile = pid + i * NPROG
        # the next block's loads go out before this block's scan (beyond N they are fully masked)
        d2, b2, v2, m2 = _gae_tile(R, V, TE, TR, BV, offs_t, (tile + NPROG) * BLOCK_N + lanes, T, N, s_n,
                                   gamma, gl, CT)
        offs_n = tile * BLOCK_N + lanes
        A, B = tl.associative_scan((delta, b), 0, _combine, reverse=True)
        tl.store(ADV + _offs(offs_t, offs_n, s_n, 1, False), A, mask=m)
        tl.store(RET + _offs(offs_t, offs_n, s_n, 1, False), A + v, mask=m)
        delta, b, v, m = d2, b2, v2, m2


@triton.jit
def gae_pipelined_kernel(R, V, TE, TR, BV, ADV, RET, T, N, s_n, gamma, gl,
                         CT: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, NPROG: tl.constexpr,
                         ITERS: tl.constexpr, STAGES: tl.constexpr):
    offs_t = tl.arange(0, T_BLOCK)
    lanes = tl.arange(0, BLOCK_N)
    for i in tl.range(0, ITERS, num_stages=STAGES):
        tile = tl.program_id(0) + i * NPROG
        offs_n = tile * BLOCK_N + lanes
        delta, b, v, m = _gae_tile(R, V, TE, TR, BV, offs_t, offs_n, T, N, s_n, gamma, gl, CT)
        A, B = tl.associative_scan((delta, b), 0, _combine, reverse=True)
        tl.store(ADV + _offs(offs_t, offs_n, s_n, 1, False), A, mask=m)
        tl.store(RET + _offs(offs_t, offs_n, s_n, 1, False), A + v, mask=m)


@triton.jit
def gae_seg_kernel(R, V, TE, TR, BV, ADV, RET, T, N, s_n, gamma, gl,
                   CT: tl.constexpr, W: tl.constexpr, L: tl.constexpr, BLOCK_N: tl.constexpr,
                   N_CHUNKS: tl.constexpr):
    # Warp w owns the L consecutive rows t0 + w*L + j of a chunk, one environment per lane: every row
    # is one [W, BLOCK_N] tensor, so walking j is sequential inside the thread (no shuffles, no shared
    # memory). Pass 1 composes each segment's map; one scan across the W segments (the tail pair gives
    # the map of the segments after w) links them; pass 2 walks the segment again from registers.
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    wi = tl.arange(0, W)
    boot = tl.load(BV + offs_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * (W * L)
        rs = ()
        vs = ()
        tes = ()
        trs = ()
        for j in tl.static_range(L):
            offs_t = t0 + wi * L + j
            m = (offs_t < T)[:, None] & mn[None, :]
            rs = rs + (_raw(R, offs_t, offs_n, s_n, 1, m, False).to(CT),)
            vs = vs + (_raw(V, offs_t, offs_n, s_n, 1, m, False).to(CT),)
            tes = tes + ((_raw(TE, offs_t, offs_n, s_n, 1, m, False) != 0),)
            trs = trs + ((_raw(TR, offs_t, offs_n, s_n, 1, m, False) != 0),)
        offs_a = t0 + wi * L + L
        vn = _raw(V, offs_a, offs_n, s_n, 1, (offs_a < T)[:, None] & mn[None, :], False).to(CT)
        ca = tl.zeros([W, BLOCK_N], CT)
        cb = tl.full([W, BLOCK_N], 1, CT)
        ds = ()
        bs = ()
        for j in tl.static_range(L - 1, -1, -1):
            offs_t = t0 + wi * L + j
            vn = tl.where((offs_t == T - 1)[:, None], boot[None, :], vn)
            d = tl.where(tes[j], rs[j], rs[j] + gamma * vn) - vs[j]
            b = tl.where(tes[j] | trs[j], 0.0, gl)
            ca = d + b * ca
            cb = b * cb
            ds = (d,) + ds
            bs = (b,) + bs
            vn = vs[j]
        _a, _b, ta, tb = tl.associative_scan((ca, cb, tl.zeros_like(ca), tl.full(ca.shape, 1, CT)), 0,
                                             _combine_with_tail, reverse=True)
        y = ta + tb * carry[None, :]
        for j in tl.static_range(L - 1, -1, -1):
            offs_t = t0 + wi * L + j
            m = (offs_t < T)[:, None] & mn[None, :]
            y = ds[j] + bs[j] * y
            tl.store(ADV + _offs(offs_t, offs_n, s_n, 1, False), y, mask=m)
            tl.store(RET + _offs(offs_t, offs_n, s_n, 1, False), y + vs[j], mask=m)
        if N_CHUNKS > 1:
            carry = tl.sum(tl.where((wi == 0)[:, None], y, 0.0), axis=0)


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4


def launchers(d, out, with_persist=False):
    """name -> (launch, checked against the reference)."""
    r, v, te, tr, bv = d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"]
    T, N = r.shape
    tb = O._next_pow2(T)
    g, gl = GAMMA, GAMMA * LAM
    sms = _sms()
    fns = {}
    fns["flat"] = (lambda: flat_copy_kernel[(triton.cdiv(T * N, 4096),)](r, v, te, tr, out[0], out[1], T * N,
                                                                          BLOCK=4096, num_warps=8), False)
    cur_tb, cur_bn, cur_nw, cur_seg, _split, _preload, _maxnreg = O._tile(T, N, r.is_cuda, O.K.gae_kernel)
    tile_plan = cur_seg == 0 and cur_tb >= T and not _split  # the tile copy mirrors the single-tile scan's layout
    bn_tc = cur_bn if tile_plan else 16
    nw_tc = cur_nw if tile_plan else (8 if tb * 16 >= 2048 else 4)
    fns[f"tile_copy_bn{bn_tc}_w{nw_tc}"] = (
        lambda: tile_copy_kernel[(triton.cdiv(N, bn_tc),)](r, v, te, tr, bv, out[0], out[1], T, N, N, g, gl,
                                                           CT=tl.float32, T_BLOCK=tb, BLOCK_N=bn_tc,
                                                           num_warps=nw_tc), False)
    fns["current"] = (lambda: K.compute_gae(r, v, te, tr, gamma=GAMMA, lambda_=LAM, bootstrap_value=bv, out=out),
                      True)
    for W, L, bn in SEG_VARIANTS:
        if W * L > max(16, tb) or (W * L < T and W * L < 64):
            continue
        fns[f"seg_w{W}_l{L}_bn{bn}"] = (
            lambda W=W, L=L, bn=bn: gae_seg_kernel[(triton.cdiv(N, bn),)](
                r, v, te, tr, bv, out[0], out[1], T, N, N, g, gl, CT=tl.float32, W=W, L=L, BLOCK_N=bn,
                N_CHUNKS=triton.cdiv(T, W * L), num_warps=W), True)
    if not with_persist:
        return fns
    for bn, nw in ((16, 8), (16, 4), (32, 8), (8, 4)):
        if tb * bn > 8192:
            continue
        n_tiles = triton.cdiv(N, bn)
        for per_sm in (2, 4, 8):
            nprog = min(n_tiles, sms * per_sm)
            if nprog == n_tiles and per_sm > 2:
                continue
            fns[f"persist_bn{bn}_w{nw}_p{per_sm}"] = (
                lambda bn=bn, nw=nw, nprog=nprog, n_tiles=n_tiles: gae_persist_kernel[(nprog,)](
                    r, v, te, tr, bv, out[0], out[1], T, N, N, g, gl, CT=tl.float32, T_BLOCK=tb,
                    BLOCK_N=bn, NPROG=nprog, ITERS=triton.cdiv(n_tiles, nprog), num_warps=nw), True)
        for stages in (2, 3):
            nprog = min(n_tiles, sms * 4)
            fns[f"pipelined_bn{bn}_w{nw}_p4_s{stages}"] = (
                lambda bn=bn, nw=nw, nprog=nprog, n_tiles=n_tiles, stages=stages: gae_pipelined_kernel[(nprog,)](
                    r, v, te, tr, bv, out[0], out[1], T, N, N, g, gl, CT=tl.float32, T_BLOCK=tb,
                    BLOCK_N=bn, NPROG=nprog, ITERS=triton.cdiv(n_tiles, nprog), STAGES=stages, num_warps=nw), True)
    return fns


def make(N, T, dev):
    import bench_kernels as B
    return B.make_inputs(N, T, dev)


def reference(d):
    from kernels import reference as RF
    dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
    return RF.gae(dd["rewards"], dd["values"], dd["terminated"], dd["truncated"], gamma=GAMMA, lambda_=LAM,
                  bootstrap_value=dd["bootstrap_value"])


SEG_VARIANTS = [(W, L, bn) for bn in (32, 64) for (W, L) in
                ((8, 16), (4, 32), (16, 8), (4, 16), (8, 8), (2, 16), (4, 8), (8, 4), (1, 32), (1, 16), (2, 8),
                 (4, 4))]
SHAPES = [(16384, 128), (4096, 128), (65536, 128), (16384, 32), (32768, 16)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--driver", action="store_true", help="launch each kernel once per shape (for ncu)")
    ap.add_argument("--shapes", default=None, help="e.g. 16384x128,4096x128")
    ap.add_argument("--persist", action="store_true", help="also the persistent and pipelined prototypes")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shapes = SHAPES if args.shapes is None else [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    res = dict(gpu=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", torch=torch.__version__,
               triton=triton.__version__, rows=[])
    import bench_kernels as B
    if dev.type == "cuda" and not args.driver:
        res["copy_bw"] = B.measure_copy_bw()
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
    for N, T in shapes:
        d = make(N, T, dev)
        out = (torch.empty(T, N, device=dev), torch.empty(T, N, device=dev))
        fns = launchers(d, out, args.persist)
        if args.driver:
            for name, (fn, _) in fns.items():
                fn()
            torch.cuda.synchronize()
            continue
        ref = reference(d)
        byts = N * T * (4 + 4 + 1 + 1 + 4 + 4) + N * 4
        row = dict(N=N, T=T, bytes=byts, plan=O._tile(T, N, dev.type == "cuda", O.K.gae_kernel), us={}, err={})
        if "copy_bw" in res:
            row["roofline_us"] = byts / res["copy_bw"] * 1e6
        for name, (fn, check) in fns.items():
            try:
                fn()
                if check:
                    err = max((out[0].double() - ref[0]).abs().max().item(),
                              (out[1].double() - ref[1]).abs().max().item())
                    row["err"][name] = err
                    if not err < 1e-3:
                        print(f"{N}x{T} {name}: WRONG (max err {err:.2e})", flush=True)
                        continue
                if dev.type == "cuda":
                    row["us"][name] = 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100)
            except Exception as e:  # a variant that fails to compile is reported, not fatal
                print(f"{N}x{T} {name}: {e!r}"[:300], flush=True)
                row["err"][name] = repr(e)[:300]
        if dev.type == "cuda":
            seg = sorted((us, name) for name, us in row["us"].items() if name.startswith("seg"))[:3]
            for name in ["flat", "current"] + [name for _, name in seg]:
                row.setdefault("us_read_flush", {})[name] = B.time_clean_l2(fns[name][0], 60, l2)
            for name, us in row["us_read_flush"].items():
                print(f"{N}x{T} read-flush {name:28s} {us:7.2f} us", flush=True)
        roof = row.get("roofline_us")
        for name, us in sorted(row["us"].items(), key=lambda kv: kv[1]):
            print(f"{N}x{T} {name:28s} {us:7.2f} us" + (f"  ({us / roof:.2f}x roofline)" if roof else ""),
                  flush=True)
        res["rows"].append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
