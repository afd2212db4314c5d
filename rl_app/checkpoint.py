"""Checkpoints: model, optimizer, step counters, RNG states and the resolved config in one file; resuming."""

from __future__ import annotations

import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

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
    resumed_from: Optional[str] = None  # the checkpoint this session started from (not saved)
    _session: Tuple[float, float] = (0.0, 0.0)  # (perf_counter at this session's start, wall_time_s before it)

    def state_dict(self) -> Dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step, "iteration": self.iteration, "wall_time_s": self.wall_time_s,
                "generators": {name: {"device": str(g.device), "state": g.get_state()}
                               for name, g in self.generators.items()}}

    def load_state_dict(self, payload: Dict[str, Any], generators: bool = True) -> None:
        """Take over a checkpoint's learner, counters and (``generators``) generators. The optimizer keeps its
        own settings (learning rate, eps, ...: those of this run's config) and takes the checkpoint's moments;
        a generator saved on another device type, or not saved (an actor added, an older checkpoint), keeps its
        fresh seed, with a warning."""
        self.model.load_state_dict(payload["model"])
        settings = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(payload["optimizer"])
        for group, own in zip(self.optimizer.param_groups, settings):
            group.update(own)
        self.global_step = int(payload["global_step"])
        self.iteration = int(payload["iteration"])
        self.wall_time_s = float(payload["wall_time_s"])
        if not generators:
            return
        saved = payload.get("generators", {})
        for name, generator in self.generators.items():
            entry = saved.get(name)
            if entry is None:
                log.warning("resume: the checkpoint has no state of the %s generator; it starts from the seed", name)
            elif torch.device(entry["device"]).type != generator.device.type:
                log.warning("resume: the checkpoint's %s generator ran on %s, this one runs on %s; it starts from "
                            "the seed", name, torch.device(entry["device"]).type, generator.device.type)
            else:
                generator.set_state(entry["state"])

    def plan(self, total_timesteps: float, steps_per_iteration: int) -> Tuple[int, int]:
        """``(last iteration, planned steps)``: the iterations of ``steps_per_iteration`` environment steps from
        the ones done up to the first that reaches ``total_timesteps``, and the steps the run will then have taken.
        The learning rate anneals over the planned steps, so a resume that changes an iteration's size keeps it
        continuous (for a fresh run this is the usual ``1 - (iteration - 1) / num_iterations``)."""
        left = math.ceil((total_timesteps - self.global_step) / steps_per_iteration)  # >= 1: load_resume checked
        return self.iteration + left, self.global_step + left * steps_per_iteration

    def start_session(self) -> float:
        """Mark this process's start (``time.perf_counter()``, returned); ``wall_time_s`` goes on from the
        earlier sessions' total."""
        self._session = (time.perf_counter(), self.wall_time_s)
        return self._session[0]

    def clock(self, now: float) -> float:
        """Set ``wall_time_s`` at ``now`` (``time.perf_counter()``); return this session's seconds."""
        start, earlier = self._session
        self.wall_time_s = earlier + now - start
        return now - start


# Settings the learner's shapes and meaning depend on: a checkpoint resumes only a run that agrees on them
# (algo.optimizer: IMPALA's; RMSprop's moments are not Adam's).
RESUME_MUST_MATCH = (("algo", "name"), ("algo", "optimizer"), ("env", "family"), ("env", "id"))
# Settings a resumed run is expected to change: not reported as differences from the checkpoint's run.
RESUME_MAY_CHANGE = ("resume", "total_timesteps", "time_limit_s", "log_interval_s", "checkpoint_interval_s",
                     "progress_bar", "logger.", "algo.env_groups", "algo.cuda_graph_act",
                     "algo.cuda_graph_update")
# What a checkpoint written by the trainers holds, and what its parts hold.
CHECKPOINT_KEYS = ("model", "optimizer", "global_step", "iteration", "wall_time_s", "config", "rng", "episode_stats")
CHECKPOINT_PART_KEYS = {"config": ("algo", "env", "seed"), "rng": ("python", "numpy", "torch"),
                        "episode_stats": ("finished_returns", "finished_lengths", "episodes")}


def _checkpoint_gaps(payload: Any) -> List[str]:
    """What ``payload`` lacks of a checkpoint written by the trainers (``[]`` for a complete one)."""
    if not isinstance(payload, dict):
        return [f"everything: it holds a {type(payload).__name__}"]
    gaps = [key for key in CHECKPOINT_KEYS if key not in payload]
    for part, keys in CHECKPOINT_PART_KEYS.items():
        if part in payload:
            held = payload[part] if isinstance(payload[part], dict) else {}
            gaps += [f"{part}.{key}" for key in keys if key not in held]
    config = payload.get("config")
    if isinstance(config, dict):
        gaps += [f"config.{group} (a mapping)" for group in ("algo", "env")
                 if group in config and not isinstance(config[group], dict)]
    gaps += [f"{key} (a number)" for key in ("global_step", "iteration", "wall_time_s")
             if key in payload and not isinstance(payload[key], (int, float))]
    generators = payload.get("generators", {})
    if not isinstance(generators, dict) or not all(
            isinstance(entry, dict) and {"device", "state"} <= set(entry) for entry in generators.values()):
        gaps.append("generators.<name>.device/state")
    return gaps


