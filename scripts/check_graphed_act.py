"""The rollout's policy step eager and replayed from a CUDA graph (rl_app.graphed_act.GraphedAct), on a CUDA GPU.

Correctness: with one generator per path from the same seed, the graphed step gives the eager step's actions,
log-probs and values call after call, leaves its generator where the eager step leaves its own, across in-place
optimizer steps and a ``load_state_dict`` between calls (the graph must see the new weights): the
Nature CNN (Pong's 4x84x84 uint8 frames, 6 actions), the discrete MLP (CartPole) and the Gaussian MLP with
observation normalisation (3 action dimensions).

Time: one rollout step's policy work as ``collect_rollout`` does it, ``act`` then the actions to the host
(``.cpu()``, which waits for the GPU), back to back; the time per step is the median over rounds of
(host wall time of ``--calls`` steps) / calls. Observations are already on the GPU (a fresh random batch per
round). Nature CNN at several batch sizes, MLP at two.

Usage: python scripts/check_graphed_act.py --out F.json [--calls 300] [--rounds 7]
"""
import argparse
import datetime
import json
import platform
import statistics
import time

import torch

from rl_app.graphed_act import GraphedAct
from rl_app.models import build_model

MODELS = {  # name: (family, obs_shape, num_actions, action_shape, normalize_obs, obs dtype)
    "nature_cnn": ("atari", (4, 84, 84), 6, (), False, torch.uint8),
    "mlp_discrete": ("classic_control", (4,), 2, (), False, torch.float32),
    "mlp_gaussian_norm": ("mujoco", (11,), None, (3,), True, torch.float32),
}


def _model(name: str, device: torch.device, seed: int = 0):
    family, obs_shape, num_actions, action_shape, norm, dtype = MODELS[name]
    torch.manual_seed(seed)
    return build_model(family, obs_shape, num_actions, action_shape, norm).to(device), obs_shape, dtype


def _obs(shape, dtype, batch, device, gen):
    if dtype == torch.uint8:
        return torch.randint(0, 256, (batch, *shape), dtype=dtype, device=device, generator=gen)
    return torch.randn((batch, *shape), device=device, generator=gen)


def check(name: str, device: torch.device, batch: int = 16) -> dict:
    model, shape, dtype = _model(name, device)
    graphed = GraphedAct(model, batch, shape, dtype, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data_gen = torch.Generator(device=device).manual_seed(1)
    other = _model(name, device, seed=7)[0].state_dict()
    worst = {"actions_differ": 0, "log_probs": 0.0, "values": 0.0}
    gens = [torch.Generator(device=device).manual_seed(100) for _ in range(2)]  # one per path, kept across calls
    for call in range(6):
        if call == 3:
            model.load_state_dict(other)
        obs = _obs(shape, dtype, batch, device, data_gen)
        got, want = [], []
        for fn, into, gen in ((graphed.act, got, gens[0]), (model.act, want, gens[1])):
            into.append([x.clone() for x in fn(obs, gen)])
        (ga, gl, gv), (wa, wl, wv) = got[0], want[0]
        worst["actions_differ"] += int((ga != wa).sum()) if ga.dtype == torch.int64 else int(
            ((ga - wa).abs() > 1e-5).sum())
        worst["log_probs"] = max(worst["log_probs"], float((gl - wl).abs().max()))
        worst["values"] = max(worst["values"], float((gv - wv).abs().max()))
        # an in-place update of every parameter (and, for the normalising MLP, of its statistics)
        loss = model.evaluate(obs, wa).log_probs.mean() + model.evaluate(obs, wa).values.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.update_obs_norm(obs.float())
    worst["generator_states_equal"] = bool(torch.equal(gens[0].get_state(), gens[1].get_state()))
    return worst


def time_steps(fn, obs_batches, calls: int, rounds: int) -> list:
    gen = torch.Generator(device=obs_batches[0].device).manual_seed(0)
    for _ in range(20):
        fn(obs_batches[0], gen).actions.cpu()
    per = []
    for r in range(rounds):
        obs = obs_batches[r % len(obs_batches)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(obs, gen).actions.cpu()
        per.append((time.perf_counter() - start) * 1e6 / calls)
    return per


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    device = torch.device("cuda")
    res = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
           "torch": torch.__version__, "python": platform.python_version(), "calls": args.calls,
           "rounds": args.rounds, "timer": "host perf_counter around calls of act + actions.cpu(), median of rounds",
           "correctness": {}, "us_per_step": {}}
    for name in MODELS:
        res["correctness"][name] = check(name, device)
        print(name, res["correctness"][name], flush=True)
    for name, batches in (("nature_cnn", (8, 16, 32, 64, 256)), ("mlp_discrete", (8, 64))):
        model, shape, dtype = _model(name, device)
        for batch in batches:
            gen = torch.Generator(device=device).manual_seed(batch)
            obs = [_obs(shape, dtype, batch, device, gen) for _ in range(3)]
            graphed = GraphedAct(model, batch, shape, dtype, device)
            row = {}
            # alternate which goes first so a drifting host does not favour one
            for order in range(2):
                for label, fn in ((("eager", model.act), ("graph", graphed.act))[::1 if order == 0 else -1]):
                    row.setdefault(label, []).extend(time_steps(fn, obs, args.calls, args.rounds))
            out = {k: {"median_us": statistics.median(v), "rounds_us": v} for k, v in row.items()}
            out["graph_over_eager"] = out["graph"]["median_us"] / out["eager"]["median_us"]
            res["us_per_step"][f"{name}/{batch}"] = out
            print(f"{name:14s} batch {batch:4d}  eager {out['eager']['median_us']:7.1f} us  graph "
                  f"{out['graph']['median_us']:7.1f} us  graph/eager {out['graph_over_eager']:.2f}", flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
