#!/usr/bin/env python
"""Nsight Compute driver for the split plan at few environments and long horizons (GAE, 512x2048).

Launches kernels.compute_gae once per forced plan (after a warm-up call that compiles it), and the
1-D streaming kernel of scripts/profile_tile_scan.py that moves the same bytes, so that ncu can say what
limits each (DRAM and L1 throughput, occupancy, registers, warp stalls). Each plan is checked against the
float64 reference first. The device command:

  ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats -k regex:'^(gae_kernel|flat_copy)' python scripts/profile_split.py

Usage: python scripts/profile_split.py [--shape 512x2048]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import torch  # noqa: E402
import triton  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from kernels import _triton_ops as O  # noqa: E402
from kernels import reference as RF  # noqa: E402
from profile_tile_scan import flat_copy_kernel  # noqa: E402

GAMMA, LAM = 0.99, 0.95
# (T_BLOCK, BLOCK_N, num_warps, SEG_L, SPLIT): the rule's plan, smaller split tiles, the tile scan it replaced
PLANS = [(256, 32, 16, 16, True), (128, 32, 16, 8, True), (64, 32, 8, 8, True), (128, 16, 4, 0, True),
         (2048, 4, 8, 0, False)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="512x2048")
    args = ap.parse_args()
    N, T = (int(v) for v in args.shape.split("x"))
    d = B.make_inputs(N, T, torch.device("cuda"), seed=3)
    dd = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
    exp = RF.gae(dd["rewards"], dd["values"], dd["terminated"], dd["truncated"], gamma=GAMMA, lambda_=LAM,
                 bootstrap_value=dd["bootstrap_value"])
    out = (torch.empty(T, N, device="cuda"), torch.empty(T, N, device="cuda"))
    for plan in PLANS:
        O.config["force"] = plan
        O.clear_plans()
        for _ in range(2):
            K.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAM,
                          bootstrap_value=d["bootstrap_value"], out=out)
        torch.cuda.synchronize()
        err = max((out[0].double() - exp[0]).abs().max().item(), (out[1].double() - exp[1]).abs().max().item())
        print(f"plan {plan}: max err {err:.2e}", flush=True)
    O.config["force"] = None
    flat_copy_kernel[(triton.cdiv(T * N, 4096),)](d["rewards"], d["values"], d["terminated"], d["truncated"],
                                                  out[0], out[1], T * N, BLOCK=4096, num_warps=8)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