def read_checkpoint(path: Path, key: str, map_location: Any = "cpu") -> Dict[str, Any]:
    """The checkpoint file at ``path``, checked to be one the trainers wrote; ``ConfigError`` naming the setting
    ``key`` that gave the path when it is unreadable or lacks a part (:func:`_checkpoint_gaps`)."""
    try:
        payload = load_checkpoint(path, map_location=map_location)
    except Exception as err:  # torch.load's errors for a file that is not a checkpoint vary by cause
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"{key}: {str(path)!r} is not a readable checkpoint (truncated, or not written by "
                          f"train.py: {detail})") from None
    gaps = _checkpoint_gaps(payload)
    if gaps:
        raise ConfigError(f"{key}: {str(path)!r} is not a checkpoint written by train.py (it lacks "
                          f"{', '.join(gaps)})")
    return payload


def load_resume(cfg: Any) -> Optional[Dict[str, Any]]:
    """The checkpoint that ``cfg.resume`` names, checked against ``cfg`` (``None`` without ``resume``).

    Raises ``ConfigError`` when the file is not a checkpoint written by the trainers, when its run used
    another algorithm, optimizer or environment (:data:`RESUME_MUST_MATCH`), or when it has already trained
    ``total_timesteps`` or more (raise ``total_timesteps`` to train further). Needs no environment, so a sweep
    runs it for every job before the first starts. The payload gains ``path``, the absolute path of the file.
    """
    resume = cfg.get("resume")
    if resume is None:
        return None
    path = resume_checkpoint_path(resume)
    payload = read_checkpoint(path, "resume")
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


_ABSENT = object()  # a setting that one of two configs lacks


def _flat(node: Any, prefix: str = "") -> Dict[str, Any]:
    """``{"algo.gamma": 0.99, ...}``: the leaves of a nested config dict under their dotted keys."""
    if not isinstance(node, dict):
        return {prefix[:-1]: node}
    return {key: value for name, child in node.items() for key, value in _flat(child, f"{prefix}{name}.").items()}


def config_differences(saved: Dict[str, Any], current: Dict[str, Any]) -> List[str]:
    """``key (checkpoint X, now Y)`` for every setting of two resolved configs that differs (``-`` where one
    lacks it), but those a resumed run is expected to change (:data:`RESUME_MAY_CHANGE`)."""
    old, new = _flat(saved), _flat(current)

    def shown(value: Any) -> str:
        return "-" if value is _ABSENT else repr(value)

    return [f"{key} (checkpoint {shown(old.get(key, _ABSENT))}, now {shown(new.get(key, _ABSENT))})"
            for key in sorted(set(old) | set(new))
            if old.get(key, _ABSENT) != new.get(key, _ABSENT) and not key.startswith(RESUME_MAY_CHANGE)]


def _network_misfit(model: torch.nn.Module, saved: Dict[str, Any]) -> List[str]:
    """The parameters and buffers whose names or shapes differ between ``model`` and a saved state dict."""
    own = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    theirs = {name: tuple(t.shape) for name, t in saved.items() if torch.is_tensor(t)}
    return [f"{name} {theirs.get(name, 'absent')} in the checkpoint, {own.get(name, 'absent')} here"
            for name in sorted(set(own) | set(theirs)) if own.get(name) != theirs.get(name)]


def resume_into(state: TrainState, payload: Dict[str, Any], stats: Any, config_dict: Dict[str, Any],
                learner_only: bool = False) -> None:
    """Continue the run of a checkpoint from :func:`load_resume` with this run's resolved config
    ``config_dict``: the checkpoint's learner, counters and episode statistics into ``state`` and ``stats``,
    and its RNG states and generators unless ``seed`` differs from its run's (then this run keeps those seeded
    from the new ``seed``: a fork). ``learner_only`` (a data-parallel replica other than rank 0, whose random
    states and episodes the checkpoint does not hold) takes the learner and counters only. Warns about every
    other setting that differs from the checkpoint's run (this run's apply). ``ConfigError`` if the checkpoint's
    network does not fit this one, or if its contents are damaged (a file edited by hand)."""
    misfit = _network_misfit(state.model, payload["model"]) if isinstance(payload["model"], dict) else ["all"]
    if misfit:
        raise ConfigError(f"resume: the checkpoint's network does not fit this config's: a setting that shapes "
                          f"observations or the network differs (e.g. env.normalize_obs, env.stack_num, "
                          f"env.img_height): {'; '.join(misfit[:4])}{' ...' if len(misfit) > 4 else ''}")
    same_seed = payload["config"].get("seed") == config_dict["seed"]
    try:
        state.load_state_dict(payload, generators=same_seed and not learner_only)
        if not learner_only:
            if same_seed:
                restore_rng_state(payload["rng"])
            stats.load_state_dict(payload["episode_stats"])
    except Exception as err:  # noqa: BLE001 - shapes and keys are checked: what fails here is a damaged file
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"resume: the checkpoint {payload['path']!r} holds damaged contents ({detail})") from None
    state.resumed_from = payload["path"]
    if learner_only:
        return  # rank 0 reports
    if not same_seed:
        log.info("resume: seed=%s differs from the checkpoint's seed=%s: random states start from the new seed",
                 config_dict["seed"], payload["config"].get("seed"))
    differences = config_differences(payload["config"], config_dict)
    if differences:
        log.warning("resume: settings that differ from the checkpoint's run (this run's apply): %s",
                    "; ".join(differences))
    log.info("resumed %s at global_step %d (iteration %d)", payload["path"], state.global_step, state.iteration)
