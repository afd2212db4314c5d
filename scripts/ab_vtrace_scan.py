#!/usr/bin/env python
"""A/B of V-trace's scan on a CUDA GPU: the kernel in kernels/ against the one it replaced.

The replaced kernel (kept below as the baseline) built the coefficients of row t+1 on row t, loading
and computing every row's terms twice, to get vs[t+1] for the policy-gradient advantage. The current
one scans a second pair that yields the exclusive scan (see docs/kernels.md). Both run through the same
launch path under the tile plans in force at the time (the segment plan came later); each is checked against the float64 reference, then timed with
triton.testing.do_bench (median, L2 flushed, preallocated outputs) at the benchmark shapes.

Usage: python scripts/ab_vtrace_scan.py --out benchmarks/results/vtrace-tail-scan-<gpu>.json
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

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels import reference as RF  # noqa: E402
from kernels._triton_kernels import (_combine, _done, _flags_raw, _offs, _raw, _row, _scalar, _vnext,  # noqa: E402
                                     _vnext_raw)


@triton.jit
def _vtrace_terms(R, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                  s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """Per-row V-trace quantities for rows offs_t (the library's helper as it was at the time)."""
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG).to(CT)
    v = _raw(V, offs_t, offs_n, s_v_t, s_v_n, m, BIG).to(CT)
    te_, tr_ = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    term, done = _done(te_, tr_, HAS_TR)
    vn = _vnext(_vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG), boot, offs_t,
                T, HAS_NV, CT)
    log_rho = (_raw(TGT, offs_t, offs_n, s_g_t, s_g_n, m, BIG).to(CT)
               - _raw(BEH, offs_t, offs_n, s_b_t, s_b_n, m, BIG).to(CT))
    rho = tl.exp(tl.minimum(log_rho, lrc))
    c = lam * tl.exp(tl.minimum(log_rho, lcc))
    delta = tl.where(term, r, r + gamma * vn) - v
    return r, v, term, done, vn, log_rho, rho * delta, tl.where(done, 0.0, gamma * c)


@triton.jit
def two_row_vtrace_kernel(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, T, N,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                  s_b_t, s_b_n, s_g_t, s_g_n, s_vs_t, s_vs_n, s_pg_t, s_pg_n,
                  g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi, lcc_lo, lpc_hi, lpc_lo,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                  T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    tl.static_assert(SEG_L == 0, "the baseline is a tile scan only")
    # Scan E[t] = vs[t+1] - values[t+1] (coefficients of row t+1 placed on row t), then
    # vs[t] - values[t] = a[t] + b[t]*E[t] and pg needs vs[t+1] = values[t+1] + E[t]:
    # both outputs in one pass without shifting registers.
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    lam = _scalar(l_hi, l_lo, CT)
    lrc = _scalar(lrc_hi, lrc_lo, CT)
    lcc = _scalar(lcc_hi, lcc_lo, CT)
    lpc = _scalar(lpc_hi, lpc_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        offs_t = t0 + tl.arange(0, T_BLOCK)
        m = (offs_t < T)[:, None] & mn[None, :]
        r, v, term, done, vn, log_rho, a, b = _vtrace_terms(
            R, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
            s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
            s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc, HAS_TR, HAS_NV, CT, BIG)
        _r1, v1, _t1, _d1, _vn1, _l1, a1, b1 = _vtrace_terms(
            R, V, TE, TR, NV, BEH, TGT, boot, offs_t + 1, offs_n, T, mn,
            s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
            s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc, HAS_TR, HAS_NV, CT, BIG)
        A, B = tl.associative_scan((a1, b1), 0, _combine, reverse=True)
        E = A + B * carry[None, :]
        vs = v + a + b * E
        last = (offs_t == T - 1)[:, None]
        w = tl.where(done | last, vn, v1 + E)
        pg = tl.exp(tl.minimum(log_rho, lpc)) * (tl.where(term, r, r + gamma * w) - v)
        tl.store(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), vs, mask=m)
        tl.store(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG), pg, mask=m)
        if N_CHUNKS > 1:
            carry = _row(E, offs_t, t0)


def tile_plan_of_the_run(T, N):
    """The tile plan in force when this A/B ran (kernels._triton_ops._tile before the segment plan)."""
    if N >= 32768 and T >= 64:
        return 4, 32, 1, 0
    bn = 32 if N >= 32768 else (16 if N >= 2048 else 4)
    bn = min(bn, max(4, O._next_pow2(N)))
    tb = min(O._next_pow2(T), max(16, 8192 // bn), 2048)
    return tb, bn, (8 if tb * bn >= 2048 else 4), 0


def use(spec):
    O._VTRACE = spec
    O._SPECS = tuple(spec if s.kernel in (CURRENT.kernel, BASELINE.kernel) else s for s in O._SPECS)


CURRENT = O._VTRACE
BASELINE = O._VTRACE._replace(kernel=two_row_vtrace_kernel, plans={}, scal={}, hot=O._VTRACE.hot.fresh())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    bw = B.measure_copy_bw()
    fast = B.fast_calls(K)["vtrace"]
    ref = B.ref_calls(RF)["vtrace"]
    res = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               copy_bw=bw, rows=[])
    for N, T in B.SHAPES:
        d = B.make_inputs(N, T, dev, seed=1)
        d["terminated"] = torch.rand(T, N, device=dev) < 0.05
        d["truncated"] = torch.rand(T, N, device=dev) < 0.05
        exp = ref(d)
        row = dict(N=N, T=T, roofline_us=B.BYTES["vtrace"] * N * T / bw * 1e6)
        O.config["force"] = tile_plan_of_the_run(T, N)
        for label, spec in (("two_row_loads", BASELINE), ("tail_scan", CURRENT)):
            use(spec)
            O.clear_plans()
            got = fast(d)
            err = max(((g.double() - e).abs() / (1 + e.abs())).max().item() for g, e in zip(got, exp))
            outs = tuple(fast(d))
            t = triton.testing.do_bench(lambda: fast(d, out=outs), warmup=25, rep=200, return_mode="median") * 1e3
            row[label] = dict(device_us=t, max_rel_err=err)
        use(CURRENT)
        O.config["force"] = None
        O.clear_plans()
        row["ratio"] = row["tail_scan"]["device_us"] / row["two_row_loads"]["device_us"]
        res["rows"].append(row)
        print(f"{N}x{T}: two-row {row['two_row_loads']['device_us']:.1f} us, tail scan {row['tail_scan']['device_us']:.1f} us "
              f"({row['ratio']:.2f}x), errors {row['two_row_loads']['max_rel_err']:.1e} / {row['tail_scan']['max_rel_err']:.1e}",
              flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
