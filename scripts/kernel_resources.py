#!/usr/bin/env python
"""Registers, spill stack and shared memory per thread of the kernels' plans, compiled for sm_90 without a GPU,
and the programs per SM that the registers allow.

Triton compiles each plan to a cubin from the kernel's signature alone (scripts/sass_shuffles.cubin) and its
bundled ``cuobjdump --dump-resource-usage`` reads the resources back. Programs per SM assume the H100/H200
limits: 65536 registers (allocated per warp in units of 256), 64 warps and 32 programs per SM; shared memory
is not a limit for these plans. Used to ask whether register caps (the plan field MAXNREG) could put more
programs on an SM (docs/benchmarks.md, eighth H200 session).

Usage: python scripts/kernel_resources.py "gae_kernel:128,32,16,8,0:1" "vtrace_kernel:64,32,8,8,0:2:80" ...
       (kernel:T_BLOCK,BLOCK_N,warps,SEG_L,SPLIT[,PRELOAD]:N_CHUNKS[:MAXNREG]); without arguments, the plans of
       the H200 rule at 16384x128 and 512x2048.
"""
from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

DEFAULT = ["gae_kernel:128,32,16,8,0:1", "vtrace_kernel:64,32,8,8,0:2", "lambda_returns_kernel:64,32,8,8,0,1:2",
           "discounted_kernel:64,32,8,8,0:2", "retrace_kernel:64,32,8,8,0:2", "forward_kernel:64,32,8,8,0:2",
           "gae_kernel:256,32,16,16,1:8", "vtrace_kernel:256,32,16,16,1:8", "retrace_kernel:256,32,16,16,1,1:8",
           "discounted_kernel:128,32,8,16,1:16", "forward_kernel:128,32,8,16,1:16"]


def programs_per_sm(regs, warps):
    per_warp = -(-regs * 32 // 256) * 256
    return min(65536 // (per_warp * warps), 64 // warps, 32)


def main():
    os.environ.pop("TRITON_INTERPRET", None)
    from sass_shuffles import cubin, load_kernels, nvidia_tool
    K = load_kernels(os.path.join(ROOT, "kernels"), "kernels_this")
    for spec in sys.argv[1:] or DEFAULT:
        name, plan, n_chunks, *cap = spec.split(":")
        fields = [int(v) for v in plan.split(",")]
        preload = bool(fields[5]) if len(fields) > 5 else False
        maxnreg = int(cap[0]) if cap else 0
        out = nvidia_tool("cuobjdump", cubin(getattr(K, name), tuple(fields[:5]), int(n_chunks), preload, maxnreg),
                          "--dump-resource-usage")
        m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", out)
        regs, stack, shared = (int(v) for v in m.groups())
        print(f"{spec:45s} registers {regs:4d}  spill stack {stack:4d} B  shared {shared:6d} B  "
              f"programs/SM {programs_per_sm(regs, fields[2])}", flush=True)


if __name__ == "__main__":
    main()
