#!/usr/bin/env python
"""A/B on a CUDA GPU: GAE as a two-pass chunked scan against the kernel in kernels/ (a negative result).

The prototype below gives each warp-row of a [W, BLOCK_N] tile one chunk of TC consecutive time steps,
one environment (or vector of them) per thread, and walks the chunk inside the thread twice: pass 1
composes the chunk's affine map (row w composes chunk w+1, so a scan over rows gives the value that
follows each chunk), a reverse scan across the W rows links the chunks, and pass 2 walks each chunk
again from its end, writing advantages and returns (its loads hit L1/L2). Each variant is checked against
the float64 reference and timed with triton.testing.do_bench (median, L2 flushed).

On the H200 (2026-11-30) its best variant took 21 us at 16384x128 against 25.7 us for the kernels' plan,
and it was slower at 65536x128 and 4096x128, so it was not adopted (docs/benchmarks-history.md).

Usage: python scripts/ab_gae_two_pass.py --out gae-two-pass.json
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'scripts'))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels._triton_kernels import (_combine, _done, _flags_raw, _offs, _raw, _scalar, _vnext,  # noqa: E402
                                     _vnext_raw)


@triton.jit
def _gae_ab(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn, m,
            s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, gl,
            HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG).to(CT)
    v = _raw(V, offs_t, offs_n, s_v_t, s_v_n, m, BIG).to(CT)
    te_, tr_ = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    term, done = _done(te_, tr_, HAS_TR)
    vn = _vnext(_vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG), boot, offs_t,
                T, HAS_NV, CT)
    delta = tl.where(term, r, r + gamma * vn) - v
    b = gl * (1 - done.to(CT))
    return delta, b, v


@triton.jit
def gae2_kernel(R, V, TE, TR, BV, NV, ADV, RET, T, N,
                s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                s_a_t, s_a_n, s_o_t, s_o_n,
                g_hi, g_lo, gl_hi, gl_lo,
                HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                W: tl.constexpr, TC: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    gl = _scalar(gl_hi, gl_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    wi = tl.arange(0, W)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * (W * TC)
        # pass 1: row w composes chunk w+1 (rows t0+(w+1)*TC ...), so the scan over rows gives
        # y after chunk w directly; row W-1 (outside the tile) is the identity
        ca = tl.zeros([W, BLOCK_N], CT)
        cb = tl.full([W, BLOCK_N], 1, CT)
        for j in tl.static_range(TC):
            offs_t = t0 + (wi + 1) * TC + (TC - 1 - j)
            m = ((offs_t < T) & (wi + 1 < W))[:, None] & mn[None, :]
            a, b, _v = _gae_ab(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn, m,
                               s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                               gamma, gl, HAS_TR, HAS_NV, CT, BIG)
            a = tl.where(m, a, 0.0)
            b = tl.where(m, b, 1.0)
            ca = a + b * ca
            cb = b * cb
        ya, yb = tl.associative_scan((ca, cb), 0, _combine, reverse=True)
        y = ya + yb * carry[None, :]
        # pass 2: walk each chunk from its end with the y that follows it
        for j in tl.static_range(TC):
            offs_t = t0 + wi * TC + (TC - 1 - j)
            m = (offs_t < T)[:, None] & mn[None, :]
            a, b, v = _gae_ab(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn, m,
                              s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                              gamma, gl, HAS_TR, HAS_NV, CT, BIG)
            y = a + b * y
            tl.store(ADV + _offs(offs_t, offs_n, s_a_t, s_a_n, BIG), y, mask=m)
            tl.store(RET + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y + v, mask=m)
        if N_CHUNKS > 1:
            carry = tl.sum(tl.where((wi == 0)[:, None], y, 0.0), axis=0)


def launch2(d, out, W, TC, BN, nw):
    r, v, te, tr, bv = d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"]
    T, N = r.shape
    g, gl = O._split(0.99), O._split(0.99 * 0.95)
    nch = (T + W * TC - 1) // (W * TC)
    gae2_kernel[((N + BN - 1) // BN,)](r, v, te, tr, bv, r, out[0], out[1], T, N,
        r.stride(0), 1, v.stride(0), 1, te.stride(0), 1, tr.stride(0), 1, 1, 0, 0, out[0].stride(0), 1,
        out[1].stride(0), 1, *g, *gl, HAS_TR=True, HAS_NV=False, CT=tl.float32, BIG=False,
        W=W, TC=TC, BLOCK_N=BN, N_CHUNKS=nch, num_warps=nw)


VARIANTS = [(W, TC, BN, nw) for (W, BN, nw) in ((16, 32, 4), (32, 16, 4), (8, 64, 4), (32, 32, 8), (16, 64, 8), (8, 32, 2), (16, 16, 2), (64, 16, 8))
            for TC in (4, 8, 16)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    import bench_kernels as B
    from kernels import reference as RF
    dev = torch.device('cuda')
    bw = B.measure_copy_bw()
    res = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__, copy_bw=bw, rows=[])
    shapes = [(16384, 128), (65536, 128), (4096, 128), (16384, 32)]
    for N, T in shapes:
        d = B.make_inputs(N, T, dev)
        ref = RF.gae(*(d[k].double() if d[k].is_floating_point() else d[k] for k in ("rewards", "values", "terminated", "truncated")),
                     gamma=0.99, lambda_=0.95, bootstrap_value=d["bootstrap_value"].double())
        out = (torch.empty(T, N, device=dev), torch.empty(T, N, device=dev))
        byts = N * T * (4 + 4 + 1 + 1 + 4 + 4) + N * 4
        roof = byts / bw * 1e6
        cur = 1e3 * triton.testing.do_bench(lambda: K.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.99, lambda_=0.95, bootstrap_value=d["bootstrap_value"], out=out), warmup=25, rep=200)
        row = dict(N=N, T=T, roofline_us=roof, current_us=cur, current_plan=O._tile(T, N, True, O.K.gae_kernel), variants=[])
        print(f"{N}x{T} roof {roof:.1f} current {cur:.1f} us ({cur/roof:.2f}x) plan {row['current_plan']}", flush=True)
        for W, TC, BN, nw in VARIANTS:
            if W * TC > T:
                continue
            try:
                launch2(d, out, W, TC, BN, nw)
                err = max((out[0].double() - ref[0]).abs().max().item(), (out[1].double() - ref[1]).abs().max().item())
                t = 1e3 * triton.testing.do_bench(lambda: launch2(d, out, W, TC, BN, nw), warmup=25, rep=100)
            except Exception as e:
                print("fail", W, TC, BN, nw, repr(e)[:200]); continue
            row["variants"].append(dict(W=W, TC=TC, BN=BN, nw=nw, us=t, err=err))
            print(f"   W{W} TC{TC} BN{BN} nw{nw}: {t:7.1f} us ({t/roof:.2f}x)  err {err:.1e}", flush=True)
        res["rows"].append(row)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)

if __name__ == "__main__":
    main()
