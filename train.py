"""Entry point: ``python train.py algo=ppo env=pong`` (Hydra; see conf/ and README.md)."""

import hydra
from omegaconf import DictConfig

from rl_app.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rl_app.run import run

    run(cfg)


if __name__ == "__main__":
    main()
