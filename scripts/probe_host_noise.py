#!/usr/bin/env python
"""Probe of host-time noise in scripts/bench_kernels.py's flow (CUDA GPU; prints to stdout).

Times GAE and discounted returns at 4096x16 with out= in three phases of one process: fresh, after the
benchmark's correctness phase (every estimator at every shape, float32 and some float64), and after
gc.freeze(). Per phase: host time per call over batches of 100 calls on one input set and on 32 rotating
sets, the benchmark's own back-to-back and host-only measures, and how many calls missed the guards path
(took the metadata-key path). Run it plain and under `taskset -c K` to see whether pinning steadies it.

Usage: python scripts/probe_host_noise.py   (raw output of the 2026-11-30 H200 runs:
       benchmarks/results/host-noise-probe-nvidia-h200-2026-11-30.txt)
"""
import gc
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402

KEY_PATH_CALLS = [0]


def _counting(call):
    def wrapper(*args):
        KEY_PATH_CALLS[0] += 1
        return call(*args)
    return wrapper


def per_call_us(fn, n=100, rounds=30):
    """Median over `rounds` batches of `n` calls of the host time per call."""
    xs = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        xs.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(xs)


def report(tag, fast, dev):
    sets = [B.make_inputs(4096, 16, dev, seed=10 + i) for i in range(32)]
    for name in ("gae", "discounted_returns"):
        fn = fast[name]
        for _ in range(100):
            fn(sets[0])
        outs = [tuple(o) if isinstance(o, tuple) else o for o in (fn(d) for d in sets)]
        KEY_PATH_CALLS[0] = 0
        one = per_call_us(lambda: fn(sets[0], out=outs[0]))
        key_one, KEY_PATH_CALLS[0] = KEY_PATH_CALLS[0], 0
        turn = [0]

        def rotating():
            i = turn[0] = (turn[0] + 1) % len(sets)
            fn(sets[i], out=outs[i])

        rot = per_call_us(rotating)
        key_rot = KEY_PATH_CALLS[0]
        b2b = B.time_back_to_back(fn, sets, 200, outs=outs)
        host = B.time_host_only(lambda d: fn(d, out=outs[0]), sets[0], 2000)
        print(f"{tag:12s} {name:20s} batch-one {one:6.2f} (key calls {key_one})  batch-rotating {rot:6.2f} "
              f"(key calls {key_rot})  bench back2back {b2b:6.2f}  bench host {host:6.2f}", flush=True)


def main():
    dev = torch.device("cuda")
    fast = B.fast_calls(K)
    O._call = _counting(O._call)
    report("fresh", fast, dev)
    for name in fast:  # the benchmark's correctness phase
        for (N, T) in B.SHAPES:
            d = B.make_inputs(N, T, dev, seed=1)
            fast[name](d)
            if (N, T) in ((4096, 16), (512, 2048)):
                fast[name]({k: (v.double() if v.is_floating_point() else v) for k, v in d.items()})
    torch.cuda.synchronize()
    report("after-corr", fast, dev)
    gc.collect()
    gc.freeze()
    report("gc-frozen", fast, dev)


if __name__ == "__main__":
    main()
