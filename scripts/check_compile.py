"""The estimators inside torch.compile on a CUDA GPU: correctness against eager calls and the time of a small
credit-assignment step (GAE, then advantage normalisation) eager (with and without ``out=`` buffers for GAE),
compiled by inductor, and compiled with CUDA graphs (mode="reduce-overhead"); the compiled steps allocate GAE's
outputs (out=None).

Each variant of the step runs back to back; the time per step is the median over rounds of (CUDA-event time of
``--calls`` steps) / calls, so host and device time both count, as in a training loop. The JSON holds every
round, the versions and the GPU.

Usage: python scripts/check_compile.py --out F.json [--shapes 4096x16,16384x128] [--calls 200] [--rounds 7]
"""
import argparse
import datetime
import json
import platform
import statistics

import torch
import triton

import kernels


def _inputs(n: int, t: int, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return dict(rewards=torch.randn(t, n, device="cuda", generator=g),
                values=torch.randn(t, n, device="cuda", generator=g),
                terminated=torch.rand(t, n, device="cuda", generator=g) < 0.02,
                truncated=torch.rand(t, n, device="cuda", generator=g) < 0.01,
                bootstrap_value=torch.randn(n, device="cuda", generator=g))


def step(d: dict, out=None):
    """GAE, then normalised advantages (what PPO does before its minibatches)."""
    adv, ret = kernels.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.99,
                                   lambda_=0.95, bootstrap_value=d["bootstrap_value"], out=out)
    return (adv - adv.mean()) / (adv.std() + 1e-8), ret


def time_per_call(fn, calls: int, rounds: int) -> list:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) * 1e3 / calls)
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="4096x16,16384x128")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    res = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
           "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "calls": args.calls, "rounds": args.rounds, "shapes": {}}
    for shape in args.shapes.split(","):
        n, t = map(int, shape.split("x"))
        d = _inputs(n, t)
        out = (torch.empty(t, n, device="cuda"), torch.empty(t, n, device="cuda"))
        row = {}
        per = time_per_call(lambda: step(d, out), args.calls, args.rounds)
        row["eager_out"] = {"us_per_step": statistics.median(per), "rounds_us": per}
        for mode in ("eager", "default", "reduce-overhead"):
            torch._dynamo.reset()
            fn = step if mode == "eager" else torch.compile(step, mode=mode, fullgraph=True)
            err = 0.0
            for seed in (0, 1, 2):  # new values in the same input buffers, as a CUDA graph replays them
                d2 = _inputs(n, t, seed=seed)
                for k in d:
                    d[k].copy_(d2[k])
                want = [x.clone() for x in step(d)]
                got = [x.clone() for x in fn(d)]
                err = max(err, max(float((a - b).abs().max()) for a, b in zip(got, want)))
            per = time_per_call(lambda: fn(d), args.calls, args.rounds)
            row[mode] = {"us_per_step": statistics.median(per), "rounds_us": per, "max_abs_err_vs_eager": err}
        for mode in ("default", "reduce-overhead"):
            row[mode]["x_vs_eager"] = row["eager"]["us_per_step"] / row[mode]["us_per_step"]
        res["shapes"][shape] = row
        print(shape, {m: round(v["us_per_step"], 2) for m, v in row.items()}, flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
