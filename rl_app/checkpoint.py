"""Checkpoints: model, optimizer, step counters, RNG states and the resolved config in one file; resuming."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch

from rl_app.config import ConfigError, resume_checkpoint_path

log = logging.getLogger(__name__)


def rng_state() -> Dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Dict[str, Any]) -> None:
    """Set the ``random``, NumPy, torch and (when both sides have it) CUDA RNG states saved by :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


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
    """Everything a checkpoint must hold to resume: the learner, the step counters and the trainer's own
    sampling generators (PPO's minibatch and action generator, each IMPALA actor's action generator)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    global_step: int = 0  # environment steps over all envs
    iteration: int = 0  # PPO iterations / IMPALA learner updates done
    wall_time_s: float = 0.0  # over all sessions of the run, resumed ones included
    generators: Dict[str, torch.Generator] = field(default_factory=dict)

    def state_dict(self) -> Dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step, "iteration": self.iteration, "wall_time_s": self.wall_time_s,
                "generators": {name: {"device": str(g.device), "state": g.get_state()}
                               for name, g in self.generators.items()}}

    def load_state_dict(self, payload: Dict[str, Any]) -> None:
        """Take over a checkpoint's learner, counters and generators. The optimizer keeps its own settings
        (learning rate, eps, ...: those of this run's config) and takes the checkpoint's moments; a generator
        saved on another device type, or not saved, keeps its fresh seed, with a warning."""
        self.model.load_state_dict(payload["model"])
        settings = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(payload["optimizer"])
        for group, own in zip(self.optimizer.param_groups, settings):
            group.update(own)
        self.global_step = int(payload["global_step"])
        self.iteration = int(payload["iteration"])
        self.wall_time_s = float(payload["wall_time_s"])
        saved = payload.get("generators", {})
        for name, generator in self.generators.items():
            entry = saved.get(name)
            if entry is None or torch.device(entry["device"]).type != generator.device.type:
                log.warning("resume: the checkpoint has no %s generator state for %s; it starts from the seed",
                            name, generator.device.type)
                continue
            generator.set_state(entry["state"])


# Settings the learner's shapes and meaning depend on: a checkpoint resumes only a run that agrees on them
# (algo.optimizer: IMPALA's; RMSprop's moments are not Adam's).
RESUME_MUST_MATCH = (("algo", "name"), ("algo", "optimizer"), ("env", "family"), ("env", "id"))


def load_resume(cfg: Any) -> Optional[Dict[str, Any]]:
    """The checkpoint that ``cfg.resume`` names, checked against ``cfg`` (``None`` without ``resume``).

    Raises ``ConfigError`` when the file is not a checkpoint, when its run used another algorithm or
    environment (:data:`RESUME_MUST_MATCH`), or when it has already trained ``total_timesteps`` or more (raise
    ``total_timesteps`` to train further). The payload gains ``path``, the file it was read from.
    """
    resume = cfg.get("resume")
    if resume is None:
        return None
    path = resume_checkpoint_path(resume)
    try:
        payload = load_checkpoint(path)
    except Exception as err:  # torch.load's errors for a file that is not a checkpoint vary by cause
        raise ConfigError(f"resume: {str(path)!r} is not a readable checkpoint ({type(err).__name__}: {err})")
    if not isinstance(payload, dict) or not {"model", "optimizer", "global_step", "config"} <= set(payload):
        raise ConfigError(f"resume: {str(path)!r} is not a checkpoint written by train.py")
    for group, key in RESUME_MUST_MATCH:
        saved, wanted = payload["config"][group].get(key), cfg[group].get(key)
        if saved != wanted:
            raise ConfigError(f"resume: the checkpoint's run has {group}.{key}={saved!r}, this one "
                              f"{group}.{key}={wanted!r}; a run resumes with the same algorithm, optimizer and "
                              f"environment")
    if payload["global_step"] >= cfg.total_timesteps:
        raise ConfigError(f"resume: the checkpoint has trained {payload['global_step']} environment steps, "
                          f"total_timesteps is {int(cfg.total_timesteps)}: raise total_timesteps to train further")
    payload["path"] = str(path)
    return payload


def resume_into(state: TrainState, payload: Dict[str, Any], stats: Any) -> None:
    """Continue the run of a checkpoint from :func:`load_resume`: its learner, counters, generators, RNG states
    and episode statistics into ``state`` and ``stats``; ``ConfigError`` if its network does not fit this one
    (settings that shape observations or the network changed)."""
    try:
        state.load_state_dict(payload)
    except (RuntimeError, KeyError, ValueError) as err:
        raise ConfigError(f"resume: the checkpoint's network or optimizer does not fit this config's (keep the "
                          f"settings that shape observations and the network): {err}") from None
    restore_rng_state(payload["rng"])
    stats.load_state_dict(payload["episode_stats"])
    log.info("resumed %s at global_step %d (iteration %d)", payload["path"], state.global_step, state.iteration)
