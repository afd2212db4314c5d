#!/usr/bin/env python
"""Compile every kernel for sm_90 on any machine (no GPU needed) and record each variant's PTX opcode counts.

Triton compiles to PTX with its bundled ptxas toolchain from the kernel's signature alone, so a change to
kernels/_triton_kernels.py that should not change the generated code (a refactor) can be checked without
a GPU: record the counts before and after and compare. Identical counts do not prove identical timing:
instruction order may differ, and even PTX identical instruction for instruction but with other virtual
register numbers has given different SASS and 8% more time (the forward kernel at 65536x128, fifth H200
session in docs/benchmarks-history.md). A refactor that adds loads, shuffles or barriers does show up.

Variants: the six kernels x plans (segments 128x32 in 16 warps, 16x32 in 4 warps, 64x32 in 8 warps; the
tile scan 128x16 in 8 warps; the 4-row and 8-row in-thread chunks, double-buffered; split chunks of 32 time
chunks, as segments 64x32 in 8 warps and as the tile scan 64x16 in 4 warps) x both bootstrap forms, float32,
bool flags. Keys of split variants end in ",split". With --more, also MORE_PLANS with PDL: segment plans that
preload (PRELOAD 1 and 2), Retrace's preloading split plan, and plans computing in float64 (CT; pointers stay
float32): 72 more variants.

With --entry, only the kernel's entry function is counted, without the functions it calls (each kernel's
row-by-row solve is one, kernels._triton_kernels._not_inlined), and each variant also records a hash of that
function's instructions (the PTX without comments, debug lines and sections, labels and the module's name), so
that --compare also reports entry functions that differ in anything but their counts. Every variant records the
same hash of the whole module (``module_sha1``: the entry and the functions it calls, normalized alike), so that a
refactor whose PTX is unchanged instruction for instruction, registers included, shows as no difference at all.

Usage: python scripts/ptx_opcodes.py --out before.json [--entry] [--more] [--kernels other/kernels]
       python scripts/ptx_opcodes.py --compare before.json after.json
"""
import argparse
import collections
import hashlib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

KERNELS = ("gae_kernel", "vtrace_kernel", "lambda_returns_kernel", "discounted_kernel", "retrace_kernel",
           "forward_kernel")
# T_BLOCK, BLOCK_N, warps, SEG_L, SPLIT
PLANS = [(128, 32, 16, 8, False), (16, 32, 4, 4, False), (64, 32, 8, 8, False), (128, 16, 8, 0, False),
         (4, 32, 1, 0, False), (8, 32, 1, 0, False), (64, 32, 8, 8, True), (64, 16, 4, 0, True)]


def signature(kernel, consts):
    sig = {}
    for a in kernel.arg_names:
        if a in consts:
            sig[a] = "constexpr"
        elif a in ("TE", "TR"):
            sig[a] = "*i1"
        elif a == "LINK_I" or (a == "LINK_F" and "_await_maps" in kernel.fn.__globals__):
            sig[a] = "*i64"  # LINK_F held float32 maps before its words carried their launch's epoch
        elif a.isupper() and a not in ("T", "N"):
            sig[a] = "*fp32"
        elif a.endswith(("_hi", "_lo")):
            sig[a] = "fp32"
        else:
            sig[a] = "i32"
    return sig


def opcodes(ptx):
    counts = collections.Counter()
    for line in ptx.split("\n"):
        line = line.strip()
        if not line or line.startswith((".", "$", "{", "}", "//")):
            continue
        words = line.split()
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        counts[op.rstrip(";")] += 1
    return counts


def module_text(ptx):
    """The whole module's PTX (the entry and the functions it calls), normalized as entry_function's: no comments,
    debug lines or sections, labels or module name."""
    if "\t.section" in ptx:
        ptx = ptx[:ptx.index("\t.section")]
    return "\n".join(_normalized_lines(ptx))


def _normalized_lines(text):
    keep = []
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith((".loc", ".file", "//", "$L__")):
            keep.append(re.sub(r"\w+_\$__triton_kernels_\$__", "_triton_kernels_", line))
    return keep


def entry_function(ptx):
    """The PTX of the kernel's entry function alone, normalized: no comments, debug lines or sections, labels or
    module name (the package's import name appears in the names of the functions it calls)."""
    text = ptx[ptx.index(".entry"):]
    for end in (".func", ".section"):
        if end in text:
            text = text[:text.index(end)]
    return "\n".join(_normalized_lines(text))


