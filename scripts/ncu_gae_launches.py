#!/usr/bin/env python
"""Launches compute_gae at one shape for Nsight Compute: three warm-up calls, an L2 eviction, then the call to profile.

Run under ncu and let it skip the warm-ups, e.g. (docs/benchmarks.md, forty-ninth session)::

    ncu --clock-control none --kernel-name regex:gae_kernel --launch-skip 3 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats python scripts/ncu_gae_launches.py 16384x128

float32 rewards and values, bool flags (1% set), the bootstrap_value form, preallocated outputs; the plan is the
one kernels._triton_ops._tile picks for the shape. Needs a CUDA GPU.

Usage: python scripts/ncu_gae_launches.py NxT
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kernels  # noqa: E402


def main():
    if len(sys.argv) != 2 or "x" not in sys.argv[1]:
        sys.exit(__doc__)
    N, T = (int(v) for v in sys.argv[1].split("x"))
    torch.manual_seed(0)
    dev = "cuda"
    r = torch.randn(T, N, device=dev)
    v = torch.randn(T, N, device=dev)
    te = torch.rand(T, N, device=dev) < 0.01
    tr = torch.rand(T, N, device=dev) < 0.01
    b = torch.randn(N, device=dev)
    out = (torch.empty_like(r), torch.empty_like(r))
    for _ in range(3):
        kernels.compute_gae(r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=b, out=out)
    torch.cuda.synchronize()
    torch.empty(256 * 2**20, dtype=torch.uint8, device=dev).fill_(1)  # evicts L2 (ncu flushes caches anyway)
    torch.cuda.synchronize()
    kernels.compute_gae(r, v, te, tr, gamma=0.99, lambda_=0.95, bootstrap_value=b, out=out)
    torch.cuda.synchronize()
    print("ok")


if __name__ == "__main__":
    main()
