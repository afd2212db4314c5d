"""Entry point: ``python train.py algo=ppo env=pong`` (Hydra; see conf/ and README.md)."""

import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rl_app.config import ConfigError, register_configs

register_configs()

# torchrun starts this script once per process (data-parallel PPO, rl_app/distributed.py): rank 0 makes the run
# directory, the other ranks write nothing (no directory, no .hydra/, no log file).
REPLICA_OVERRIDES = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none",
                     "hydra/hydra_logging=none")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rl_app.run import run
    from rl_app.runtime import STOP

    try:
        run(cfg)
    except ConfigError as err:
        # A bad setting is the user's to fix: say which one, without a traceback.
        rank = f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        print(f"error{rank}: {err}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra records the job as failed and goes on with the sweep's other jobs
        sys.exit(2)
    if STOP.signum is not None:  # stopped cleanly on a signal: checkpoint and summary are written
        run_dir = HydraConfig.get().runtime.output_dir
        print(f"stopped on {STOP.reason}: checkpoint and summary.json written in {run_dir}", file=sys.stderr)
        sys.exit(128 + STOP.signum)


if __name__ == "__main__":
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if {"-m", "--multirun"} & set(sys.argv[1:]):
            print("error: a -m sweep runs its jobs one after another in one process; start each job with "
                  "torchrun on its own", file=sys.stderr)
            sys.exit(2)
        if int(os.environ.get("RANK", "0")) > 0:
            sys.argv += REPLICA_OVERRIDES
    main()