# --more: T_BLOCK, BLOCK_N, warps, SEG_L, SPLIT, PRELOAD, CT (with PDL): the segment plans that load ahead (PRELOAD 1
# and 2, the latter from 16384 environments), a split plan that preloads (Retrace's), and plans computing in float64
MORE_PLANS = [(128, 32, 16, 8, False, 1, "fp32"), (16, 32, 4, 4, False, 2, "fp32"), (32, 32, 4, 8, False, 2, "fp32"),
              (256, 32, 16, 16, True, 1, "fp32"), (16, 32, 4, 4, False, 2, "fp64"), (64, 32, 8, 8, False, 0, "fp64")]


def _variants(more):
    """(key suffix, T_BLOCK, BLOCK_N, warps, SEG_L, SPLIT, N_CHUNKS, PRELOAD, PDL, CT name) of every variant."""
    out = []
    for tb, bn, nw, seg_l, split in PLANS:
        n_chunks = 32 if split else 1 if tb >= 64 else 8
        out.append((f"{tb},{bn},{nw},{seg_l}", ",split" if split else "", tb, bn, nw, seg_l, split, n_chunks, False,
                    False, "fp32"))
    if more:
        for tb, bn, nw, seg_l, split, preload, ct in MORE_PLANS:
            n_chunks = 8 if split or tb < 64 else 1
            out.append((f"{tb},{bn},{nw},{seg_l}", f",preload{preload},pdl,{ct}" + (",split" if split else ""), tb,
                        bn, nw, seg_l, split, n_chunks, preload, True, ct))
    return out


def record(path, entry=False, kernels_dir=None, more=False):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    if kernels_dir:
        from sass_shuffles import load_kernels
        K = load_kernels(os.path.abspath(kernels_dir), "kernels_recorded")
    else:
        from kernels import _triton_kernels as K

    out = {}
    for name in KERNELS:
        kernel = getattr(K, name)
        for plan, suffix, tb, bn, nw, seg_l, split, n_chunks, preload, pdl, ct in _variants(more):
            for form in (False, True):
                consts = dict(HAS_TR=True, CT=getattr(tl, "float64" if ct == "fp64" else "float32"), BIG=False,
                              T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=n_chunks, SEG_L=seg_l, SPLIT=n_chunks if split else 0)
                for flag, value in (("PRELOAD", preload), ("PDL", pdl), ("HAS_NV", form), ("HAS_BV", not form),
                                    ("HAS_INIT", form)):
                    if flag in kernel.arg_names:
                        consts[flag] = value
                src = triton.compiler.ASTSource(fn=kernel, signature=signature(kernel, consts), constexprs=consts)
                ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=nw))
                ptx = ck.asm["ptx"]
                counts = dict(opcodes(entry_function(ptx) if entry else ptx))
                if entry:
                    counts["entry_sha1"] = hashlib.sha1(entry_function(ptx).encode()).hexdigest()
                counts["module_sha1"] = hashlib.sha1(module_text(ptx).encode()).hexdigest()
                out[f"{name}/{plan}/form{int(form)}{suffix}"] = counts
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    print(f"{len(out)} variants compiled; wrote {path}")


def compare(a_path, b_path):
    """Print the variants whose counts or hashes differ, then those in one file only (e.g. a run with --more against
    one without); returns how many of either kind there are."""
    a, b = json.load(open(a_path)), json.load(open(b_path))
    differ = 0
    for key in sorted(set(a) & set(b)):
        ca, cb = a[key], b[key]
        d = {op: (ca.get(op, 0), cb.get(op, 0)) for op in set(ca) | set(cb) if ca.get(op, 0) != cb.get(op, 0)}
        if d:
            differ += 1
            print(key, dict(sorted(d.items())))
    print(f"{differ} of the {len(set(a) & set(b))} variants in both files differ in their opcode counts or hashes")
    for path, only in ((a_path, sorted(set(a) - set(b))), (b_path, sorted(set(b) - set(a)))):
        if only:
            print(f"{len(only)} variants only in {path}: {', '.join(only)}")
    return differ + len(set(a) ^ set(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--entry", action="store_true", help="the entry function only, with a hash of its instructions")
    ap.add_argument("--kernels", default=None, help="another kernels/ directory (default: this checkout's)")
    ap.add_argument("--more", action="store_true", help="also MORE_PLANS: preloading plans, PDL, float64")
    args = ap.parse_args()
    if args.compare:
        sys.exit(1 if compare(*args.compare) else 0)
    if not args.out:
        ap.error("--out or --compare")
    os.environ.pop("TRITON_INTERPRET", None)
    record(args.out, args.entry, args.kernels, args.more)


if __name__ == "__main__":
    main()
