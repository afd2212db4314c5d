#!/usr/bin/env python
"""How long torch.compile takes to compile one of bench_kernels.py's baseline loops, unrolled over T steps.

The reason the benchmark compiles long horizons in chunks of COMPILE_CHUNK_T steps (bench_kernels.chunked_loop):
the time grows with T, since dynamo unrolls the Python loop. CPU tensors by default (Inductor's C++ backend, one
thread); --cuda on a GPU machine.

Usage: python scripts/time_loop_compile.py [--name gae] [--N 64] [--cuda] 128 256 512
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("horizons", type=int, nargs="+")
    ap.add_argument("--name", default="gae", choices=list(B.LOOPS))
    ap.add_argument("--N", type=int, default=64)
    ap.add_argument("--cuda", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda" if args.cuda else "cpu")
    torch.set_num_threads(1)
    for T in args.horizons:
        d = B.make_inputs(args.N, T, dev, seed=1)
        torch._dynamo.reset()
        fn = torch.compile(B.LOOPS[args.name], dynamic=False)
        t0 = time.perf_counter()
        fn(d)
        if args.cuda:
            torch.cuda.synchronize()
        print(f"{args.name} T={T} N={args.N} {dev.type}: first call (compile) {time.perf_counter() - t0:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()
