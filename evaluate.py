"""Entry point: ``python evaluate.py checkpoint=<run dir or .pt>`` (Hydra; conf/evaluate.yaml, README.md)."""

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rl_app.config import ConfigError, register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    from rl_app.evaluation import evaluate

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = evaluate(cfg, out_dir)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra records the job as failed and goes on with the sweep's other jobs
        sys.exit(2)
    video = f", {out_dir / result['video']}" if result["video"] else ""
    kind = "greedy" if result["greedy"] else "sampled"
    if result["episodes"]:
        print(f"{result['episodes']} episodes of {result['env_id']} ({kind} actions, {result['global_step']} "
              f"training steps): return {result['episodic_return_mean']:.2f} +- {result['episodic_return_std']:.2f} "
              f"(min {result['episodic_return_min']:.2f}, max {result['episodic_return_max']:.2f}); "
              f"{out_dir / 'eval.json'}{video}")
    if result["stopped_early"]:
        from rl_app.runtime import STOP

        print(f"stopped on {result['stop_reason']} after {result['episodes']} of {cfg.episodes} episodes: "
              f"{out_dir / 'eval.json'}", file=sys.stderr)
        sys.exit(128 + STOP.signum)


if __name__ == "__main__":
    main()
