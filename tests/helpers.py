"""Shared test utilities: compose the application's Hydra config without the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from rl_app.config import register_configs

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
ALGOS = ("ppo", "impala")
ENVS = ("cartpole", "pong", "breakout", "halfcheetah")

register_configs()


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``python train.py <overrides>`` would run with."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
