#!/usr/bin/env python
"""Registers and spill stack per thread, shared memory per program, and the programs per SM that the registers
allow, for the kernels' plans compiled for sm_90 without a GPU.

Triton compiles each plan to a cubin from the kernel's signature alone (float32, bool flags, the bootstrap_value
form, unit strides along N: scripts/sass_shuffles.cubin) and its bundled ``cuobjdump --dump-resource-usage`` reads
the resources back. Programs per SM assume the H100/H200 limits: 65536 registers (allocated per warp in units of
256), 64 warps and 32 programs per SM; shared memory does not limit these plans. Used to ask whether register
caps (the plan field MAXNREG) could put more programs on an SM (docs/benchmarks-history.md, eighth H200 session).

Usage: python scripts/kernel_resources.py [--kernels DIR] [PLAN ...]
       PLAN = kernel:T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]]:N_CHUNKS (the fields of
       kernels._triton_ops._tile, SPLIT as 0/1, PRELOAD as 0/1/2), e.g. "vtrace_kernel:64,32,8,8,0,0,80:2";
       without PLANs, those of the H200 rule at 16384x128 and 512x2048; DIR is a kernels/ directory (default this
       checkout's), to compare two versions.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

DEFAULT = ["gae_kernel:16,32,4,4,0,2:8", "vtrace_kernel:16,32,4,4,0,2:8", "lambda_returns_kernel:32,32,4,8,0,2:4",
           "discounted_kernel:32,32,4,8,0,2:4", "retrace_kernel:16,32,4,4,0,2:8", "forward_kernel:32,32,4,8,0,2:4",
           "gae_kernel:256,32,16,16,1:8", "vtrace_kernel:256,32,16,16,1:8", "lambda_returns_kernel:128,32,8,16,1:16",
           "retrace_kernel:256,32,16,16,1,1:8", "discounted_kernel:128,32,8,16,1:16", "forward_kernel:128,32,8,16,1:16"]


def programs_per_sm(regs, warps):
    per_warp = -(-regs * 32 // 256) * 256
    return min(65536 // (per_warp * warps), 64 // warps, 32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", nargs="*", default=DEFAULT, metavar="PLAN",
                    help="kernel:T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]]:N_CHUNKS")
    ap.add_argument("--kernels", default=os.path.join(ROOT, "kernels"), help="a kernels/ directory")
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    from sass_shuffles import load_kernels, nvidia_tool, plan_cubin
    K = load_kernels(os.path.abspath(args.kernels), "kernels_this")
    for spec in args.plans:
        try:
            binary, nw = plan_cubin(K, spec)
        except ValueError as err:
            ap.error(str(err))
        out = nvidia_tool("cuobjdump", binary, "--dump-resource-usage")
        regs, stack, shared = (int(v) for v in re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", out).groups())
        print(f"{spec:45s} registers {regs:4d}  spill stack {stack:4d} B/thread  shared {shared:6d} B/program  "
              f"programs/SM {programs_per_sm(regs, nw)}", flush=True)


if __name__ == "__main__":
    main()
