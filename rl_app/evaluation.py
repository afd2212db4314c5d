"""Evaluating a checkpoint (``evaluate.py``): a trained policy's episodes on fresh environments.

The environments are the checkpoint's (its saved ``env`` settings: same observation processing, frame stack,
reward clipping and life handling), seeded apart from training (``seed``, default 1,000,000). Episode returns
are what training reports: raw rewards over whole games (EnvPool's ``info["reward"]`` and real game ends for
Atari, see rl_app/envs.py). Env ``i`` plays ``(episodes + i) // num_envs`` episodes and its later ones are not
counted, so the envs that happen to finish short episodes first do not fill the sample.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rl_app.checkpoint import read_checkpoint
from rl_app.config import (MAX_SEED, ConfigError, check_interpolations, check_schema_keys, resume_checkpoint_path,
                           unknown_key_error, unknown_keys, validate_logger)
from rl_app.envs import EnvPoolAdapter, space_shapes
from rl_app.models import ActorCritic, build_model
from rl_app.runtime import STOP, resolve_device
from rl_app.tracking import start_wandb


def validate_eval_config(cfg: Any) -> None:
    """``ConfigError`` naming the first setting of an :class:`rl_app.config.EvalConfig` out of its range."""
    if OmegaConf.is_missing(cfg, "checkpoint"):
        raise ConfigError("checkpoint is required: checkpoint=<run dir> (its checkpoints/last.pt) or "
                          "checkpoint=<file.pt>")
    if isinstance(cfg, DictConfig):
        check_interpolations(cfg)
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            raise ConfigError(f"{', '.join(missing)} must be set")
        check_schema_keys(cfg, groups=("logger",))
    for key, known in unknown_keys(cfg):
        if key.partition(".")[0] == "env":
            raise ConfigError(f"{key} is not a setting of evaluate.py: the environment is the checkpoint's. The "
                              f"settings are: {', '.join(known)}")
        raise unknown_key_error(key, known, " of evaluate.py")
    validate_logger(cfg.logger)
    for key, low in (("episodes", 1), ("num_envs", 1), ("video_fps", 1), ("video_max_frames", 1),
                     ("torch_threads", 0), ("seed", 0)):
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{key} must be an integer >= {low}, got {value!r}")
    if cfg.video_fps > 50:
        raise ConfigError(f"video_fps must be at most 50, got {cfg.video_fps}: GIF frame times are whole hundredths "
                          f"of a second, and players stretch 10 ms or less to 100 ms")
    envs = min(cfg.num_envs, cfg.episodes)
    if cfg.seed > MAX_SEED - envs:
        raise ConfigError(f"seed must be in [0, {MAX_SEED - envs}] with {envs} envs (EnvPool seeds env i with "
                          f"seed + i, an int32), got {cfg.seed}")
    try:
        if cfg.device != "auto" and torch.device(cfg.device).type not in ("cpu", "cuda"):
            raise RuntimeError
    except RuntimeError:
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:<index>, got {cfg.device!r}") from None


def policy_actions(model: ActorCritic, obs: torch.Tensor, greedy: bool,
                   generator: Optional[torch.Generator]) -> torch.Tensor:
    """The actions for ``obs``: the most likely (discrete) or the mean (continuous) with ``greedy``, else sampled."""
    if not greedy:
        return model.act(obs, generator).actions
    with torch.no_grad():
        dist, _ = model.features(obs)
    return dist.argmax(-1) if model.discrete else dist[0]


def evaluate(cfg: Any, out_dir: Path) -> Dict[str, Any]:
    """Play the episodes ``cfg`` asks for with the checkpoint's policy; write ``eval.json`` (and ``video.gif``)
    in ``out_dir`` and return what ``eval.json`` holds. ``ConfigError`` for a bad setting or checkpoint."""
    validate_eval_config(cfg)
    path = resume_checkpoint_path(cfg.checkpoint, key="checkpoint")
    payload = read_checkpoint(path, "checkpoint")
    saved = payload["config"]
    env_cfg = OmegaConf.create(saved["env"])
    env_cfg.num_envs = min(cfg.num_envs, cfg.episodes)
    if cfg.video and env_cfg.family != "atari":
        raise ConfigError(f"video=true needs a checkpoint of an Atari run (its frames are the observations); this "
                          f"one has env.id={env_cfg.id!r}, env.family={env_cfg.family!r}")
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
    device = resolve_device(cfg.device)
    wandb_run = envs = None
    try:
        if cfg.logger.name == "wandb":  # started first: a refused login stops before any episode
            settings = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "logger"}
            wandb_run = start_wandb(cfg.logger, out_dir, {"evaluate": settings, "trained": saved},
                                    f"eval_{saved['algo']['name']}_{env_cfg.id}_{out_dir.name}", job_type="eval")
        envs = EnvPoolAdapter(env_cfg, seed=cfg.seed, device=device)
        obs_shape, action_shape, num_actions = space_shapes(envs)
        model = build_model(env_cfg.family, obs_shape, num_actions, action_shape, env_cfg.normalize_obs)
        try:
            model.load_state_dict(payload["model"])
        except RuntimeError as err:
            raise ConfigError(f"checkpoint: {str(path)!r} holds a network that does not fit its own env settings "
                              f"({' '.join(str(err).split())[:300]})") from None
        model.to(device).eval()
        generator = None if cfg.greedy else torch.Generator(device=device).manual_seed(cfg.seed)
        STOP.install()  # SIGINT / SIGTERM: stop after the current step, report the episodes that finished
        result = _play(cfg, envs, model, generator, out_dir)
        result = {"checkpoint": str(path), "global_step": int(payload["global_step"]),
                  "algo": saved["algo"]["name"], "env_id": env_cfg.id, "num_envs": env_cfg.num_envs,
                  "greedy": bool(cfg.greedy), "seed": cfg.seed, "device": str(device), **result}
        (out_dir / "eval.json").write_text(json.dumps(result, indent=1))
        if wandb_run is not None:
            _log_to_wandb(wandb_run, result, out_dir)
    except BaseException:
        if wandb_run is not None:
            wandb_run.finish(exit_code=1)  # marked failed in W&B
            wandb_run = None
        raise
    finally:
        STOP.restore()
        if envs is not None:
            envs.close()
        if wandb_run is not None:
            wandb_run.finish()
    return result


def _log_to_wandb(run: Any, result: Dict[str, Any], out_dir: Path) -> None:
    """The results as the W&B run's summary (``eval/<key>``), every episode's return as a histogram and the
    video (a GIF file, uploaded as it is)."""
    import wandb

    for key, value in result.items():
        if isinstance(value, (int, float, str, bool)):
            run.summary[f"eval/{key}"] = value
    logged = {}
    if result["returns"]:
        logged["eval/returns"] = wandb.Histogram(result["returns"])
    if result["video"]:
        logged["eval/video"] = wandb.Video(str(out_dir / result["video"]), format="gif")
    if logged:
        run.log(logged)


def _play(cfg: Any, envs: EnvPoolAdapter, model: ActorCritic, generator: Optional[torch.Generator],
          out_dir: Path) -> Dict[str, Any]:
    n = envs.num_envs
    targets = np.array([(cfg.episodes + i) // n for i in range(n)])
    played = np.zeros(n, dtype=np.int64)
    returns: List[float] = []
    lengths: List[int] = []
    episode_envs: List[int] = []
    frames: Optional[List[np.ndarray]] = [] if cfg.video else None
    video_frames = 0
    obs = envs.reset()
    steps = 0
    start = time.perf_counter()
    while (played < targets).any() and STOP.signum is None:
        if frames is not None and len(frames) < cfg.video_max_frames:
            frames.append(obs[0, -1].cpu().numpy())
        actions = policy_actions(model, obs, cfg.greedy, generator)
        obs = envs.step(envs.actions_to_numpy(actions)).obs
        steps += n
        for env, ret, length in envs.stats.ended_now:
            if played[env] < targets[env]:
                returns.append(ret)
                lengths.append(length)
                episode_envs.append(env)
            played[env] += 1
            if env == 0 and frames is not None and played[0] == 1:
                if len(frames) < cfg.video_max_frames:
                    frames.append(obs[0, -1].cpu().numpy())  # the episode's final observation
                _write_gif(frames, out_dir / "video.gif", cfg.video_fps)
                video_frames, frames = len(frames), None
    wall = time.perf_counter() - start

    def stat(fn, values):
        return float(fn(values)) if values else None

    return {"episodes": len(returns), "episodic_return_mean": stat(np.mean, returns),
            "episodic_return_std": stat(np.std, returns), "episodic_return_min": stat(np.min, returns),
            "episodic_return_max": stat(np.max, returns), "episodic_length_mean": stat(np.mean, lengths),
            "returns": returns, "lengths": lengths, "episode_envs": episode_envs, "env_steps": steps,
            "wall_time_s": wall, "sps": steps / max(wall, 1e-9), "video": "video.gif" if video_frames else None,
            "video_frames": video_frames, "stopped_early": STOP.signum is not None, "stop_reason": STOP.reason}


def _write_gif(frames: List[np.ndarray], path: Path, fps: int) -> None:
    """Grayscale ``[H, W]`` uint8 frames as an animated GIF that loops (pillow). GIF frame times are whole
    hundredths of a second, and pillow merges identical consecutive frames into one shown for their summed time."""
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)), loop=0)
