#!/usr/bin/env python
"""Host (Python) cost of one kernels.* call on the Triton path, with the kernel launch stubbed out.

Runs on a CPU-only machine: CPU tensors stand in for CUDA ones (the wrapper only reads metadata),
the Triton launcher is replaced by a no-op and the device/stream queries by constants. What is
left is exactly the per-call wrapper work: argument checks, plan lookup, scalar handling, output
allocation (CPU allocation here, the CUDA caching allocator on a GPU) and building the launch
arguments. The torch backend is timed on the same inputs for comparison (it runs the real
computation, so it is no overhead figure at T > 1).

Usage: python scripts/profile_host_overhead.py [--N 4096] [--T 16] [--reps 20000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402


def stub_launch():
    O._check_device = lambda dev: None
    O._jit_launch = lambda *a, **k: None
    O._fast_launcher = lambda ck: ((lambda *args: None), ())
    O._cur_device = lambda: None  # CPU tensors: device.index is None
    O._raw_stream = lambda idx: 0
    O.clear_plans()


def calls(N, T):
    f = dict(dtype=torch.float32)
    r, v, q, b, t = (torch.randn(T, N, **f) for _ in range(5))
    te, tr = torch.rand(T, N) < 0.02, torch.rand(T, N) < 0.01
    bv, ini = torch.randn(N), torch.randn(N)
    return {
        "gae": lambda be, out=None: K.compute_gae(r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=bv,
                                                  backend=be, out=out),
        "vtrace": lambda be, out=None: K.compute_vtrace(r, v, te, tr, behaviour_log_probs=b, target_log_probs=t,
                                                        gamma=0.99, bootstrap_value=bv, backend=be, out=out),
        "lambda_returns": lambda be, out=None: K.compute_lambda_returns(
            r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=bv, backend=be, out=out),
        "discounted_returns": lambda be, out=None: K.compute_discounted_returns(
            r, te, tr, gamma=0.99, bootstrap_value=bv, backend=be, out=out),
        "retrace": lambda be, out=None: K.compute_retrace(
            r, q, v, te, tr, behaviour_log_probs=b, target_log_probs=t, gamma=0.99, lambda_=0.95,
            bootstrap_value=bv, backend=be, out=out),
        "eligibility_traces": lambda be, out=None: K.compute_eligibility_traces(
            r, te, tr, gamma=0.99, lambda_=0.95, initial=ini, backend=be, out=out),
        "episodic_prefix_sum": lambda be, out=None: K.compute_episodic_prefix_sum(
            r, te, tr, initial=ini, backend=be, out=out),
    }


def per_call_us(fn, reps):
    fn()
    xs = []
    batch = 50
    for _ in range(max(1, reps // batch)):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        xs.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20000)
    args = ap.parse_args()
    stub_launch()
    base = per_call_us(lambda: torch.empty(args.T, args.N), args.reps)
    print(f"[T={args.T}, N={args.N}] CPU tensors; one torch.empty of an output here: {base:.2f} us")
    print(f"{'estimator':22s} {'triton path (us)':>17s} {'with out= (us)':>15s} {'torch backend (us)':>19s}")
    for name, fn in calls(args.N, args.T).items():
        o = fn("torch")
        a = per_call_us(lambda: fn("triton"), args.reps)
        a_out = per_call_us(lambda: fn("triton", out=o), args.reps)
        tb = per_call_us(lambda: fn("torch", out=o), max(200, args.reps // 50))
        print(f"{name:22s} {a:17.2f} {a_out:15.2f} {tb:19.1f}")


if __name__ == "__main__":
    main()
