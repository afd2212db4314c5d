"""End-to-end training throughput: PPO and IMPALA side by side, each run for a fixed wall-clock budget.

Runs ``train.py`` once per variant (a subprocess each, so every run starts cold and alone), reads the run's
``summary.json`` and last ``metrics.jsonl`` line, and writes the raw numbers with the machine, date and
versions to ``benchmarks/results/training-<gpu>.json`` plus a markdown table.

    python scripts/bench_training.py --time-limit 240 --variants ppo_pong impala_pong
    python scripts/bench_training.py --time-limit 75 --variants ppo_pong --nproc 1 2   # one process, then torchrun x2
    python scripts/bench_training.py --variants ppo_pong ppo_pong_groups2 ppo_pong ppo_pong_groups2 --extra env.num_envs=32
    python scripts/bench_training.py --time-limit 50 --variants ppo_pong_eager_act ppo_pong_graph ppo_pong_eager_act ppo_pong_graph

``--extra`` overrides go to every run. The table's "rollout SPS" is the env steps of a PPO run over the time it spent
in its rollouts (``time/rollout_s``, summed over the log intervals): the rate of the rollout phase alone (under
torchrun: every process's steps over rank 0's time; "-" for IMPALA, whose actors and learner overlap).

With ``--nproc K`` (K > 1) a variant runs as data-parallel PPO under ``torchrun --standalone --nproc_per_node=K``
(one GPU per process), named ``<variant>_x<K>``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "ppo_pong": ["algo=ppo", "env=pong"],
    "ppo_pong_groups2": ["algo=ppo", "env=pong", "algo.env_groups=2"],
    "ppo_pong_eager_act": ["algo=ppo", "env=pong", "algo.cuda_graph_act=false"],
    "ppo_pong_graph": ["algo=ppo", "env=pong", "algo.cuda_graph_act=true"],
    "ppo_pong_graph_groups2": ["algo=ppo", "env=pong", "algo.cuda_graph_act=true", "algo.env_groups=2"],
    "ppo_pong_eager_update": ["algo=ppo", "env=pong", "algo.cuda_graph_update=false"],
    "ppo_pong_graph_update": ["algo=ppo", "env=pong", "algo.cuda_graph_update=true"],
    "ppo_pong_graph_update_groups2": ["algo=ppo", "env=pong", "algo.cuda_graph_update=true", "algo.env_groups=2"],
    "impala_pong": ["algo=impala", "env=pong"],
    "impala_pong_eager_act": ["algo=impala", "env=pong", "algo.cuda_graph_act=false"],
    "impala_pong_graph": ["algo=impala", "env=pong", "algo.cuda_graph_act=true"],
    "ppo_cartpole": ["algo=ppo", "env=cartpole"],
    "ppo_cartpole_groups2": ["algo=ppo", "env=cartpole", "algo.env_groups=2"],
    "impala_cartpole": ["algo=impala", "env=cartpole"],
}
PHASES = ("time/env_s", "time/inference_s", "time/credit_assignment_s", "time/update_s")


def machine() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return info


def run_variant(name: str, overrides: list, time_limit: float, device: str, workdir: Path, nproc: int = 1) -> dict:
    run_dir, repeat = workdir / name, 1
    while run_dir.exists():  # a variant listed twice (A/B/A/B), or an earlier invocation's: a directory per run
        repeat += 1
        run_dir = workdir / f"{name}_run{repeat}"
    launcher = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                                   if nproc > 1 else [])
    cmd = [*launcher, "train.py", *overrides, f"device={device}", "logger=none", "progress_bar=false",
           f"time_limit_s={time_limit}", "total_timesteps=1e9", "log_interval_s=10", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=time_limit + 300)
    result = {"variant": name, "command": " ".join(cmd[1:]), "returncode": proc.returncode,
              "process_wall_s": round(time.perf_counter() - start, 1)}
    if proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-3000:]
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        result["summary"] = json.loads(summary_path.read_text())
    metrics_path = run_dir / "metrics.jsonl"
    if metrics_path.exists():
        lines = metrics_path.read_text().splitlines()
        result["metrics"] = [json.loads(line) for line in lines]
    return result


def rollout_sps(metrics: list) -> str:
    """A PPO run's env steps over the seconds its rollouts took, summed over the log intervals; "-" without them."""
    seconds = sum(m.get("time/rollout_s", 0.0) for m in metrics)
    if seconds <= 0:
        return "-"
    return f"{metrics[-1]['global_step'] / seconds:,.0f}"  # the first interval starts at step 0


def table(results: list) -> str:
    rows = ["| variant | steps | SPS | rollout SPS | return (last 100) | episodes | env / inference / credit / update "
            "(s, last interval) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        s = r.get("summary", {})
        last = (r.get("metrics") or [{}])[-1]
        phases = " / ".join(f"{last.get(p, float('nan')):.2f}" for p in PHASES)
        ret = s.get("episodic_return_mean")
        rows.append(f"| {r['variant']} | {s.get('global_step', '-'):,} | {s.get('sps', 0):,.0f} | "
                    f"{rollout_sps(r.get('metrics') or [])} | {'-' if ret is None else f'{ret:.2f}'} | "
                    f"{s.get('episodes', '-')} | {phases} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["ppo_pong", "impala_pong"], choices=sorted(VARIANTS))
    parser.add_argument("--time-limit", type=float, default=240.0, help="wall-clock seconds per run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_training"))
    parser.add_argument("--nproc", type=int, nargs="+", default=[1],
                        help="processes per variant (> 1: torchrun, data-parallel PPO); each count is one run")
    parser.add_argument("--extra", nargs="*", default=[], help="overrides added to every run (e.g. env.num_envs=32)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/...)")
    args = parser.parse_args()

    info = machine()
    results = [run_variant(v if n == 1 else f"{v}_x{n}", VARIANTS[v] + args.extra, args.time_limit, args.device,
                           args.workdir, n) for v in args.variants for n in args.nproc]
    slug = re.sub(r"[^a-z0-9]+", "-", info["gpu"].lower()).strip("-")
    out = args.out or ROOT / "benchmarks" / "results" / f"training-{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "time_limit_s": args.time_limit, "results": results}, indent=1))
    print(f"{info['gpu']}  {info['date']}  torch {info['torch']}  triton {info['triton']}  {info['cpu_count']} CPUs")
    print(table(results))
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
