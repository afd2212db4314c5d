"""Checkpoints: model, optimizer, step counters, RNG states and the resolved config in one file."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch


def rng_state() -> Dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def save_checkpoint(path: Path, payload: Dict[str, Any]) -> Path:
    """Write ``payload`` (tensors and plain containers) to ``path`` atomically; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: Path, map_location: Any = "cpu") -> Dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (it holds RNG states, so not weights-only)."""
    return torch.load(Path(path), map_location=map_location, weights_only=False)


@dataclass
class TrainState:
    """Everything a checkpoint must hold to resume: the learner and the step counters."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    global_step: int = 0  # environment steps over all envs
    iteration: int = 0
    wall_time_s: float = 0.0

    def state_dict(self) -> Dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step, "iteration": self.iteration, "wall_time_s": self.wall_time_s}
