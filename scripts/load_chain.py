#!/usr/bin/env python
"""How many global-memory latencies one warp waits through, read off a plan's SASS (sm_90, no GPU needed).

A static model of the instruction stream. The SASS is walked in order, straight through (branches are ignored, so
each loop body counts once). An instruction waits until every register and predicate it reads is ready, its guard
predicate included. A global load (LDG) or a global atomic that returns a value makes its
destination ready one memory latency after it issues; non-atomic loads after the split plan's publish (data the
program touched just before) and spill reloads (LDL) take a quarter of one; everything else is ready at once.
A predicated write keeps the later of the old and the new time. The result is the warp's path length in latencies
and where it waits: a kernel whose loads issue together waits a few times; one that waits after every row's loads
waits about once per row. It ignores throughput, occupancy, bank conflicts and the other warps, so it ranks code
shapes of one kernel and does not predict times. It found that GAE's segment plans waited about once per row
because of how its TD error selected between r and r + gamma*V+ (kernels._triton_kernels._gae_terms); the
rewrite it suggested took 0.77-0.78x the device time at 512x2048 (benchmarks/results/ab-terms-where-nvidia-h200-
2026-11-30.json), while for V-trace, whose split plan spills, it overstated the gain.

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

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_OP = re.compile(r"(?:@(!?)(P\d|PT)\s+)?(\S+)\s*(.*)")
_REG = re.compile(r"\bR(\d+)\b")
_PRED = re.compile(r"^!?(P\d|PT)$")
_STORES = ("STG", "STS", "STL", "ST.", "RED", "BAR", "BRA", "EXIT", "MEMBAR")


def _regs(token: str, width: int = 1):
    """The general registers a token names (a .64 address names a pair)."""
    out = []
    for m in re.finditer(r"\bR(\d+)(\.64)?\b", token):
        r = int(m.group(1))
        out += [r, r + 1] if m.group(2) else [r]
    return out


def _operands(op: str, operands: str):
    """(registers and predicates read, registers written, predicates written) of one instruction."""
    toks = [t.strip() for t in operands.split(",")] if operands else []
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    preds_read = [m.group(1) for t in toks for m in [re.match(r"^!?(P\d)$", t)] if m]
    if op.startswith(_STORES):
        reads = [r for t in toks for r in _regs(t)]
        data = [r for t in toks[-1:] if not t.startswith(("[", "desc")) for r in _regs(t)]
        reads += [r + k for r in data[:1] for k in range(1, width)]
        return reads, preds_read, [], []
    dest_regs, dest_preds, n = [], [], 0
    for i, t in enumerate(toks[:2]):
        if _PRED.match(t):
            dest_preds.append(t)
        elif re.fullmatch(r"R\d+|RZ", t) and (i == 0 or dest_preds):
            dest_regs += [int(t[1:])] if t != "RZ" else []
        else:
            break
        n = i + 1
    preds_read = [p for t in toks[n:] for m in [re.match(r"^!?(P\d)$", t)] if m for p in [m.group(1)]]
    reads = [r for t in toks[n:] for r in _regs(t)]
    writes = [r + k for r in dest_regs for k in range(width)]
    return reads, preds_read, writes, [p for p in dest_preds if p != "PT"]


def chain(sass: str, near: float = 0.25):
    """(path length in memory latencies, [(wait, loads issued so far, address, instruction)]) of one warp."""
    ready = {}
    t = 0.0
    loads = 0
    published = False
    waits = []
    for addr, text in _INSTR.findall(sass):
        text = text.strip()
        _neg, guard, op, operands = _OP.match(text).groups()
        reads, preds, writes, pwrites = _operands(op, operands)
        if guard and guard != "PT":
            preds.append(guard)
        need = max([ready.get(r, 0.0) for r in reads] + [ready.get(p, 0.0) for p in preds], default=0.0)
        if need > t:
            waits.append((need - t, loads, addr, text))
            t = need
        if op.startswith("ATOMG.E.EXCH"):  # the split plan's publish
            published = True
        latency = 0.0
        if op.startswith("LDG"):
            loads += 1
            latency = near if published and ".STRONG" not in op else 1.0
        elif op.startswith("ATOMG"):
            latency = 1.0
        elif op.startswith("LDL"):
            latency = near
        for r in writes:
            ready[r] = max(ready.get(r, 0.0), t + latency) if guard else t + latency
        for p in pwrites:
            ready[p] = t
    return t, waits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", nargs="+", metavar="PLAN")
    ap.add_argument("--kernels", default=os.path.join(ROOT, "kernels"), help="a kernels/ directory")
    ap.add_argument("--min-wait", type=float, default=0.3, help="list waits at least this long (latencies)")
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    from sass_shuffles import load_kernels, nvidia_tool, plan_cubin
    K = load_kernels(os.path.abspath(args.kernels), "kernels_chain")
    for spec in args.plans:
        try:
            binary, _ = plan_cubin(K, spec)
        except ValueError as err:
            ap.error(str(err))
        sass = nvidia_tool("nvdisasm", binary, "-c")
        t, waits = chain(sass)
        long = [w for w in waits if w[0] >= args.min_wait]
        print(f"{spec}: {t:.1f} latencies, {len(long)} waits of >= {args.min_wait}", flush=True)
        for w, n, addr, text in long:
            print(f"    {w:4.2f} after {n:3d} loads at {addr}: {text[:70]}")


if __name__ == "__main__":
    main()
