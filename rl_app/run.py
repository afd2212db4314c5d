"""Validate the composed config and dispatch to the trainer of ``algo.name``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig, OmegaConf

from rl_app.config import validate_config
from rl_app.distributed import check_launch
from rl_app.runtime import STOP


def run(cfg: DictConfig, run_dir: Optional[Path] = None) -> Dict[str, Any]:
    """Train as ``cfg`` says; artifacts go to ``run_dir`` (default: the Hydra run directory).

    SIGINT and SIGTERM stop the run at the end of the current iteration, with its checkpoint and summary
    (see :class:`rl_app.runtime.StopSignal`).
    """
    validate_config(cfg)
    check_launch(cfg)
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = Path(HydraConfig.get().runtime.output_dir)
    config_dict = OmegaConf.to_container(cfg, resolve=True)
    STOP.install()
    try:
        if cfg.algo.name == "ppo":
            from rl_app.ppo_trainer import train_ppo

            return train_ppo(cfg, Path(run_dir), config_dict)
        from rl_app.impala import train_impala

        return train_impala(cfg, Path(run_dir), config_dict)
    finally:
        STOP.restore()
