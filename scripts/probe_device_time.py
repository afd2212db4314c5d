#!/usr/bin/env python
"""How much of a kernel's measured device time is the kernel, at the shapes of the roofline target.

``scripts/bench_kernels.py`` times the device as CUDA events around one call after a read of 4x L2 (its
**device** column): the kernel with cold inputs, plus what one launch costs on the GPU between the two events
(the launch's own latency, the ramp-up and the drain of a lone grid). At 16384x128 a copy of the same bytes
timed that way takes 1.2-1.8x the roofline, so that measure cannot tell the kernel's own inefficiency from the
per-launch cost. This probe times, for every estimator and for a copy moving the same bytes:

* **events**: bench_kernels.time_clean_l2 (the benchmark's device time);
* **graph, cold**: K calls captured in one CUDA graph, each on its own input set and outputs, K chosen so that the
  K calls touch at least 4x L2, so that each call finds its inputs evicted by the others; per call = one replay /
  K, median over replays. Launches in a graph follow each other without the host, so this is the kernel time
  with cold inputs with most of the per-launch cost overlapped.

Both against the roofline (bytes moved / copy bandwidth, as in bench_kernels). Writes JSON with --out.

Usage: python scripts/probe_device_time.py [--shapes 16384x128,65536x128] [--only gae,vtrace] --out F
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402


def graph_cold_us(calls, replays):
    """Per-call time of the argument-less `calls`, captured in order into one CUDA graph; median over replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm outside the capture
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    xs = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) * 1e3 / len(calls))
    return statistics.median(xs)


def copies(nbytes, k, dev):
    """k argument-less copies, each moving nbytes in all (half read, half written), on buffers of their own."""
    n = max(1, nbytes // 8)
    pairs = [(torch.ones(n, device=dev), torch.empty(n, device=dev)) for _ in range(k)]
    return [lambda a=a, b=b: b.copy_(a) for a, b in pairs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16384x128,65536x128", help="NxT,... (default: the roofline target's)")
    ap.add_argument("--only", default=None, help="comma-separated estimator names")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("probe_device_time.py needs a CUDA GPU")
    dev = torch.device("cuda")
    l2 = B.l2_bytes()
    bw = B.measure_copy_bw()
    fast = B.fast_calls(K)
    names = list(fast) if not args.only else args.only.split(",")
    res = B.run_info(copy_bandwidth_bytes_per_s=bw, l2_bytes=l2, replays=args.replays,
                     timer="events: bench_kernels.time_clean_l2; graph_cold: per call of K calls on K input sets "
                           "(>= 4x L2 touched) captured in one CUDA graph, median over replays", results={})
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        for name in names:
            nbytes = B.BYTES[name] * N * T
            k = max(2, math.ceil(4 * l2 / nbytes))
            sets = [B.make_inputs(N, T, dev, seed=100 + i) for i in range(k)]
            outs = []
            for d in sets:
                o = fast[name](d)
                outs.append(tuple(o) if isinstance(o, tuple) else o)
            calls = [lambda d=d, o=o, f=fast[name]: f(d, out=o) for d, o in zip(sets, outs)]
            roof = nbytes / bw * 1e6
            r = dict(N=N, T=T, bytes=nbytes, k=k, roofline_us=roof)
            r["events_us"] = B.time_clean_l2(calls[0], 100, l2)
            r["graph_cold_us"] = graph_cold_us(calls, args.replays)
            del calls, sets, outs
            cp = copies(nbytes, k, dev)
            r["copy_events_us"] = B.time_clean_l2(cp[0], 100, l2)
            r["copy_graph_cold_us"] = graph_cold_us(cp, args.replays)
            del cp
            torch.cuda.empty_cache()
            for m in ("events_us", "graph_cold_us", "copy_events_us", "copy_graph_cold_us"):
                r[m.replace("_us", "_vs_roofline")] = r[m] / roof
            res["results"][f"{name}/{N}x{T}"] = r
            print(f"{name}/{N}x{T}: k {k}  events {r['events_us']:.2f} us ({r['events_vs_roofline']:.2f}x roof)  "
                  f"graph cold {r['graph_cold_us']:.2f} us ({r['graph_cold_vs_roofline']:.2f}x)  copy events "
                  f"{r['copy_events_vs_roofline']:.2f}x  copy graph cold {r['copy_graph_cold_vs_roofline']:.2f}x",
                  flush=True)
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
