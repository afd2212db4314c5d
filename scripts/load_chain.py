#!/usr/bin/env python
"""How many global-memory latencies one warp waits through, read off a plan's SASS (sm_90, no GPU needed).

A static model of the instruction stream: the SASS is walked in order; a global load (LDG) makes its destination
registers ready one memory latency after it issues (a quarter of one for the non-atomic loads that follow the split
plan's publish, whose data the program has just touched), every other instruction is ready at once, and an
instruction waits until all registers it reads are ready. The result is the warp's path length in latencies and
where it waits: a kernel whose loads issue together waits a few times; one that waits after every row's loads waits
once per row. Branches are ignored (the walk goes straight through each loop body once), so this ranks code shapes
of one kernel; it does not predict times. It found that GAE's segment plans waited once per row because of how
its TD error selected between r and r + gamma*V+ (kernels._triton_kernels._gae_terms); the rewrite it suggested
took 0.78x the device time at 512x2048 (benchmarks/results/ab-terms-where-nvidia-h200-2026-11-30.json).

Usage: python scripts/load_chain.py [--kernels DIR] PLAN [PLAN ...]
       PLAN = kernel:T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]]:N_CHUNKS, as for
       scripts/kernel_resources.py, e.g. "gae_kernel:256,32,16,16,1:8"; DIR is a kernels/ directory (default this
       checkout's) so that two versions can be compared.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

_INSTR = re.compile(r"/\*([0-9a-f]{4})\*/\s+([^;]*);")
_OP = re.compile(r"(@!?P\w+\s+)?(\S+)\s*(.*)")
_REG = re.compile(r"\bR(\d+)\b")


def chain(sass: str, near: float = 0.25):
    """(path length in memory latencies, [(wait, loads issued so far, address, instruction)]) of one warp."""
    ready = {}
    t = 0.0
    loads = 0
    published = False
    waits = []
    for addr, text in _INSTR.findall(sass):
        text = text.strip()
        op, operands = _OP.match(text).group(2, 3)
        regs = [int(r) for r in _REG.findall(operands)]
        if op.startswith(("STG", "STS", "STL", "RED")):
            reads, writes = regs, []
        else:
            reads, writes = regs[1:], regs[:1]
        need = max([ready.get(r, 0.0) for r in reads], default=0.0)
        if need > t:
            waits.append((need - t, loads, addr, text))
            t = need
        if op.startswith("ATOMG.E.EXCH"):  # the split plan's publish
            published = True
        latency = 0.0
        if op.startswith("LDG"):
            loads += 1
            latency = near if published and ".STRONG" not in op else 1.0
        width = 4 if ".128" in op else 2 if ".64" in op else 1
        for r in writes:
            for k in range(r, r + width):
                ready[k] = t + latency
    return t, waits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", nargs="+", metavar="PLAN")
    ap.add_argument("--kernels", default=os.path.join(ROOT, "kernels"), help="a kernels/ directory")
    ap.add_argument("--min-wait", type=float, default=0.3, help="list waits at least this long (latencies)")
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    from sass_shuffles import cubin, load_kernels, nvidia_tool
    K = load_kernels(os.path.abspath(args.kernels), "kernels_chain")
    for spec in args.plans:
        try:
            name, plan, n_chunks = spec.split(":")
            fields = [int(v) for v in plan.split(",")]
            if not 3 <= len(fields) <= 7:
                raise ValueError
        except ValueError:
            ap.error(f"{spec!r} is not kernel:T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]]:N_CHUNKS")
        tb, bn, nw, seg_l, split, preload, maxnreg = fields + [0, 0, 0, 0][len(fields) - 3:]
        sass = nvidia_tool("nvdisasm", cubin(getattr(K, name), (tb, bn, nw, seg_l, bool(split)), int(n_chunks),
                                             bool(preload), maxnreg), "-c")
        t, waits = chain(sass)
        long = [w for w in waits if w[0] >= args.min_wait]
        print(f"{spec}: {t:.1f} latencies, {len(long)} waits of >= {args.min_wait}", flush=True)
        for w, n, addr, text in long:
            print(f"    {w:4.2f} after {n:3d} loads at {addr}: {text[:70]}")


if __name__ == "__main__":
    main()
