"""What a run leaves behind: ``metrics.jsonl``, ``summary.json``, the W&B run, console progress and phase timing.

All writers take plain Python numbers; the trainer reads its device tensors once per log interval.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from rl_app.config import ConfigError

# "rollout" is PPO's whole rollout phase: its "env" and "inference" time and the storing of the rows.
PHASES = ("rollout", "env", "inference", "credit_assignment", "update")
log = logging.getLogger("rl_app")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json_atomic(path: Path, payload: Dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` through a temporary file so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({k: _jsonable(v) for k, v in payload.items()}, indent=2) + "\n")
    os.replace(tmp, path)


class PhaseTimer:
    """Seconds spent in each phase of the training loop.

    Host phases use the wall clock. Device phases (``device=True``) on CUDA are timed with CUDA events, read
    only in :meth:`drain` at a log interval, so timing adds no sync to the hot loop.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.seconds: Dict[str, float] = defaultdict(float)
        self._events: Dict[str, List[Tuple[Any, Any]]] = defaultdict(list)

    @contextlib.contextmanager
    def phase(self, name: str, device: bool = False) -> Iterator[None]:
        if self.cuda and device:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events[name].append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self.seconds[name] += time.perf_counter() - t0

    def drain(self) -> Dict[str, float]:
        """Totals since the last call, in seconds, for every phase in :data:`PHASES`."""
        for name, pairs in self._events.items():
            if pairs:
                pairs[-1][1].synchronize()
                self.seconds[name] += sum(s.elapsed_time(e) for s, e in pairs) / 1000.0
                pairs.clear()
        totals = {name: self.seconds.get(name, 0.0) for name in PHASES}
        self.seconds.clear()
        return totals


def start_wandb(logger_cfg: Any, run_dir: Path, config: Dict[str, Any], name: str, job_type: Optional[str] = None):
    """A W&B run as ``logger_cfg`` (a :class:`rl_app.config.WandbLoggerConfig`) says, its files under ``run_dir``.

    Raises ``ConfigError`` naming the logger settings when W&B refuses them or cannot reach its server."""
    import wandb

    try:
        return wandb.init(
            project=logger_cfg.project, entity=logger_cfg.entity, group=logger_cfg.group,
            tags=list(logger_cfg.tags), mode=logger_cfg.mode, dir=str(run_dir), config=config, name=name,
            job_type=job_type, settings=wandb.Settings(console="off", quiet=True),
        )
    except wandb.errors.Error as err:
        # wandb rejects its settings (a missing login, a bad project name) or cannot reach its server
        # before any step: the user's to fix
        if "api key" in str(err).lower():
            hint = ("; logger.mode='online' needs a W&B login (`wandb login` or WANDB_API_KEY), "
                    "logger.mode=offline logs without one")
        elif isinstance(err, (wandb.errors.CommError, wandb.errors.AuthenticationError)):
            hint = "; logger.mode=offline logs without a connection (`wandb sync <run dir>/wandb` uploads it later)"
        else:
            hint = ""
        raise ConfigError(f"W&B could not start a run with logger.mode={logger_cfg.mode!r}, "
                          f"logger.project={logger_cfg.project!r}, logger.entity={logger_cfg.entity!r}: "
                          f"{' '.join(str(err).split())}{hint}") from err


class RunLogger:
    """Writes metrics to ``metrics.jsonl``, W&B and the console, and keeps ``summary.json`` current."""

    def __init__(self, cfg: Any, run_dir: Path, total_steps: int, config_dict: Dict[str, Any],
                 initial_step: int = 0):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.summary_path = self.run_dir / "summary.json"
        self.wandb_run = None
        if cfg.logger.name == "wandb":
            self.wandb_run = self._init_wandb(cfg, config_dict)
        earlier = [path for path in (self.metrics_path, self.summary_path, self.run_dir / "checkpoints" / "last.pt")
                   if path.exists()]
        self.moved: Dict[str, str] = {}  # absolute path of an earlier run's file -> where it was moved
        if earlier:
            # A directory given again holds this run's files only, so nothing of the earlier run is read as this
            # one's; the earlier files are kept aside, not lost.
            kept = self.run_dir / f"earlier-run-{datetime.now():%Y%m%d-%H%M%S-%f}-{os.getpid()}"
            kept.mkdir()
            for path in earlier:
                self.moved[str(path.resolve())] = str((kept / path.name).resolve())
                path.rename(kept / path.name)
            log.warning("%s held an earlier run's %s: moved to %s (give each run its own hydra.run.dir)",
                        self.run_dir, ", ".join(path.name for path in earlier), kept.name)
        self._metrics_file = open(self.metrics_path, "w", buffering=1)
        self.progress = None
        self._redirect = contextlib.ExitStack()
        if cfg.progress_bar:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            # disable=None: no bar when the console is not a terminal (a redirected log stays readable).
            self.progress = tqdm(total=total_steps, initial=initial_step, unit="step", unit_scale=True, dynamic_ncols=True,
                                 mininterval=1.0, disable=None)
            # Console log lines go through tqdm so they print above the bar instead of through it.
            self._redirect.enter_context(logging_redirect_tqdm())

    def _init_wandb(self, cfg: Any, config_dict: Dict[str, Any]):
        run = start_wandb(cfg.logger, self.run_dir, config_dict, f"{cfg.algo.name}_{cfg.env.id}_s{cfg.seed}_"
                                                                 f"{self.run_dir.name}")
        run.define_metric("global_step")
        run.define_metric("*", step_metric="global_step")
        return run

    def advance(self, steps: int, sps: float, episodic_return: Optional[float]) -> None:
        """Move the progress bar (host numbers only)."""
        if self.progress is not None:
            ret = "-" if episodic_return is None else f"{episodic_return:.1f}"
            self.progress.set_postfix_str(f"sps={sps:,.0f} return={ret}", refresh=False)
            self.progress.update(steps)

    def log(self, metrics: Dict[str, Any]) -> None:
        """One log interval: a JSON line, a W&B point (x-axis ``global_step``) and a console line.

        Raises ``FloatingPointError`` after writing the line if a loss is nan or inf: the weights are lost,
        and a run that goes on would only train on NaN (its ``metrics.jsonl`` shows ``null`` there).
        """
        broken = nonfinite_losses(metrics)
        metrics = {k: _jsonable(v) for k, v in metrics.items()}
        self._metrics_file.write(json.dumps(metrics) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in metrics.items() if v is not None})
        ret = metrics.get("episodic_return_mean")
        line = (f"step {metrics['global_step']:>10,d}  sps {metrics['sps']:>8,.0f}  "
                f"return {'-' if ret is None else f'{ret:8.2f}'}  "
                f"episodes {metrics.get('episodes', 0):>6d}  "
                + "  ".join(f"{k} {metrics[k]:.4g}" for k in ("policy_loss", "value_loss", "entropy", "approx_kl")
                            if metrics.get(k) is not None))
        if logging.getLogger().hasHandlers():
            log.info(line)  # Hydra's console and the run directory's train.log
        else:
            print(line, flush=True)
        raise_if_diverged(broken, metrics["global_step"])

    def write_summary(self, summary: Dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)
        if self.wandb_run is not None:
            for key, value in summary.items():
                if isinstance(value, (int, float, str, bool)):
                    self.wandb_run.summary[key] = value

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        self._redirect.close()
        self._metrics_file.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


