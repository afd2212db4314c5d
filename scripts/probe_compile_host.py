#!/usr/bin/env python
"""Host cost of the estimators' torch.compile path (kernels/_compile.py), on any machine, GPU or not.

Times, in one child process per variant and round, the host time per call of:

- ``eager_step``: ``compute_gae(backend="triton")`` then the advantages' normalisation, called eagerly;
- ``compiled_step``: the same function under ``torch.compile(fullgraph=True)`` (inductor);
- ``compiled_floor``: a compiled function that only sums one input (dynamo's guards and call, one kernel);
- ``operator``: one direct call of ``torch.ops.fastrl.gae`` (the dispatcher and the operator's wrappers).

The Triton path's run-time entry is replaced by a stand-in that allocates GAE's two outputs, so the figures
are the compile path's own host cost (no kernel, no interpreter) and the same on a CPU as anywhere. With
``--base DIR`` (a checkout of another commit) the base's ``kernels`` package is timed too, in alternating
child processes, so both share the machine's state.

Usage: python scripts/probe_compile_host.py --out F.json [--base DIR] [--rounds 5] [--calls 3000]
       [--shape 64x16]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(calls: int, n: int, t: int) -> dict:
    import torch

    import kernels
    from kernels import _triton_ops

    def stand_in(*args):
        return torch.empty_like(args[0]), torch.empty_like(args[0])

    _triton_ops._GAE.hot.entry = stand_in
    g = torch.Generator().manual_seed(0)
    d = dict(rewards=torch.randn(t, n, generator=g), values=torch.randn(t, n, generator=g),
             terminated=torch.rand(t, n, generator=g) < 0.05, truncated=torch.rand(t, n, generator=g) < 0.02,
             bootstrap_value=torch.randn(n, generator=g))

    def step(d):
        adv, ret = kernels.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=0.99,
                                       lambda_=0.95, bootstrap_value=d["bootstrap_value"], backend="triton")
        return (adv - adv.mean()) / (adv.std() + 1e-8), ret

    compiled = torch.compile(step, fullgraph=True)
    floor = torch.compile(lambda d: d["rewards"].sum(), fullgraph=True)
    inputs = [d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"], None]
    fns = {"eager_step": lambda: step(d), "compiled_step": lambda: compiled(d), "compiled_floor": lambda: floor(d),
           "operator": lambda: torch.ops.fastrl.gae.default(inputs, [0.99, 0.95])}
    res = {}
    for name, fn in fns.items():
        for _ in range(200):
            fn()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        res[name] = (time.perf_counter() - start) / calls * 1e6
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", help="root of a checkout whose kernels/ is timed beside this one's")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--shape", default="64x16", help="NxT")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    n, t = map(int, args.shape.split("x"))
    if args.child:
        print(json.dumps(_child(args.calls, n, t)))
        return
    if args.rounds < 1 or args.calls < 1:
        ap.error("--rounds and --calls must be at least 1")
    roots = {"head": ROOT}
    if args.base:
        if not os.path.isfile(os.path.join(args.base, "kernels", "_compile.py")):
            ap.error(f"--base {args.base} has no kernels/_compile.py")
        roots["base"] = os.path.abspath(args.base)
    rounds = {name: [] for name in roots}
    for r in range(args.rounds):
        for name, root in (roots.items() if r % 2 == 0 else reversed(list(roots.items()))):
            env = dict(os.environ, PYTHONPATH=root, TRITON_INTERPRET="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--out", "-", "--calls", str(args.calls),
                   "--shape", args.shape]
            proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"{name} child failed:\n{proc.stderr[-3000:]}")
            rounds[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(name, {k: round(v, 2) for k, v in rounds[name][-1].items()}, flush=True)
    import torch
    res = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
           "shape": args.shape, "calls": args.calls, "roots": roots, "rounds": rounds,
           "median_us": {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
                         for name, rs in rounds.items()}}
    if "base" in roots:
        res["head_over_base"] = {k: res["median_us"]["head"][k] / res["median_us"]["base"][k]
                                 for k in res["median_us"]["head"]}
    print(json.dumps(res["median_us"], indent=1))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
