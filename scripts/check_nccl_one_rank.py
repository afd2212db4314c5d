"""Data-parallel PPO's NCCL path on a machine with one GPU: every collective with a world of one.

NCCL needs a GPU per rank, so with one GPU the collectives cannot be run between two processes. This forces
``Replicas.enabled`` on for a single process (WORLD_SIZE=1) and runs (1) each collective of
``rl_app.distributed.Replicas`` on CUDA tensors through an NCCL process group (and the gloo control group), then
(2) ``train.py`` PPO on CartPole with ``device=cuda`` through the same path: the broadcast, the gradient all-reduce
of every minibatch, the observation-norm gather (``env.normalize_obs=true``), the averaged KL (``algo.target_kl``),
the loss averages at each log, the sync check on checkpoints and the gloo votes. It checks placement and dtypes
(what a CPU test with gloo cannot), not transport between GPUs. Writes a JSON summary.

Usage: python scripts/check_nccl_one_rank.py --out F.json [--run-dir /tmp/nccl1]
"""
import argparse
import json
import os
import runpy
import sys

import torch

os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=os.environ.get("MASTER_PORT", "29561"))

import rl_app.distributed as distributed  # noqa: E402

distributed.Replicas.enabled = property(lambda self: True)  # a world of one, through every collective


def collectives() -> dict:
    import torch.distributed as dist

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    r = distributed.Replicas(rank=0, world_size=1, local_rank=0)
    r.start(dev)
    out = {"backend": dist.get_backend(), "control_backend": dist.get_backend(r._control)}
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(dev)
    net.register_buffer("count", torch.tensor(5.0, device=dev))
    before = [p.detach().clone() for p in net.parameters()]
    r.broadcast_module(net)
    out["broadcast_keeps_weights"] = all(torch.equal(a, b) for a, b in zip(before, net.parameters()))
    for i, p in enumerate(net.parameters()):
        p.grad = torch.full_like(p, float(i + 1))
    r.average_gradients(net.parameters())
    out["grads"] = [float(p.grad.unique()) for p in net.parameters()]
    out["average"] = r.average(torch.tensor([2.0, 4.0], device=dev)).tolist()
    out["gather_shape"] = list(r.gather(torch.ones(2, 3, device=dev)).shape)
    out["gather_float64"] = r.gather(torch.tensor([1.5], dtype=torch.float64, device=dev)).tolist()
    r.check_in_sync(net)
    out["in_sync"] = True
    out["max"] = r.max([1, 0, 3])
    out["together"] = r.together(lambda: "made")
    out["objects"] = r.gather_objects({"a": 1})
    r.close()
    out["closed"] = not dist.is_initialized()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-dir", default="/tmp/nccl_one_rank")
    args = ap.parse_args()
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "collectives": collectives()}
    sys.argv = ["train.py", "algo=ppo", "env=cartpole", "device=cuda", "logger=none", "progress_bar=false",
                "env.normalize_obs=true", "algo.target_kl=0.5", "total_timesteps=8192", "env.num_envs=8",
                "algo.num_steps=16", "log_interval_s=0.2", "checkpoint_interval_s=0.5", f"hydra.run.dir={args.run_dir}"]
    try:
        runpy.run_path("train.py", run_name="__main__")
        result["train_exit"] = 0
    except SystemExit as exc:
        result["train_exit"] = exc.code
    summary = os.path.join(args.run_dir, "summary.json")
    result["summary"] = json.load(open(summary)) if os.path.exists(summary) else None
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
