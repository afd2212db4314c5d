#!/usr/bin/env python
"""What programmatic dependent launch (PDL) changes in a training step's credit assignment, on a CUDA GPU.

The credit-assignment phase as rl_app/ppo_trainer.py runs it after a rollout: the critic (Linear(obs_dim,
hidden), tanh, Linear(hidden, 1)) on the ``[N]`` observations after the window gives ``bootstrap_value``, then
``compute_gae`` with the rollout's ``[T, N]`` values into preallocated outputs, then the advantages are
normalized (mean and std). GAE's kernel thus follows a torch kernel, as in training, not another of ours. Two versions of the kernels package are compared in one
process, alternating which goes first in each of ``--rounds`` rounds: this checkout's (PDL for plans of more
than one warp on sm_90+) and ``--base``, a ``kernels/`` directory without it (commit a5ad9cf has the same plans
and kernels otherwise). Per step, median over batches:

* eager: CUDA events around ``--inner`` back-to-back steps issued from Python (bound by the host where the
  step's launches take longer to issue than to run);
* graph: the same steps captured once in a CUDA graph and replayed back to back (no host in the way: the
  launch-to-launch gaps that PDL hides are all that separates the kernels);
* gae only: the GAE call alone, back to back, eager (bench_kernels' full call).

Every version's advantages are checked against the float64 reference first. Writes JSON with --out.

Usage: python scripts/ab_pdl_step.py --base gpu_in/base_a5/kernels --out F.json [--shapes 4096x16,512x2048]
       [--rounds 5] [--inner 50] [--obs-dim 64] [--hidden 256]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402
from ab_kernels import load_package  # noqa: E402
from kernels import reference as RF  # noqa: E402

GAMMA, LAMBDA = 0.99, 0.95


def make_step(pkg, critic, next_obs, d, T, N):
    """The phase as closures over preallocated outputs: (step, gae_only, advantages, bootstrap_value)."""
    adv = torch.empty(T, N, device=next_obs.device)
    ret = torch.empty(T, N, device=next_obs.device)
    normed = torch.empty(T, N, device=next_obs.device)
    fixed_bootstrap = critic(next_obs).view(N)

    def gae(bootstrap_value):
        pkg.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAMBDA,
                        bootstrap_value=bootstrap_value, out=(adv, ret))

    def step():
        gae(critic(next_obs).view(N))
        torch.sub(adv, adv.mean(), out=normed)
        normed.div_(adv.std() + 1e-8)

    return step, (lambda: gae(fixed_bootstrap)), adv, fixed_bootstrap


def per_call_us(fn, inner, batches):
    """Median over `batches` of CUDA events around `inner` back-to-back calls of fn, per call."""
    xs = []
    for _ in range(batches):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) * 1e3 / inner)
    return statistics.median(xs)


def graphed(fn, inner):
    """fn captured `inner` times in one CUDA graph (after a warm-up on a side stream); returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    return g.replay


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a kernels/ directory without PDL (e.g. commit a5ad9cf's)")
    ap.add_argument("--out", default="ab_pdl_step.json", help="where the JSON goes (default: %(default)s)")
    ap.add_argument("--shapes", default="4096x16,4096x128,16384x32,16384x128,512x2048")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", type=int, default=50)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--obs-dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    base = load_package(os.path.abspath(args.base), "kernels_base")
    pkgs = {"new": K, "base": base}
    dev = torch.device("cuda")
    torch.manual_seed(0)
    critic = torch.nn.Sequential(torch.nn.Linear(args.obs_dim, args.hidden), torch.nn.Tanh(),
                                 torch.nn.Linear(args.hidden, 1)).to(dev)
    res = B.run_info(base=os.path.abspath(args.base), new="this checkout's kernels/", rounds=args.rounds,
                     inner=args.inner, batches=args.batches, obs_dim=args.obs_dim, hidden=args.hidden,
                     timer="CUDA events around --inner back-to-back steps (eager) or one replay of a graph of "
                           "--inner steps (graph); median of --batches per round; per step",
                     results={})
    with torch.no_grad():
        for shape in args.shapes.split(","):
            N, T = (int(x) for x in shape.split("x"))
            d = B.make_inputs(N, T, dev)
            next_obs = torch.randn(N, args.obs_dim, device=dev)
            entry = {"plan": B.plan_of("gae", N, T)}
            fns = {}
            for name, pkg in pkgs.items():
                step, gae_only, adv, boot = make_step(pkg, critic, next_obs, d, T, N)
                gae_only()
                ref = RF.gae(d["rewards"].double(), d["values"].double(), d["terminated"], d["truncated"],
                             gamma=GAMMA, lambda_=LAMBDA, bootstrap_value=boot.double())[0]
                err = ((adv.double() - ref).abs() / (1 + ref.abs())).max().item()
                entry[f"{name}_max_rel_err"] = err
                if err > 1e-4:
                    raise SystemExit(f"{name} GAE at {shape} differs from the reference: {err}")
                fns[name] = dict(eager=step, graph=graphed(step, args.inner), gae_only=gae_only)
            rounds = {f"{n}_{kind}": [] for n in pkgs for kind in ("eager", "graph", "gae_only")}
            for r in range(args.rounds):
                order = ("new", "base") if r % 2 == 0 else ("base", "new")
                for kind in ("eager", "graph", "gae_only"):
                    for name in order:
                        if kind == "graph":  # one replay runs --inner steps
                            us = per_call_us(fns[name][kind], 1, args.batches) / args.inner
                        else:
                            us = per_call_us(fns[name][kind], args.inner, args.batches)
                        rounds[f"{name}_{kind}"].append(us)
            entry["rounds_us"] = rounds
            for kind in ("eager", "graph", "gae_only"):
                new_m = statistics.median(rounds[f"new_{kind}"])
                base_m = statistics.median(rounds[f"base_{kind}"])
                entry[f"{kind}_us"] = {"new": new_m, "base": base_m, "ratio": new_m / base_m}
                print(f"{shape:10s} {kind:9s} new {new_m:7.2f} us  base {base_m:7.2f} us  ratio {new_m / base_m:.3f}",
                      flush=True)
            res["results"][shape] = entry
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
