#!/usr/bin/env python
"""Check on a CUDA GPU that repeated calls, launched by the generated per-pattern launch functions
(kernels._triton_ops._pattern_launch), give the float64 reference's results.

For every estimator, shape and argument pattern (``out=`` given or not, ``truncated`` given or not), the first call
compiles through ``kernel[grid]``; the next three, each with fresh inputs of the same metadata (and fresh
outputs), must be served by a launch function (calls that reach ``_run`` are counted as not served) and match
kernels.reference. The shapes include one with a split plan (512x2048) and odd sizes (1000x37). Writes JSON with
--out; exits 1 on any mismatch.

Usage: python scripts/check_fast_path.py [--out F]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels import reference as RF  # noqa: E402

SHAPES = [(4096, 16), (1000, 37), (512, 2048)]
REPEATS = 3  # calls after the first of each pattern, all of which a launch function must serve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    not_served = [0]
    run = O._run

    def counting_run(*a):
        not_served[0] += 1
        return run(*a)
    O._run = counting_run
    dev = torch.device("cuda")
    fast, refs = B.fast_calls(K), B.ref_calls(RF)
    results, failures = {}, 0
    for N, T in SHAPES:
        for with_truncated in (True, False):
            for name, fn in fast.items():
                errs, served = [], 0
                for give_out in (False, True):
                    for rep in range(1 + REPEATS):
                        d = B.make_inputs(N, T, dev, seed=rep)
                        if not with_truncated:
                            d["truncated"] = None
                        want = refs[name](d)
                        want = want if isinstance(want, tuple) else (want,)
                        out = tuple(torch.empty(T, N, device=dev) for _ in want) if give_out else None
                        before = not_served[0]
                        got = fn(d, out=out if out is None or len(out) > 1 else out[0])
                        served += rep > 0 and not_served[0] == before
                        got = tuple(got) if isinstance(got, tuple) else (got,)
                        if out is not None:
                            assert all(g is o for g, o in zip(got, out)), "out= buffers not returned"
                        errs += [((g.double() - e).abs() / (1 + e.abs())).max().item() for g, e in zip(got, want)]
                ok = max(errs) < 1e-4 and served == 2 * REPEATS  # bench_kernels.py's bound
                failures += not ok
                key = f"{name}/{N}x{T}/{'truncated' if with_truncated else 'no_truncated'}"
                results[key] = dict(max_rel_err=max(errs), repeats_served=served, repeats=2 * REPEATS, ok=ok)
                print(f"{key:48s} err {max(errs):.1e} served {served}/{2 * REPEATS} {'ok' if ok else 'FAIL'}",
                      flush=True)
    with open(args.out or os.devnull, "w") as f:
        json.dump(B.run_info(results=results, failures=failures), f, indent=1)
    print(f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
