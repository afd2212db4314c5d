#!/usr/bin/env python
"""Compare the sm_90 SASS of one kernel's entry function between two versions of the kernels package, for the plans
kernels picks at given shapes, without a GPU.

scripts/ptx_opcodes.py --entry compares PTX; ptxas allocates registers across the entry function and the
non-inlined row-by-row solve it calls (kernels._triton_kernels._not_inlined), so a change to that solve alone can
still change the entry function's SASS. For each shape this compiles the plan of bench_kernels.plan_of (contiguous
float32, bool flags, bootstrap_value form) with both versions (scripts/sass_shuffles.py), cuts each listing before
the first function whose name holds "_rows_", drops the addresses and the package's name, and counts the lines that
differ (difflib). Equal counts of lines with some differing are register or order changes, which can still change
the time (docs/benchmarks-history.md, fifth H200 session).

Usage: python scripts/sass_entry_compare.py --base other/kernels [--new kernels] [--estimator retrace]
       [--shapes 4096x16,512x2048] [--out F.json]
"""
from __future__ import annotations

import argparse
import datetime
import difflib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_kernels as B  # noqa: E402
import sass_shuffles as S  # noqa: E402

SHAPES = "4096x16,4096x128,16384x32,32768x16,16384x128,512x2048,65536x128,1024x1024,2048x1024,256x4096"
KERNEL = dict(gae="gae_kernel", vtrace="vtrace_kernel", lambda_returns="lambda_returns_kernel",
              discounted_returns="discounted_kernel", retrace="retrace_kernel",
              eligibility_traces="forward_kernel", episodic_prefix_sum="forward_kernel")


def entry_lines(K, spec):
    """(entry function's SASS lines, the rest's) of one plan, normalized as the module docstring says."""
    text = S.nvidia_tool("nvdisasm", S.plan_cubin(K, spec)[0], "-c")
    # the package's name inside mangled function names (Triton's cache may hold a build under an earlier name)
    text = re.sub(r"\$[A-Za-z0-9_]+_\$__triton_kernels", "$kernels_$__triton_kernels", text)
    lines = [re.sub(r"/\*[0-9a-f]{4}\*/", "", line).strip() for line in text.splitlines()]
    end = next((i for i, line in enumerate(lines) if line.startswith(".type") and "_rows_" in line), len(lines))
    return lines[:end], lines[end:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the baseline's kernels/ directory")
    ap.add_argument("--new", default=os.path.join(ROOT, "kernels"), help="default: this checkout's kernels/")
    ap.add_argument("--estimator", default="retrace", choices=sorted(KERNEL))
    ap.add_argument("--shapes", default=SHAPES, help="NxT,... (default: %(default)s)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = S.load_kernels(os.path.abspath(a.base), "kernels_sass_base")
    new = S.load_kernels(os.path.abspath(a.new), "kernels_sass_new")
    rows = []
    for shape in a.shapes.split(","):
        N, T = (int(v) for v in shape.split("x"))
        tb, bn, nw, seg_l, split, preload, maxnreg = B.plan_of(a.estimator, N, T)
        spec = f"{KERNEL[a.estimator]}:{tb},{bn},{nw},{seg_l},{int(split)},{int(preload)},{maxnreg}:{-(-T // tb)}"
        (eb, rb), (en, rn) = entry_lines(base, spec), entry_lines(new, spec)
        diff = [d for d in difflib.unified_diff(eb, en, lineterm="", n=0)
                if d[:1] in "+-" and d[:3] not in ("---", "+++")]
        row = dict(shape=shape, plan=spec, entry_lines=[len(eb), len(en)], entry_lines_differing=len(diff),
                   first_differences=diff[:6], rest_lines=[len(rb), len(rn)])
        rows.append(row)
        print(f"{shape:>10} {spec:45s} entry {len(eb)} -> {len(en)} lines, {len(diff)} differing; "
              f"rest {len(rb)} -> {len(rn)}", flush=True)
    if a.out:
        import torch
        import triton
        with open(a.out, "w") as f:
            json.dump(dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           torch=torch.__version__, triton=triton.__version__, target="sm_90",
                           base=os.path.abspath(a.base), new=os.path.abspath(a.new), estimator=a.estimator,
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
