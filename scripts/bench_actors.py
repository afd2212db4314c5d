"""IMPALA actor throughput alone: synchronous against asynchronous EnvPool actors, no learner.

Builds the actors of ``train.py algo=impala <overrides>`` and lets their threads produce unrolls with one
fixed policy snapshot for a fixed wall-clock time, then reports env steps per second (all actors together)
and the time per 1000 steps spent in EnvPool and in inference. Each variant runs in its own process, so
EnvPool threads of one never compete with the next. Writes JSON (machine, date, versions, every variant).

    python scripts/bench_actors.py --seconds 12 --out benchmarks/results/actors-cpu.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, overrides): the README's table; "sync" rows leave algo.actor_env_batch_size at 0.
CARTPOLE_2x8 = ["env=cartpole"]
CARTPOLE_1x8 = ["env=cartpole", "algo.num_actor_threads=1", "env.num_envs=8", "algo.batch_size=8"]
PONG_4x16 = ["env=pong"]
PONG_2x16 = ["env=pong", "algo.num_actor_threads=2", "env.num_envs=32", "env.num_threads=1"]
PONG_1x16 = ["env=pong", "algo.num_actor_threads=1", "env.num_envs=16", "algo.batch_size=16"]
VARIANTS = [
    ("cartpole 2 actors x 8 envs, sync", CARTPOLE_2x8),
    ("cartpole 2 actors x 8 envs, B=4", CARTPOLE_2x8 + ["algo.actor_env_batch_size=4"]),
    ("cartpole 2 actors x 8 envs, B=2", CARTPOLE_2x8 + ["algo.actor_env_batch_size=2"]),
    ("cartpole 1 actor x 8 envs, sync", CARTPOLE_1x8),
    ("cartpole 1 actor x 8 envs, B=4", CARTPOLE_1x8 + ["algo.actor_env_batch_size=4"]),
    ("pong 4 actors x 16 envs (4 EnvPool threads each), sync", PONG_4x16),
    ("pong 4 actors x 16 envs (4 EnvPool threads each), B=8", PONG_4x16 + ["algo.actor_env_batch_size=8"]),
    ("pong 2 actors x 16 envs (1 EnvPool thread each), sync", PONG_2x16),
    ("pong 2 actors x 16 envs (1 EnvPool thread each), B=8", PONG_2x16 + ["algo.actor_env_batch_size=8"]),
    ("pong 1 actor x 16 envs (1 EnvPool thread), sync", PONG_1x16 + ["env.num_threads=1"]),
    ("pong 1 actor x 16 envs (1 EnvPool thread), B=8", PONG_1x16 + ["env.num_threads=1", "algo.actor_env_batch_size=8"]),
    ("pong 1 actor x 16 envs (2 EnvPool threads), sync", PONG_1x16 + ["env.num_threads=2"]),
    ("pong 1 actor x 16 envs (2 EnvPool threads), B=8", PONG_1x16 + ["env.num_threads=2", "algo.actor_env_batch_size=8"]),
]


def measure(overrides: list, seconds: float) -> dict:
    """Actor threads of the composed config, unrolling for ``seconds`` after one warm-up unroll each."""
    import torch

    sys.path.insert(0, str(ROOT))
    from rl_app.config import validate_config
    from rl_app.impala import build_actors, model_for
    from rl_app.impala_actor import PolicyStore, SharedEpisodeStats
    from rl_app.runtime import setup_process
    from tests.helpers import compose_config

    cfg = compose_config(["algo=impala", "logger=none", "device=cpu"] + overrides)
    validate_config(cfg)
    setup_process(cfg)
    per_actor = cfg.env.num_envs // cfg.algo.num_actor_threads
    actors = build_actors(cfg, per_actor, SharedEpisodeStats(cfg.env.num_envs), torch.device("cpu"))
    store = PolicyStore(model_for(cfg, actors[0].envs))
    length = cfg.algo.unroll_length
    for actor in actors:
        actor.unroll(length, store)
    stop = threading.Event()

    def loop(actor):
        while not stop.is_set():
            actor.unroll(length, store)

    before = [(a.steps, a.env_s, a.inference_s) for a in actors]
    start = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(a,)) for a in actors]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    steps = sum(a.steps - b[0] for a, b in zip(actors, before))
    env_s = sum(a.env_s - b[1] for a, b in zip(actors, before))
    inference_s = sum(a.inference_s - b[2] for a, b in zip(actors, before))
    for actor in actors:
        actor.close()
    return {"sps": steps / elapsed, "steps": steps, "seconds": elapsed,
            "env_s_per_1000_steps": 1000 * env_s / steps, "inference_s_per_1000_steps": 1000 * inference_s / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "actors-cpu.json")
    parser.add_argument("--one", nargs="*", help=argparse.SUPPRESS)  # child process: one variant's overrides
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.seconds)))
        return
    import torch

    results = []
    for name, overrides in VARIANTS:
        proc = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--one", *overrides],
                              cwd=ROOT, capture_output=True, text=True)
        row = {"variant": name, "overrides": overrides}
        if proc.returncode == 0:
            row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"{name:60s} {row['sps']:9,.0f} SPS", flush=True)
        else:
            row["error"] = proc.stderr[-2000:]
            print(f"{name:60s} ERROR", flush=True)
        results.append(row)
    info = {"machine": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "seconds": args.seconds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**info, "results": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
