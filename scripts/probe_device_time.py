#!/usr/bin/env python
"""How much of a kernel's measured time is the kernel, and what a kernel moving the same bytes can reach.

``scripts/bench_kernels.py`` times the device as CUDA events around one call after a read of 4x L2 (its
**device** column): the kernel with cold inputs, plus what one launch costs on the GPU between the two events
(the launch's own latency, the ramp-up and the drain of a lone grid). At 16384x128 a copy of the same bytes
timed that way takes 1.2-1.8x the roofline, so that measure cannot tell the kernel's own inefficiency from the
per-launch cost. Its **full call** is another measure again: back-to-back calls, per call, so a throughput. This
probe times every estimator, a copy moving the same bytes, and a streaming kernel with exactly the estimator's
inputs and outputs (same tensors and dtypes; every output element a sum of the inputs at its index, no scan),
three ways each:

* **events**: bench_kernels.time_clean_l2 (the benchmark's device time);
* **graph, cold**: K calls captured in one CUDA graph, each on its own input set and outputs, K chosen so that the
  K calls touch at least 4x L2, so that each call finds its inputs evicted by the others; per call = one replay /
  K, median over replays. Launches in a graph follow each other without the host, so this is the kernel time
  with cold inputs with most of the per-launch cost overlapped;
* **back to back**: the same K calls from Python in turn, bench_kernels.time_back_to_back (the benchmark's
  full-call timer) over K input sets instead of its 2x L2: what the full-call target measures. For the copy and
  the streaming kernel this includes their own host paths (one torch op; Triton's ordinary launcher, which took
  longer than the kernel on the H100 machines), so there they bound a full call of these bytes from above.

All against the roofline (bytes moved / copy bandwidth, as in bench_kernels). Writes JSON with --out.

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
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# per estimator: the make_inputs tensors it reads ([T, N]; bootstrap_value and initial, [N], are left out as in
# bench_kernels.BYTES) and how many [T, N] float32 outputs it writes
STREAM_IO = {"gae": (("rewards", "values", "terminated", "truncated"), 2),
             "vtrace": (("rewards", "values", "behaviour_log_probs", "target_log_probs", "terminated", "truncated"), 2),
             "lambda_returns": (("rewards", "values", "terminated", "truncated"), 1),
             "discounted_returns": (("rewards", "terminated", "truncated"), 1),
             "retrace": (("rewards", "q_values", "values", "behaviour_log_probs", "target_log_probs", "terminated",
                          "truncated"), 1),
             "eligibility_traces": (("rewards", "terminated", "truncated"), 1),
             "episodic_prefix_sum": (("rewards", "terminated", "truncated"), 1)}


@triton.jit
def _stream_kernel(X0, X1, X2, X3, X4, X5, X6, O0, O1, n, N_IN: tl.constexpr, N_OUT: tl.constexpr,
                   BLOCK: tl.constexpr):
    """O0[i] = sum of the first N_IN inputs at i (flags as 0/1), O1[i] = 2 * O0[i] (N_OUT 2): every input byte
    read once and every output byte written once, as by the estimators, without their scans."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    acc = tl.load(X0 + offs, mask=m, other=0).to(tl.float32)
    rest = (X1, X2, X3, X4, X5, X6)
    for j in tl.static_range(6):
        if j + 1 < N_IN:
            acc += tl.load(rest[j] + offs, mask=m, other=0).to(tl.float32)
    tl.store(O0 + offs, acc, mask=m)
    if N_OUT > 1:
        tl.store(O1 + offs, 2 * acc, mask=m)


def stream_call(name, d, block=2048):
    """(an argument-less launch of _stream_kernel with `name`'s inputs from the input set d, its first output)."""
    names, n_out = STREAM_IO[name]
    xs = [d[k] for k in names]
    xs += [xs[0]] * (7 - len(xs))  # never read (N_IN)
    outs = [torch.empty_like(d["rewards"]) for _ in range(n_out)]
    outs += [outs[0]] * (2 - n_out)
    n = d["rewards"].numel()
    grid = (triton.cdiv(n, block),)
    return (lambda: _stream_kernel[grid](*xs, *outs, n, N_IN=len(names), N_OUT=n_out, BLOCK=block, num_warps=8),
            outs[0])


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


def stream_check(name, d):
    """Largest |difference| between _stream_kernel's first output for input set d and the same sum in float64."""
    launch, out = stream_call(name, d)
    launch()
    want = sum(d[k].double() for k in STREAM_IO[name][0])
    return (out.double() - want).abs().max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16384x128,65536x128", help="NxT,... (default: the roofline target's)")
    ap.add_argument("--only", default=None, help="comma-separated estimator names")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--back-to-back-reps", type=int, default=1000, help="calls per back-to-back timing (batches of 50)")
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
                           "(>= 4x L2 touched) captured in one CUDA graph, median over replays; back_to_back: "
                           "bench_kernels.time_back_to_back over the same K calls; subjects: the estimator (no "
                           "prefix), copy_ (a copy of the same bytes), stream_ (_stream_kernel with the estimator's "
                           "inputs and outputs)", results={})
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
            streams = [stream_call(name, d)[0] for d in sets]
            r["stream_check_max_abs_err"] = stream_check(name, sets[0])
            cp = copies(nbytes, k, dev)
            for subject, cs in (("", calls), ("copy_", cp), ("stream_", streams)):
                r[f"{subject}events_us"] = B.time_clean_l2(cs[0], 100, l2)
                r[f"{subject}graph_cold_us"] = graph_cold_us(cs, args.replays)
                r[f"{subject}back_to_back_us"] = B.time_back_to_back(lambda c: c(), cs, args.back_to_back_reps)
            del calls, sets, outs, cp, streams
            torch.cuda.empty_cache()
            for m in [m for m in r if m.endswith(("events_us", "graph_cold_us", "back_to_back_us"))]:
                r[m.replace("_us", "_vs_roofline")] = r[m] / roof
            res["results"][f"{name}/{N}x{T}"] = r
            print(f"{name}/{N}x{T}: k {k}  roofline {roof:.2f} us  (us: kernel / copy / stream)  events "
                  + " / ".join(f"{r[p + 'events_us']:.2f}" for p in ("", "copy_", "stream_"))
                  + "  graph cold " + " / ".join(f"{r[p + 'graph_cold_us']:.2f}" for p in ("", "copy_", "stream_"))
                  + "  back to back " + " / ".join(f"{r[p + 'back_to_back_us']:.2f}" for p in ("", "copy_", "stream_")),
                  flush=True)
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
