"""PPO's update (``rl_app.ppo.ppo_update``) eager and with its epochs replayed from CUDA graphs
(``rl_app.graphed_update.GraphedEpochs``), on a CUDA GPU, at Atari PPO's shapes (Nature CNN on 4x84x84 uint8
frames, 6 actions; ``--rows`` = num_steps * num_envs rows, ``--minibatches`` minibatches, ``--epochs`` epochs).

Variants, each on its own copy of the same model, batch and generator seed:
- ``eager_host_lr``: Adam as torch builds it (learning rate and step counts on the host), eager: the trainer's
  update with ``algo.cuda_graph_update=false`` (and under torchrun);
- ``eager``: Adam with its numbers on the device (``prepare_optimizer(on_device=True)``), eager: the graph's
  optimizer without the graph, the twin the correctness check compares it with;
- ``graph``: that optimizer, epochs replayed from the graph (``algo.cuda_graph_update``, default on CUDA).

Correctness: in a separate pair of runs of four updates each, ``graph`` and ``eager`` take the same steps: the
largest difference of any weight is reported (0 expected with deterministic cuDNN; autotuning may pick other
algorithms for the two runs).

Time: one whole update (``--epochs`` x ``--minibatches`` steps) with the learning rate set before it, as the
trainer does; the median over ``--rounds`` rounds of (CUDA-event time of ``--updates`` updates) / updates.
The device's busy time of one eager update comes from ``torch.profiler`` (the sum of its kernels' times): the
part of the eager time the graph cannot remove.

cuDNN: ``--cudnn deterministic`` (the trainer's default, ``torch_deterministic=true``: deterministic algorithms,
no autotuning) or ``benchmark`` (``torch_deterministic=false``: autotuned); several runs one after the other.

Usage: python scripts/bench_ppo_update.py --out F.json [--rows 2048,8192] [--cudnn deterministic benchmark]
       [--updates 5] [--rounds 5]
"""
import argparse
import datetime
import json
import platform
import statistics

import torch

from rl_app.graphed_update import GraphedEpochs, prepare_optimizer, set_learning_rate
from rl_app.models import build_model
from rl_app.ppo import PPOBatch, ppo_update

HYPER = dict(clip_coef=0.1, clip_vloss=True, ent_coef=0.01, vf_coef=0.5, norm_adv=True, max_grad_norm=0.5)


def setup(rows: int, device: torch.device, on_device: bool):
    torch.manual_seed(0)
    model = build_model("atari", (4, 84, 84), 6, (), False).to(device)
    gen = torch.Generator(device=device).manual_seed(1)
    batch = PPOBatch(torch.randint(0, 256, (rows, 4, 84, 84), dtype=torch.uint8, device=device, generator=gen),
                     torch.randint(0, 6, (rows,), device=device, generator=gen),
                     -torch.rand(rows, device=device, generator=gen) - 1.0,
                     torch.randn(rows, device=device, generator=gen),
                     torch.randn(rows, device=device, generator=gen),
                     torch.randn(rows, device=device, generator=gen),
                     torch.rand(rows, device=device, generator=gen) > 0.05)
    optimizer = torch.optim.Adam(model.parameters(), lr=2.5e-4, eps=1e-5)
    prepare_optimizer(optimizer, on_device=on_device)
    return model, optimizer, batch, torch.Generator(device=device).manual_seed(2)


def make_update(variant: str, rows: int, args, device: torch.device):
    model, optimizer, batch, generator = setup(rows, device, on_device=variant != "eager_host_lr")
    graph = GraphedEpochs(device) if variant == "graph" else None
    lr = [2.5e-4]

    def update():
        lr[0] *= 0.999
        set_learning_rate(optimizer, lr[0])
        return ppo_update(model, optimizer, batch, num_minibatches=args.minibatches, update_epochs=args.epochs,
                          generator=generator, graph=graph, **HYPER)
    return update, model


def time_updates(update, updates: int, rounds: int) -> list:
    for _ in range(3):  # the graph's warm-up and capture, cuDNN's autotuning
        update()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(updates):
            update()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / updates)  # ms
    return per


def device_busy_ms(update) -> float:
    """The summed time of the kernels one update launches (torch.profiler), in ms."""
    update()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        update()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1e3


def max_weight_difference(rows: int, args, device: torch.device) -> float:
    finals = []
    for variant in ("eager", "graph"):
        update, model = make_update(variant, rows, args, device)
        for _ in range(4):
            update()
        finals.append([p.detach().clone() for p in model.parameters()])
    return max(float((a - b).abs().max()) for a, b in zip(*finals))


def set_cudnn(mode: str) -> None:
    """As rl_app.runtime.setup_process sets cuDNN for torch_deterministic true (``deterministic``) or false."""
    torch.backends.cudnn.deterministic = mode == "deterministic"
    torch.backends.cudnn.benchmark = mode == "benchmark"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--rows", default="2048,8192", help="comma-separated batch sizes (num_steps * num_envs)")
    ap.add_argument("--cudnn", nargs="+", default=["deterministic", "benchmark"],
                    choices=["deterministic", "benchmark"], help="cuDNN modes, timed one after the other")
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (CUDA graphs)")
    device = torch.device("cuda")
    res = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
           "torch": torch.__version__, "python": platform.python_version(), "cudnn": torch.backends.cudnn.version(),
           "minibatches": args.minibatches, "epochs": args.epochs, "updates": args.updates, "rounds": args.rounds,
           "rows": {}}
    for mode, rows in [(m, int(r)) for m in args.cudnn for r in args.rows.split(",")]:
        set_cudnn(mode)
        row = {"cudnn": mode, "graph_vs_eager_max_weight_diff": max_weight_difference(rows, args, device)}
        for variant in ("eager_host_lr", "eager", "graph"):
            update, _ = make_update(variant, rows, args, device)
            per = time_updates(update, args.updates, args.rounds)
            row[variant] = {"ms_per_update": statistics.median(per), "rounds_ms": per}
            if variant != "graph":
                row[variant]["device_busy_ms"] = device_busy_ms(update)
        row["graph_over_eager"] = row["graph"]["ms_per_update"] / row["eager"]["ms_per_update"]
        row["graph_over_eager_host_lr"] = row["graph"]["ms_per_update"] / row["eager_host_lr"]["ms_per_update"]
        res["rows"][f"{rows}/{mode}"] = row
        print(rows, mode, {k: (round(v["ms_per_update"], 2) if isinstance(v, dict) else v) for k, v in row.items()},
              flush=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
