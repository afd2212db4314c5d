#!/usr/bin/env python
"""Where the segment and split plans' time goes: per-phase GPU timestamps of GAE (CUDA only).

A copy of the segment path of ``gae_kernel`` (kernels/_triton_kernels.py; contiguous float32 inputs, bool
flags, the bootstrap_value form), one program per (32 environments, T_BLOCK rows) tile as in the split plan,
that reads %globaltimer at the phase boundaries of every program:

  0 start, 1 tile and epoch read, 2 pass 1 done (chunk loaded, segments composed and scanned),
  3 chunk map published, 4 predecessors' flags seen, 5 carry composed from their maps, 6 pass 2 done
  (outputs computed; their stores may still be in flight).

Each timestamp takes an input that depends on the phase's result, so that it cannot be issued before the
phase completes. MODE varies what links the chunks, to price each part of the design:

  0  the real thing: publish, wait, compose (checked against the float64 reference);
  1  publish, but do not wait for the predecessors (wrong results; prices the waiting);
  2  no publishing or waiting, carry 0 (wrong results; the pure load-solve-store cost; with one chunk,
     T_BLOCK = T, this is the segment plan without the split).

PRELOAD issues the loads of all SEG_L rows of a segment before any arithmetic and builds the advantage chain
inline (the TD-error form the GAE kernel used when this probe was written); without it the probe takes the
production GAE's row loads and terms (_gae_load, _gae_terms: the returns chain of the bootstrap_value form).
The chunks are linked through a workspace laid out as production's (kernels._triton_ops._new_links).

Every variant is timed without timestamps (CUDA events after an L2 eviction, as in
bench_kernels.time_clean_l2) next to the production kernel (kernels.compute_gae with the same plan forced)
and a copy of the same bytes; the STAMPED variants are then run 20 times with timestamps. Writes JSON.

Usage: python scripts/probe_split_phases.py --out phases.json [--cases "512x2048:256x32x16x16;16384x128:128x32x16x8"]
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
from kernels._triton_kernels import (_combine, _flag_stride, _gae_emit, _gae_emit_returns, _gae_load,  # noqa: E402
                                     _gae_terms, _program_tile, _row, _seg_scan, _visit_order)

N_PHASES = 7


@triton.jit
def _now(dep):
    # %globaltimer (ns); `dep` only orders the read after whatever produced it
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dep], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _put(TS, tile, phase, t, offs, BLOCK_N: tl.constexpr):
    tl.store(TS + (tile * 7 + phase) * BLOCK_N + offs, t + tl.zeros([BLOCK_N], tl.int64))


@triton.jit
def _stamp(TS, tile, phase, dep, offs, BLOCK_N: tl.constexpr, INSTR: tl.constexpr):
    if INSTR:
        _put(TS, tile, phase, _now(dep), offs, BLOCK_N)


@triton.jit
def gae_split_probe(R, V, TE, TR, BV, ADV, RET, LINK_I, LINK_F, TS, T, N, s_t, gamma, gl,
                    T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                    SPLIT: tl.constexpr, MODE: tl.constexpr, INSTR: tl.constexpr,
                    PRELOAD: tl.constexpr):
    ar = tl.arange(0, BLOCK_N)
    t_start = tl.program_id(0).to(tl.int64)
    if INSTR:
        t_start = _now(tl.program_id(0))
    eb, c, epoch = _program_tile(LINK_I, N, BLOCK_N, N_CHUNKS, SPLIT, True)
    tile = eb * N_CHUNKS + c
    if INSTR:
        _put(TS, tile, 0, t_start, ar, BLOCK_N)
    _stamp(TS, tile, 1, epoch.to(tl.int32), ar, BLOCK_N, INSTR)
    offs_n = eb * BLOCK_N + ar
    mn = offs_n < N
    boot = tl.load(BV + offs_n, mask=mn, other=0)
    args = (R, V, TE, TR, V, boot, offs_n, T, mn, s_t, 1, s_t, 1, s_t, 1, s_t, 1, 0, 0, gamma, gl)
    t0 = c * T_BLOCK
    wi = _visit_order(T_BLOCK // SEG_L, True)  # segments in the recurrence's order, as in _seg_chunk
    ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], tl.float32)
    cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, tl.float32)
    As = ()
    Bs = ()
    Ks = ()
    if PRELOAD:
        raws = ()
        for j in tl.static_range(SEG_L - 1, -1, -1):
            offs_t = t0 + wi * SEG_L + j
            m = (offs_t < T)[:, None] & mn[None, :]
            m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
            o = offs_t[:, None] * s_t + offs_n[None, :]
            raws = ((tl.load(R + o, mask=m, other=0), tl.load(V + o, mask=m, other=0),
                     tl.load(V + o + s_t, mask=m1, other=0), tl.load(TE + o, mask=m, other=0),
                     tl.load(TR + o, mask=m, other=0)),) + raws
        for j in tl.static_range(SEG_L - 1, -1, -1):
            offs_t = t0 + wi * SEG_L + j
            r, v, vn, te, tr = raws[j]
            term = te != 0
            done = term | (tr != 0)
            vn = tl.where((offs_t == T - 1)[:, None], boot[None, :], vn)
            a = tl.where(term, r, r + gamma * vn) - v
            b = gl * (1 - done.to(tl.float32))
            ca = a + b * ca
            cb = b * cb
            As = (a,) + As
            Bs = (b,) + Bs
            Ks = (v,) + Ks
    else:
        for j in tl.static_range(SEG_L - 1, -1, -1):
            offs_t = t0 + wi * SEG_L + j
            a, b, keep = _gae_terms(args, _gae_load(args, offs_t, False, True, False, None), offs_t, tl.float32, True,
                                    False, None)
            ca = a + b * ca
            cb = b * cb
            As = (a,) + As
            Bs = (b,) + Bs
            Ks = (keep,) + Ks
    A, B, TA, TB = _seg_scan(ca, cb, False)
    A0 = _row(A, wi, 0)
    B0 = _row(B, wi, 0)
    _stamp(TS, tile, 2, A0.to(tl.int32, bitcast=True), ar, BLOCK_N, INSTR)
    carry = tl.zeros([BLOCK_N], tl.float32)
    if MODE <= 1:
        tl.store(LINK_F + c * N + offs_n, A0, mask=mn)
        tl.store(LINK_F + (N_CHUNKS + c) * N + offs_n, B0, mask=mn)
        tl.debug_barrier()
        flags = LINK_I + eb * _flag_stride(N_CHUNKS)
        old = tl.atomic_xchg(flags + c, epoch, sem="release", scope="gpu")
        _stamp(TS, tile, 3, old.to(tl.int32), ar, BLOCK_N, INSTR)
        k = _visit_order(SPLIT, True)
        before = (k > c) & (k < N_CHUNKS)
        seen = tl.load(flags + k, mask=before, other=0, volatile=True)
        if MODE == 0:
            while tl.min(tl.where(before, seen, epoch)) < epoch:
                seen = tl.load(flags + k, mask=before, other=0, volatile=True)
        _stamp(TS, tile, 4, tl.min(seen).to(tl.int32), ar, BLOCK_N, INSTR)
        tl.atomic_add(flags + k, 0, mask=before, sem="acquire", scope="gpu")
        tl.debug_barrier()
        m = before[:, None] & mn[None, :]
        a = tl.load(LINK_F + k[:, None] * N + offs_n[None, :], mask=m, other=0, cache_modifier=".cg")
        b = tl.load(LINK_F + (N_CHUNKS + k[:, None]) * N + offs_n[None, :], mask=m, other=1, cache_modifier=".cg")
        A_all, B_all = tl.associative_scan((a, b), 0, _combine)
        carry = _row(A_all, k, 0) + _row(B_all, k, 0) * carry
    _stamp(TS, tile, 5, carry.to(tl.int32, bitcast=True), ar, BLOCK_N, INSTR)
    y = TA + TB * carry[None, :]
    outs = (ADV, RET, s_t, 1, s_t, 1, offs_n)
    for j in tl.static_range(SEG_L - 1, -1, -1):
        offs_t = t0 + wi * SEG_L + j
        y_next = y
        y = As[j] + Bs[j] * y
        if PRELOAD:  # the advantage chain built above
            _gae_emit(outs, False, offs_t, (offs_t < T)[:, None] & mn[None, :], y, y_next, Ks[j])
        else:  # production's _gae_terms: the returns chain of the bootstrap_value form
            _gae_emit_returns(outs, False, offs_t, (offs_t < T)[:, None] & mn[None, :], y, y_next, Ks[j])
    _stamp(TS, tile, 6, _row(y, wi, 0).to(tl.int32, bitcast=True), ar, BLOCK_N, INSTR)


def probe_shape(N, T, plans, reps, l2, dev):
    d = B.make_inputs(N, T, dev, seed=5)
    dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
    exp = RF.gae(dd["rewards"], dd["values"], dd["terminated"], dd["truncated"], gamma=B.GAMMA, lambda_=B.LAM,
                 bootstrap_value=dd["bootstrap_value"])
    out = dict(copy_same_bytes_us=B.copy_same_bytes_us(B.BYTES["gae"] * N * T, reps, l2), plans={})
    adv, ret = torch.empty(T, N, device=dev), torch.empty(T, N, device=dev)

    def err():
        torch.cuda.synchronize()
        return max((adv.double() - exp[0]).abs().max().item(), (ret.double() - exp[1]).abs().max().item())

    for tb, bn, nw, seg_l in plans:
        n_chunks = T // tb
        tiles = triton.cdiv(N, bn) * n_chunks
        split = triton.next_power_of_2(n_chunks)
        r = dict(plan=[tb, bn, nw, seg_l], programs=tiles)
        O.config["force"] = (tb, bn, nw, seg_l, n_chunks > 1)
        O.clear_plans()
        prod = lambda: KK.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"],  # noqa: E731
                                      gamma=B.GAMMA, lambda_=B.LAM, bootstrap_value=d["bootstrap_value"],
                                      out=(adv, ret))
        prod()
        r["production_max_err"] = err()
        r["production_us"] = B.time_clean_l2(prod, reps, l2)
        O.config["force"] = None
        O.clear_plans()
        ts = torch.zeros(tiles * N_PHASES * bn, dtype=torch.int64, device=dev)

        def launch(mode, instr, preload, link):
            gae_split_probe[(tiles,)](d["rewards"], d["values"], d["terminated"], d["truncated"],
                                      d["bootstrap_value"], adv, ret, link[0], link[1], ts, T, N, N,
                                      B.GAMMA, B.GAMMA * B.LAM, T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=n_chunks,
                                      SEG_L=seg_l, SPLIT=split, MODE=mode, INSTR=instr, PRELOAD=preload,
                                      num_warps=nw)

        for mode, preload in VARIANTS:
            name = f"mode{mode}" + ("_preload" if preload else "")
            link = (torch.zeros(triton.cdiv(N, bn) * ((n_chunks + 15) // 16 * 16), dtype=torch.int64,
                                device=dev),  # production's layout (kernels._triton_ops._new_links)
                    torch.zeros(2 * n_chunks * N, dtype=torch.float32, device=dev))
            launch(mode, False, preload, link)
            if mode == 0:
                r[name + "_max_err"] = err()
            r[name + "_us"] = B.time_clean_l2(lambda: launch(mode, False, preload, link), reps, l2)
            if mode == 0:
                launch(mode, False, preload, link)
                r[name + "_max_err_after"] = err()
            if (mode, preload) in STAMPED:
                stamps = []
                for _ in range(20):
                    B.time_clean_l2(lambda: None, 1, l2)  # evict L2 before the stamped launch
                    launch(mode, True, preload, link)
                    torch.cuda.synchronize()
                    t = ts.view(tiles, N_PHASES, bn).max(dim=2).values.double()  # last lane of each phase
                    stamps.append(t - t[:, 0].min())
                st = torch.stack(stamps)  # [runs, tiles, phases], ns from the first program's start
                if mode >= 2:
                    st = st[:, :, [0, 1, 2, 5, 6]]  # phases 3 and 4 do not exist without the link
                per_phase_end = st.max(dim=1).values.median(dim=0).values  # last tile to reach each phase
                per_phase_med = st.median(dim=1).values.median(dim=0).values
                durations = (st[:, :, 1:] - st[:, :, :-1]).median(dim=1).values.median(dim=0).values
                r[name + "_phases"] = dict(
                    last_tile_reaches_us=[round(x / 1e3, 3) for x in per_phase_end.tolist()],
                    median_tile_reaches_us=[round(x / 1e3, 3) for x in per_phase_med.tolist()],
                    median_phase_duration_us=[round(x / 1e3, 3) for x in durations.tolist()])
        print(f"{N}x{T}", json.dumps(r), flush=True)
        out["plans"]["x".join(map(str, r["plan"]))] = r
    return out


# (MODE, PRELOAD) variants timed, and those also run with timestamps
VARIANTS = [(0, False), (1, False), (2, False), (0, True), (2, True)]
STAMPED = [(0, False), (2, False), (0, True)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="512x2048:256x32x16x16,128x32x16x8,64x32x8x8;"
                                       "16384x128:128x32x16x8,64x32x8x8")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    res = B.run_info(timer="CUDA events after a read of 4x L2, median (bench_kernels.time_clean_l2)", shapes={})
    for case in args.cases.split(";"):
        shape, plans = case.split(":")
        N, T = (int(v) for v in shape.split("x"))
        plans = [tuple(int(v) for v in p.split("x")) for p in plans.split(",")]
        res["shapes"][shape] = probe_shape(N, T, plans, args.reps, l2, dev)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
