"""Entry point: ``python train.py algo=ppo env=pong`` (Hydra; see conf/ and README.md)."""

import sys

import hydra
from omegaconf import DictConfig

from rl_app.config import ConfigError, register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rl_app.run import run

    try:
        run(cfg)
    except ConfigError as err:
        # A bad setting is the user's to fix: say which one, without a traceback.
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
