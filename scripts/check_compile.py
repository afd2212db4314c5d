"""The estimators inside torch.compile on a CUDA GPU: correctness against eager calls and the time of a small
credit-assignment step (GAE, then advantage normalisation) eager (with and without ``out=`` buffers for GAE),
compiled by inductor, and compiled with CUDA graphs (mode="reduce-overhead"); the compiled steps allocate GAE's
outputs (out=None).

Each variant of the step runs back to back; the time per step is the median over rounds of (CUDA-event time of
``--calls`` steps) / calls, so host and device time both count, as in a training loop. With ``--base DIR`` (the
root of another commit's checkout) that commit's ``kernels`` package is loaded beside this one and each mode's
step is timed for both, round by round in turn, so the ratios come from the same machine state (every variant's
error is against this package's eager step). The JSON holds every round, the versions and the GPU.

Usage: python scripts/check_compile.py --out F.json [--shapes 4096x16,16384x128] [--calls 200] [--rounds 7]
       [--base DIR]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys

import torch
import triton

import kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _inputs(n: int, t: int, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return dict(rewards=torch.randn(t, n, device="cuda", generator=g),
                values=torch.randn(t, n, device="cuda", generator=g),
                terminated=torch.rand(t, n, device="cuda", generator=g) < 0.02,
                truncated=torch.rand(t, n, device="cuda", generator=g) < 0.01,
                bootstrap_value=torch.randn(n, device="cuda", generator=g))


def make_step(pkg):
    def step(d: dict, out=None):
        """GAE, then normalised advantages (what PPO does before its minibatches)."""
        adv, ret = pkg.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.99,
                                   lambda_=0.95, bootstrap_value=d["bootstrap_value"], out=out)
        return (adv - adv.mean()) / (adv.std() + 1e-8), ret
    return step


def time_rounds(fns: dict, calls: int, rounds: int) -> dict:
    """Per variant, the time per call of `calls` back-to-back calls, once per round; the variants in turn."""
    for fn in fns.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    per = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            per[name].append(start.elapsed_time(end) * 1e3 / calls)
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="4096x16,16384x128")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--base", help="root of a checkout whose kernels package is timed beside this one's")
    args = ap.parse_args()
    pkgs = {"": kernels}
    if args.base:
        from ab_kernels import load_package
        pkgs["base_"] = load_package(os.path.join(os.path.abspath(args.base), "kernels"), "kernels_base")
    res = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
           "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "calls": args.calls, "rounds": args.rounds, "base": args.base, "shapes": {}}
    steps = {prefix: make_step(pkg) for prefix, pkg in pkgs.items()}
    reference = steps[""]
    for shape in args.shapes.split(","):
        n, t = map(int, shape.split("x"))
        d = _inputs(n, t)
        out = (torch.empty(t, n, device="cuda"), torch.empty(t, n, device="cuda"))
        row = {}
        for mode in ("eager", "default", "reduce-overhead"):
            torch._dynamo.reset()
            fns, errs = {}, {}
            for prefix, step in steps.items():
                fn = step if mode == "eager" else torch.compile(step, mode=mode, fullgraph=True)
                err = 0.0
                for seed in (0, 1, 2):  # new values in the same input buffers, as a CUDA graph replays them
                    d2 = _inputs(n, t, seed=seed)
                    for k in d:
                        d[k].copy_(d2[k])
                    want = [x.clone() for x in reference(d)]
                    got = [x.clone() for x in fn(d)]
                    err = max(err, max(float((a - b).abs().max()) for a, b in zip(got, want)))
                fns[prefix + mode] = (lambda fn=fn: fn(d))
                errs[prefix + mode] = err
                if mode == "eager":
                    fns[prefix + "eager_out"] = (lambda step=step: step(d, out))
            for name, per in time_rounds(fns, args.calls, args.rounds).items():
                row[name] = {"us_per_step": statistics.median(per), "rounds_us": per}
                if name in errs:
                    row[name]["max_abs_err_vs_eager"] = errs[name]
        for prefix in steps:
            for mode in ("default", "reduce-overhead"):
                row[prefix + mode]["x_vs_eager"] = (row[prefix + "eager"]["us_per_step"]
                                                    / row[prefix + mode]["us_per_step"])
        if args.base:
            row["head_over_base"] = {mode: row[mode]["us_per_step"] / row["base_" + mode]["us_per_step"]
                                     for mode in ("eager", "eager_out", "default", "reduce-overhead")}
        res["shapes"][shape] = row
        print(shape, {m: round(v["us_per_step"], 2) for m, v in row.items() if "us_per_step" in v}, flush=True)
        if args.base:
            print(shape, "head/base", {m: round(v, 3) for m, v in row["head_over_base"].items()}, flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
