#!/usr/bin/env python
"""Warp shuffles and instruction counts in the SASS of the kernels' plans, compiled for sm_90 without a GPU.

Triton compiles to a cubin with its bundled ptxas from the kernel's signature alone, and its bundled nvdisasm
lists the SASS. Unit environment strides are specialized to the constant 1, as Triton's launcher does for the
contiguous inputs of a real call (without that the layout spreads threads over time too, and the counts mean
little). A backward estimator's scan used to be ``tl.associative_scan(..., reverse=True)``; Triton 3.6 lowers
that with warp shuffles even along an axis held inside each thread, 160 of them in GAE's walk of 128 rows in
8-row chunks. With the rows held in the recurrence's order (kernels._triton_kernels._visit_order) those
shuffles are gone; this script shows it, for this checkout and optionally another ``kernels/`` directory.

Usage: python scripts/sass_shuffles.py [--base bench_tmp/base/kernels] [--out counts.json] [--walks]
       (--walks: only the in-thread chunk walks of the plans from 32768 environments)
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

# (kernel, (T_BLOCK, BLOCK_N, num_warps, SEG_L, SPLIT), N_CHUNKS): plans of the H200 rule at 65536x128, 16384x128
# and 512x2048 when the shuffle counts were studied (kernels._triton_ops._tile has today's)
WALKS = [("gae_kernel", (8, 32, 1, 0, False), 16), ("vtrace_kernel", (4, 32, 1, 0, False), 32),
         ("retrace_kernel", (4, 32, 1, 0, False), 32), ("lambda_returns_kernel", (8, 32, 1, 0, False), 16),
         ("discounted_kernel", (8, 32, 1, 0, False), 16), ("forward_kernel", (8, 32, 1, 0, False), 16)]
CASES = WALKS + [("gae_kernel", (128, 32, 16, 8, False), 1), ("vtrace_kernel", (64, 32, 8, 8, False), 2),
                 ("gae_kernel", (256, 32, 16, 16, True), 8)]


def load_kernels(path, name):
    """kernels._triton_kernels of the package at `path`, imported as `name` (never as `kernels`, so that a
    process which uses the package under the interpreter keeps it)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                  submodule_search_locations=[path])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module(name + "._triton_kernels")


def cubin(kernel, plan, n_chunks, preload=False, maxnreg=0):
    """The sm_90 cubin of `kernel` for one plan (T_BLOCK, BLOCK_N, warps, SEG_L, SPLIT) with n_chunks chunks
    (float32, bool flags, bootstrap_value form, unit strides along N); maxnreg 0 leaves registers to ptxas."""
    return compiled(kernel, plan, n_chunks, preload, maxnreg).asm["cubin"]


def compiled(kernel, plan, n_chunks, preload=False, maxnreg=0, pdl=False):
    """Triton's compiled kernel for the plan of `cubin` (its .asm holds "ptx" and "cubin"); `pdl` compiles the
    wait for the previous grid in (the constexpr PDL, kernels._triton_ops._pdl)."""
    import triton
    import triton.language as tl
    from ptx_opcodes import signature
    from triton.backends.compiler import GPUTarget

    tb, bn, nw, seg_l, split = plan
    consts = dict(HAS_TR=True, CT=tl.float32, BIG=False, T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=n_chunks, SEG_L=seg_l,
                  SPLIT=1 << (n_chunks - 1).bit_length() if split else 0)  # as _triton_ops._build: a power of 2
    for flag, value in (("PRELOAD", preload), ("PDL", pdl), ("HAS_NV", False), ("HAS_BV", True), ("HAS_INIT", False)):
        if flag in kernel.arg_names:
            consts[flag] = value
    for a in kernel.arg_names:
        if a.startswith("s_") and a.endswith("_n"):
            consts[a] = 1  # what the launcher specializes for a contiguous environment axis
    sig = signature(kernel, consts)
    options = dict(num_warps=nw, maxnreg=maxnreg) if maxnreg else dict(num_warps=nw)
    return triton.compile(triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=consts),
                          target=GPUTarget("cuda", 90, 32), options=options)


PLAN_FORMAT = "kernel:T_BLOCK,BLOCK_N,warps[,SEG_L[,SPLIT[,PRELOAD[,MAXNREG]]]]:N_CHUNKS"


def plan_cubin(K, spec):
    """(cubin, num_warps) of a plan written as PLAN_FORMAT (the fields of kernels._triton_ops._tile, SPLIT and
    PRELOAD as 0/1/2), e.g. "gae_kernel:256,32,16,16,1:8", for the kernels module K (see load_kernels).
    Raises ValueError for a string not in that format."""
    try:
        name, plan, n_chunks = spec.split(":")
        fields = [int(v) for v in plan.split(",")]
        n_chunks = int(n_chunks)
        if not 3 <= len(fields) <= 7:
            raise ValueError
    except ValueError:
        raise ValueError(f"{spec!r} is not {PLAN_FORMAT}") from None
    kernel = getattr(K, name, None)
    if not name.endswith("_kernel") or kernel is None:
        raise ValueError(f"{spec!r}: no kernel named {name!r} in kernels._triton_kernels")
    tb, bn, nw, seg_l, split, preload, maxnreg = fields + [0, 0, 0, 0][len(fields) - 3:]
    return cubin(kernel, (tb, bn, nw, seg_l, bool(split)), n_chunks, int(preload), maxnreg), nw


def nvidia_tool(name, cubin_bytes, *flags):
    """stdout of Triton's bundled CUDA binary tool `name` (nvdisasm, cuobjdump) run on a cubin."""
    import triton
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin_bytes)
        return subprocess.run([tool, *flags, path], capture_output=True, text=True, check=True).stdout


def sass(kernel, plan, n_chunks):
    """The SASS text of `kernel` for one plan (see cubin)."""
    return nvidia_tool("nvdisasm", cubin(kernel, plan, n_chunks), "-c")


def counts(text):
    """(warp shuffles, instructions) in a SASS listing."""
    return len(re.findall(r"\bSHFL\b", text)), len(re.findall(r"/\*[0-9a-f]{4}\*/", text))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=None, help="another kernels/ directory to compare with")
    ap.add_argument("--out", default=None)
    ap.add_argument("--walks", action="store_true", help="only the in-thread chunk walks")
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    versions = {"this": load_kernels(os.path.join(ROOT, "kernels"), "kernels_this")}
    if args.base:
        versions["base"] = load_kernels(args.base, "kernels_base")
    res = {}
    for name, plan, n_chunks in (WALKS if args.walks else CASES):
        key = f"{name}/{','.join(str(int(v)) for v in plan)}"
        res[key] = {}
        for tag, K in versions.items():
            shfl, n = counts(sass(getattr(K, name), plan, n_chunks))
            res[key][tag] = dict(shfl=shfl, instructions=n)
        print(f"{key:40s} " + "  ".join(f"{t}: {v['shfl']:4d} SHFL {v['instructions']:5d} instr"
                                        for t, v in res[key].items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
