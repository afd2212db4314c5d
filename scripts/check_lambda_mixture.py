#!/usr/bin/env python
"""Lambda-returns where the scans' form overflows and the issue's order does not, on a device, against the float64
reference: rewards [-1.5s, s], values 0, next_values [-s, 0], gamma 1, lambda 0.5 (s = 1e308 in float64, 2e38 in
float32), whose reference G is [-1.5s, s] while r + gamma*(1-l)*V+ = -2s overflows; N = 1, 64, 4096 copies of the
column, alone (T = 2) or after rows of zeros whose first reward is NaN (T = 5, 2047: the long one takes a split
plan). A variant is ok where every element's class (finite, inf, NaN) equals the reference's and the case's rows
agree within 1e-6 relative (the rows before them halve towards float32's subnormals). The test's CPU form:
tests/test_kernels_backends.py, _lambda_mixture_overflows.

Usage: python scripts/check_lambda_mixture.py [--device cuda] --out F.json
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kernels  # noqa: E402
from kernels import reference as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="lambda_mixture_check.json")
    a = ap.parse_args()
    res = []
    for dtype, s in ((torch.float64, 1e308), (torch.float32, 2e38)):
        for n in (1, 64, 4096):
            for pad in (0, 3, 2045):
                rewards = [0.0] * pad + [-1.5 * s, s]
                if pad:
                    rewards[0] = math.nan
                r = torch.tensor(rewards, dtype=dtype)[:, None].repeat(1, n)
                nv = torch.tensor([0.0] * pad + [-s, 0.0], dtype=dtype)[:, None].repeat(1, n)
                te = torch.zeros(r.shape, dtype=torch.bool)
                exp = ref.lambda_returns(r, torch.zeros_like(r), te, None, gamma=1.0, lambda_=0.5, next_values=nv)
                d = a.device
                got = kernels.compute_lambda_returns(r.to(d), torch.zeros_like(r).to(d), te.to(d), None, gamma=1.0,
                                                     lambda_=0.5, next_values=nv.to(d)).cpu().double()
                same_class = bool(((torch.isfinite(got) == torch.isfinite(exp))
                                   & (torch.isnan(got) == torch.isnan(exp))).all())
                ok = same_class and bool(torch.allclose(got[pad:], exp[pad:], rtol=1e-6, atol=0))
                res.append(dict(dtype=str(dtype), N=n, T=pad + 2, ok=ok, got_row=float(got[pad, 0]),
                                ref_row=float(exp[pad, 0])))
                print(res[-1])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("all ok" if all(x["ok"] for x in res) else "MISMATCH")


if __name__ == "__main__":
    main()
