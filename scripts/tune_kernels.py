#!/usr/bin/env python
"""Tile-shape sweep for the kernels on a CUDA GPU (input to kernels._triton_ops._tile).

For every estimator and benchmark shape, times each plan candidate (T_BLOCK, BLOCK_N, num_warps[, SEG_L[, SPLIT[,
PRELOAD[, MAXNREG]]]], the fields of kernels._triton_ops._tile)
with CUDA events around one call after L2 is evicted by a read (median, preallocated outputs; earlier
sweeps in benchmarks/results/ used triton.testing.do_bench) and checks it against the
float64 reference on the first call (Triton's JIT launch) and on a repeated call (the cached
direct launch). Candidates are compiled first in parallel worker processes (shared on-disk
Triton cache). Also records the default plan and its full-call time (CUDA events around the
Python call). Writes JSON to --out.

Usage: python scripts/tune_kernels.py --out sweep.json [--jobs 16] [--only gae,vtrace]
       python scripts/tune_kernels.py --out sweep.json --shapes 512x2048 --cands "256,32,32,8,1;512,32,32,16,1"
           (explicit candidates T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]] instead of a family;
           SPLIT as 0/1, PRELOAD as 0/1/2, MAXNREG a register cap per thread)
       python scripts/tune_kernels.py --summarize sweep.json   (markdown table of a finished sweep; no GPU)
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402


def candidates(N, T, family="tile"):
    """(T_BLOCK, BLOCK_N, num_warps[, SEG_L[, SPLIT]]) candidates.

    "split": every chunk of T_BLOCK rows its own program (kernels._triton_kernels._lookback), solved as
    segments of 4, 8 or 16 rows (up to 16 warps) or as a tile scan of 16 or 32 environments, against the
    best plans of the "seg" family without the split.
    "seg": the segment plan, (warps * SEG_L, 32, warps, SEG_L) with chunks of 64 rows or the whole horizon,
    against the two tile plans it replaced (the single tile, and the in-thread chunks from 32768 envs).
    "tile": the whole horizon in one tile, BLOCK_N <= 128 (time spread over threads and warps).
    "inthread": BLOCK_N a multiple of 32 * num_warps, so Triton's default layout keeps the time axis of
    a tile inside each thread (the scan needs no shuffles or shared memory), and a short T_BLOCK walked in
    chunks with a carry; at most 64 elements of a tile per thread (register pressure).
    """
    tp = 1 << (T - 1).bit_length()
    if family == "split":
        out = []
        for tb in (32, 64, 128, 256):
            if tb >= tp:
                continue
            for l in (4, 8, 16):
                if 1 <= tb // l <= 16:
                    out.append((tb, 32, tb // l, l, True))
            out += [(tb, 16, 4, 0, True), (tb, 32, 4 if tb <= 64 else 8, 0, True)]
        return out + [(64, 32, 8, 8), (128, 32, 16, 8)]
    if family == "seg":
        out = []
        for l in (4, 8, 16, 32):
            for w in (1, 2, 4, 8, 16):
                if w * l <= max(16, tp) and w * l >= min(tp, 64):
                    out.append((w * l, 32, w, l))
        bn = 32 if N >= 32768 else 16
        out.append((tp, bn, 8 if tp * bn >= 2048 else 4, 0))
        if N >= 32768 and T >= 64:
            out += [(4, 32, 1, 0), (8, 32, 1, 0)]
        return out
    if family == "inthread":
        out = []
        for nw in (1, 2, 4, 8):
            for mult in (1, 2, 4):
                bn = 32 * nw * mult
                for tb in (4, 8, 16, 32):
                    if tb <= tp and tb * mult <= 64 and (N + bn - 1) // bn >= 16:
                        out.append((tb, bn, nw))
        return out
    out = []
    if tp <= 256:
        for bn in (8, 16, 32, 64, 128):
            for nw in ((2, 4) if tp * bn <= 1024 else (4, 8)):
                if tp * bn <= 16384 and (N + bn - 1) // bn >= 32:
                    out.append((tp, bn, nw))
    else:
        for tb, bn in ((2048, 8), (2048, 4), (1024, 8), (512, 8), (256, 8), (1024, 16)):
            for nw in (4, 8):
                if tb <= tp:
                    out.append((tb, bn, nw))
    return out


def _compile_worker(job):
    import kernels as K
    from kernels import _triton_ops as O
    (N, T), names, cands = job
    dev = torch.device("cuda")
    d = B.make_inputs(N, T, dev, seed=0)
    fast = B.fast_calls(K)
    for c in cands:
        O.config["force"] = c
        O.clear_plans()
        for name in names:
            try:
                o = fast[name](d)
                fast[name](d, out=tuple(o) if isinstance(o, tuple) else o)
            except Exception:  # noqa: BLE001  (reported by the main process)
                pass
    torch.cuda.synchronize()
    return len(cands)


def rel_err(got, exp):
    got = got if isinstance(got, tuple) else (got,)
    exp = exp if isinstance(exp, tuple) else (exp,)
    return max(((g.double() - e).abs() / (1 + e.abs())).max().item() for g, e in zip(got, exp))


def summarize(path):
    """Markdown: per estimator and shape, the default plan against the best candidate and the roofline."""
    with open(path) as f:
        res = json.load(f)
    lines = [f"Sweep on {res['gpu']} (torch {res['torch']}, triton {res['triton']}"
             + (f", {res['date']}" if "date" in res else "") + f"); copy bandwidth "
             f"{res['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s. Device time = " + res.get("timer", "`do_bench` median") + ", outputs "
             "preallocated; full call = CUDA events around the Python call (plan in force during the sweep).", "",
             "| estimator | N x T | plan (T_BLOCK, BLOCK_N, warps, SEG_L, SPLIT, PRELOAD, MAXNREG) | device (us) | best candidate | best (us) "
             "| best / roofline | full call (us) |", "|---|---|---|---|---|---|---|---|"]
    for key, df in res["default"].items():
        rs = [v for k, v in res["results"].items() if k.startswith(key + "/") and v["ok"]]
        best = min(rs, key=lambda v: v["us"])
        lines.append(f"| {key.split('/')[0]} | {key.split('/')[1]} | {tuple(df['plan'])} | {df['us']:.1f} | "
                     f"{tuple(best['cfg']) if best['cfg'] else 'plan'} | {best['us']:.1f} | {best['roof']:.2f} | "
                     f"{df['full_call_us']:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--only", default=None)
    ap.add_argument("--family", default="tile", choices=("tile", "inthread", "seg", "split"))
    ap.add_argument("--cands", default=None, help='explicit candidates "T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]];..." (SPLIT: 0/1, PRELOAD: 0/1/2; '
                         'MAXNREG: registers per thread, 0 = the compiler\'s choice)')
    ap.add_argument("--shapes", default=None, help="comma-separated NxT, e.g. 16384x128,65536x128")
    ap.add_argument("--summarize", default=None, help="print the markdown summary of a sweep JSON and exit")
    args = ap.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
        return
    if not args.out:
        ap.error("--out is required for a sweep")
    import triton
    import triton.testing
    import kernels as K
    from kernels import _triton_ops as O
    from kernels import reference as R

    names = args.only.split(",") if args.only else list(B.BYTES)
    shapes = B.SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.cands:
        explicit = [tuple(bool(int(v)) if i == 4 else int(v) for i, v in enumerate(c.split(",")))
                    for c in args.cands.split(";")]
        family_cands = lambda N, T: explicit  # noqa: E731
    else:
        family_cands = lambda N, T: candidates(N, T, args.family)  # noqa: E731
    t0 = time.time()
    jobs = []
    by_t = {}  # compiled variants depend on T (and N's divisibility), so one job list per T
    for (N, T) in shapes:
        jobs.append(((N, T), names, [None]))  # the default plan
        n0, cs = by_t.get(T, (N, []))
        by_t[T] = (min(n0, N), cs + [c for c in family_cands(N, T) if c not in cs])
    for T, (N, cands) in by_t.items():
        jobs += [((N, T), names, cands[i:i + 3]) for i in range(0, len(cands), 3)]
    import multiprocessing as mp
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as ex:
        list(ex.map(_compile_worker, jobs))
    print(f"precompiled {sum(len(j[2]) for j in jobs)} candidate sets in {time.time() - t0:.0f}s", flush=True)

    dev = torch.device("cuda")
    bw = B.measure_copy_bw()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
    res = dict(timer="CUDA events around one call after a read of 4x L2 (scripts/bench_kernels.time_clean_l2)",
               family=args.cands or args.family, gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
               python=platform.python_version(),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               copy_bandwidth_bytes_per_s=bw, results={}, default={}, errors=[])
    fast, refs = B.fast_calls(K), B.ref_calls(R)
    for (N, T) in shapes:
        d = B.make_inputs(N, T, dev, seed=1)
        exp = {name: refs[name](d) for name in names}
        for c in [None] + family_cands(N, T):
            O.config["force"] = c
            O.clear_plans()
            for name in names:
                key = f"{name}/{N}x{T}/{c}"
                try:
                    e1 = rel_err(fast[name](d), exp[name])           # JIT launch (compiles / disk cache)
                    o = fast[name](d)                                  # cached direct launch
                    e2 = rel_err(o, exp[name])
                    outs = tuple(o) if isinstance(o, tuple) else o
                    us = B.time_clean_l2(lambda: fast[name](d, out=outs), 60, l2)
                    e3 = rel_err(outs, exp[name])  # after the timed calls (a split plan's epochs moved on)
                    roof = B.BYTES[name] * N * T / bw * 1e6
                    r = dict(N=N, T=T, cfg=c, us=us, roof=us / roof, err_jit=e1, err_fast=e2, err_after=e3,
                             ok=max(e1, e2, e3) < 1e-4)
                    if c is None:
                        r["plan"] = B.plan_of(name, N, T)
                        ev, wall = B.time_full_call(fast[name], [d], 200)
                        r.update(full_call_us=ev, full_wall_us=wall,
                                 host_us=B.time_host_only(fast[name], d, 400),
                                 full_call_out_us=B.time_full_call(lambda dd: fast[name](dd, out=outs), [d], 200)[0])
                        res["default"][f"{name}/{N}x{T}"] = r
                    res["results"][key] = r
                    if not r["ok"]:
                        print("WRONG", key, e1, e2, flush=True)
                except Exception as ex:  # noqa: BLE001
                    res["errors"].append(dict(key=key, error=repr(ex)[:300]))
                    print("ERROR", key, repr(ex)[:200], flush=True)
        # best per estimator at this shape
        for name in names:
            rs = [v for k, v in res["results"].items() if k.startswith(f"{name}/{N}x{T}/") and v["ok"]]
            if rs:
                b = min(rs, key=lambda v: v["us"])
                df = res["default"].get(f"{name}/{N}x{T}", {})
                print(f"{name:20s} {N}x{T}: best {b['cfg']} {b['us']:.1f}us ({b['roof']:.2f}x roof); default "
                      f"{df.get('plan')} {df.get('us', float('nan')):.1f}us full {df.get('full_call_us', float('nan')):.1f}"
                      f" out= {df.get('full_call_out_us', float('nan')):.1f} host {df.get('host_us', float('nan')):.1f}",
                      flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f)
    O.config["force"] = None
    print(f"done in {time.time() - t0:.0f}s; {len(res['errors'])} errors")


if __name__ == "__main__":
    main()