class ReplicaLogger:
    """What a data-parallel replica other than rank 0 logs: nothing (rank 0's :class:`RunLogger` writes the run).
    It stops on non-finite losses as rank 0's does (the metrics are the replicas' means: all see the same NaN), so
    no replica goes on into a collective the others have left."""

    moved: Dict[str, str] = {}

    def advance(self, steps: int, sps: float, episodic_return: Optional[float]) -> None:
        pass

    def log(self, metrics: Dict[str, Any]) -> None:
        raise_if_diverged(nonfinite_losses(metrics), metrics["global_step"])

    def write_summary(self, summary: Dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


LOSS_KEYS = ("loss", "policy_loss", "value_loss")


def nonfinite_losses(metrics: Dict[str, Any]) -> List[str]:
    """The keys of :data:`LOSS_KEYS` whose values in ``metrics`` are nan or inf."""
    return [k for k in LOSS_KEYS if isinstance(metrics.get(k), float) and not math.isfinite(metrics[k])]


def raise_if_diverged(broken: List[str], global_step: int) -> None:
    """``FloatingPointError`` naming the non-finite losses ``broken`` (nothing if there are none)."""
    if broken:
        raise FloatingPointError(f"non-finite {', '.join(broken)} at global_step {global_step}: "
                                 f"the run diverged (lower algo.learning_rate, check reward scales)")


def summary_payload(cfg: Any, state: Any, stats: Any, device: torch.device, sps: float,
                    finished: bool, stop_reason: Optional[str] = None, world_size: int = 1,
                    cuda_graph_act: bool = False, cuda_graph_update: bool = False) -> Dict[str, Any]:
    """The ``summary.json`` contract (keys read by scripts and sweeps).

    ``state`` is the trainer's :class:`rl_app.checkpoint.TrainState`; ``stats`` its episode statistics
    (mean of the last 100 finished episodes' raw returns; ``None`` before any). ``finished`` is true once
    the run has ended normally; ``stopped_early`` says it ended before ``total_timesteps``, and
    ``stop_reason`` why: ``"time_limit_s"``, ``"signal SIGINT"`` / ``"signal SIGTERM"``, or ``None``. A run
    that ends on an exception (then ``finished`` is false and the caller adds ``error``) still names a signal it
    received: a second signal interrupts at once (rl_app.runtime.StopSignal). ``resumed_from`` is the
    absolute path of the checkpoint a resumed run started from (``None`` for a run started afresh); ``global_step``, ``iterations`` and ``wall_time_s``
    then count the resumed run's earlier sessions too, and ``sps`` is over all of them. ``world_size`` is the
    number of data-parallel PPO processes (``torchrun``; 1 otherwise): ``global_step``, ``sps`` and the episode
    statistics are over all of them, ``device`` is rank 0's. ``cuda_graph_act`` says whether the policy step ran
    from a CUDA graph (``algo.cuda_graph_act`` as resolved for the device); ``cuda_graph_update`` is
    ``algo.cuda_graph_update`` as resolved for the run (its PPO update epochs replay from a graph from the second
    on; always false for IMPALA).
    """
    return {
        "algo": cfg.algo.name,
        "env_id": cfg.env.id,
        "seed": int(cfg.seed),
        "global_step": int(state.global_step),
        "wall_time_s": round(state.wall_time_s, 3),
        "sps": round(sps, 1),
        "episodic_return_mean": stats.mean_return(),
        "episodic_length_mean": stats.mean_length(),
        "episodes": int(stats.episodes),
        "iterations": int(state.iteration),
        "total_timesteps": int(cfg.total_timesteps),
        "device": str(device),
        "finished": finished,
        "stopped_early": finished and state.global_step < int(cfg.total_timesteps),
        "stop_reason": stop_reason,
        "resumed_from": state.resumed_from,
        "world_size": int(world_size),
        "cuda_graph_act": bool(cuda_graph_act),
        "cuda_graph_update": bool(cuda_graph_update),
    }
