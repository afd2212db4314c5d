"""Entry point: ``python train.py algo=ppo env=pong`` (Hydra; see conf/ and README.md)."""

import re
import sys

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rl_app.config import ConfigError, check_tuning_overrides, register_configs, torchrun_int

register_configs()

# torchrun starts this script once per process (data-parallel PPO, rl_app/distributed.py): rank 0 makes the run
# directory, the other ranks write nothing (no directory, no .hydra/, no log file), so they drop the command line's
# settings of those (a job_logging key would not exist in `none`) and take these.
REPLICA_OVERRIDES = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none",
                     "hydra/hydra_logging=none")
REPLICA_DROPS = re.compile(r"\+{0,2}hydra(\.run\.dir|\.output_subdir|[./]job_logging|[./]hydra_logging)\b")
SWEEP_UNDER_TORCHRUN = ("a -m sweep runs its jobs one after another in one process; start each job with torchrun "
                        "on its own")


def _torchrun_int(name: str) -> int:
    """torchrun's ``WORLD_SIZE`` / ``RANK`` (1 / 0 when unset). A malformed value reads as unset here, before
    Hydra starts; the trainer then stops on it with a ConfigError (rl_app.distributed.Replicas.from_environment)."""
    default = 1 if name == "WORLD_SIZE" else 0
    try:
        return torchrun_int(name, default)
    except ConfigError:
        return default


def replica_argv(argv):
    """The command line of a rank > 0: ``argv`` without settings of what Hydra writes, ``REPLICA_OVERRIDES`` put
    right after the last override (after an option such as ``--cfg job`` they would start a second run of
    overrides, which Hydra's argument parser rejects)."""
    args = [arg for arg in argv[1:] if not REPLICA_DROPS.match(arg)]
    last = max((i for i, arg in enumerate(args) if "=" in arg and not arg.startswith("-")), default=len(args) - 1)
    return [argv[0], *args[:last + 1], *REPLICA_OVERRIDES, *args[last + 1:]]


def _asks_for_sweep(args) -> bool:
    """``-m`` / ``--multirun`` or a ``hydra.mode=MULTIRUN`` override on the command line."""
    return any(arg in ("-m", "--multirun") or re.fullmatch(r"\+{0,2}hydra\.mode=multirun", arg.strip().lower())
               for arg in args)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rl_app.run import run
    from rl_app.runtime import STOP

    under_torchrun = _torchrun_int("WORLD_SIZE") > 1
    try:
        if under_torchrun and HydraConfig.get().mode == RunMode.MULTIRUN:  # a sweep the config itself asks for
            raise ConfigError(SWEEP_UNDER_TORCHRUN)
        overrides = OmegaConf.to_container(HydraConfig.get().overrides, resolve=False)  # ${algo} stays as written
        check_tuning_overrides(overrides["task"], GlobalHydra.instance().config_loader().get_group_options(
            "tuning", config_name=HydraConfig.get().job.config_name, overrides=overrides["task"] + overrides["hydra"]))
        run(cfg)
    except ConfigError as err:
        # A bad setting is the user's to fix: say which one, without a traceback.
        where = f" (rank {_torchrun_int('RANK')})" if under_torchrun else ""
        print(f"error{where}: {err}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN and not under_torchrun:
            raise  # Hydra records the job as failed and goes on with the sweep's other jobs
        sys.exit(2)
    if STOP.signum is not None:  # stopped cleanly on a signal: checkpoint and summary are written
        if _torchrun_int("RANK") == 0:  # by rank 0 alone under torchrun
            run_dir = HydraConfig.get().runtime.output_dir
            print(f"stopped on {STOP.reason}: checkpoint and summary.json written in {run_dir}", file=sys.stderr)
        sys.exit(128 + STOP.signum)


if __name__ == "__main__":
    if _torchrun_int("WORLD_SIZE") > 1:
        if _asks_for_sweep(sys.argv[1:]):
            print(f"error: {SWEEP_UNDER_TORCHRUN}", file=sys.stderr)
            sys.exit(2)
        if _torchrun_int("RANK") > 0:
            sys.argv = replica_argv(sys.argv)
    main()
