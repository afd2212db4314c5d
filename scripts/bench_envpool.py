"""EnvPool's stepping alone, as PPO's rollout drives it: how fast, and how much it varies from process to process.

Builds the envs of ``train.py algo=ppo <variant's overrides>`` (``rl_app.envs.EnvPoolAdapter``, observations kept
on the CPU), then sends uniformly random actions and waits for each step, for ``--seconds`` after a warm-up
second. Each repeat of each variant is a fresh process (variants interleaved), so a slow process start shows as
a slow repeat. Reports env steps per second (all envs together) per repeat. Writes JSON (machine, date,
versions, every repeat).

    python scripts/bench_envpool.py --seconds 8 --repeats 3 --out F.json [--variants pong pong_threads16 ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "pong": ["env=pong"],
    "pong_threads8": ["env=pong", "env.num_threads=8"],
    "pong_threads16": ["env=pong", "env.num_threads=16"],
    "pong_affinity0": ["env=pong", "+env.thread_affinity_offset=0"],
    "pong_64envs": ["env=pong", "env.num_envs=64"],
}


def step_for(overrides, seconds: float) -> dict:
    sys.path.insert(0, str(ROOT))  # rl_app and tests.helpers (compose_config)
    import numpy as np
    import torch

    from rl_app.envs import EnvPoolAdapter, space_shapes
    from tests.helpers import compose_config

    torch.set_num_threads(1)  # as train.py's default torch_threads
    cfg = compose_config(["algo=ppo", "logger=none", "device=cpu"] + list(overrides))
    envs = EnvPoolAdapter(cfg.env, seed=1, device=torch.device("cpu"))
    _, _, num_actions = space_shapes(envs)
    rng = np.random.default_rng(0)
    envs.reset()
    steps, start, t0 = 0, None, time.perf_counter()
    while True:
        now = time.perf_counter()
        if start is None and now - t0 >= 1.0:
            start, steps = now, 0
        if start is not None and now - start >= seconds:
            break
        envs.step(rng.integers(0, num_actions, size=envs.num_envs).astype(np.int32))
        steps += envs.num_envs
    envs.close()
    return {"env_steps": steps, "seconds": now - start, "sps": steps / (now - start), "num_envs": envs.num_envs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=sorted(VARIANTS),
                    help="env settings to time (VARIANTS in this file)")
    ap.add_argument("--seconds", type=float, default=8.0, help="timed seconds per repeat, after a warm-up second")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.seconds > 0 or args.repeats < 1:
        ap.error(f"--seconds must be > 0 and --repeats >= 1, got {args.seconds} and {args.repeats}")
    if args.child is not None:
        print(json.dumps(step_for(VARIANTS[args.child], args.seconds)))
        return
    import envpool
    import torch

    res = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                       "envpool": envpool.__version__, "date": dt.datetime.now(dt.timezone.utc).isoformat(
                           timespec="seconds")},
           "seconds": args.seconds, "repeats": args.repeats,
           "overrides": {v: VARIANTS[v] for v in args.variants}, "variants": {v: [] for v in args.variants}}
    args.out.write_text(json.dumps(res))  # an unwritable path fails now, not after the runs
    failed = 0
    for repeat in range(args.repeats):
        for variant in args.variants:
            done = subprocess.run([sys.executable, __file__, "--child", variant, "--seconds", str(args.seconds),
                                   "--out", str(args.out)], cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                res["variants"][variant].append({"error": done.stderr[-2000:]})
                print(variant, "failed:", done.stderr[-500:], flush=True)
                failed += 1
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            res["variants"][variant].append(row)
            print(f"repeat {repeat} {variant:16s} {row['sps']:9.0f} env steps/s", flush=True)
    args.out.write_text(json.dumps(res, indent=1))
    if failed:
        sys.exit(f"{failed} repeat(s) failed (their errors are in {args.out})")


if __name__ == "__main__":
    main()
