"""Structured configuration schemas, registered in Hydra's ConfigStore.

Every YAML file under ``conf/`` extends one of these dataclasses through its defaults list, so an unknown
or mistyped key (``env.num_env=8``) and a value of the wrong type (``algo.num_steps=abc``) are rejected by
Hydra before anything starts. Values that need more than a type check are validated by
:func:`validate_config`, which raises ``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

ENV_FAMILIES = ("classic", "atari", "mujoco")
DEVICES = ("auto", "cpu", "cuda")
LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")
OPTIMIZERS = ("rmsprop", "adam")
CREDIT_BACKENDS = ("auto", "triton", "torch")


# --------------------------------------------------------------------------- environments
@dataclass
class EnvConfig:
    """Keys common to every EnvPool environment.

    ``id``, ``family``, ``num_envs`` and ``normalize_obs`` are the application's own;
    every other field of a subclass is passed to ``envpool.make`` under its own name (``None`` means
    EnvPool's default).
    """

    id: str = MISSING
    family: str = MISSING  # which network and episode bookkeeping: classic | atari | mujoco
    num_envs: int = 8
    num_threads: int = 0  # EnvPool worker threads; 0 lets EnvPool choose
    max_episode_steps: Optional[int] = None
    normalize_obs: bool = False  # running mean/std normalisation of observations inside the model


@dataclass
class ClassicEnvConfig(EnvConfig):
    family: str = "classic"


@dataclass
class AtariEnvConfig(EnvConfig):
    family: str = "atari"
    episodic_life: bool = True
    reward_clip: bool = True
    stack_num: int = 4
    frame_skip: int = 4
    noop_max: int = 30
    repeat_action_probability: float = 0.0
    img_height: int = 84
    img_width: int = 84
    use_fire_reset: bool = True


@dataclass
class MujocoEnvConfig(EnvConfig):
    family: str = "mujoco"
    normalize_obs: bool = True


# --------------------------------------------------------------------------- algorithms
@dataclass
class PPOConfig:
    """Clipped-objective PPO (Schulman et al. 2017, arXiv:1707.06347) with GAE (arXiv:1506.02438)."""

    name: str = "ppo"
    num_steps: int = 128  # rollout length T per environment
    num_minibatches: int = 4
    update_epochs: int = 4
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    norm_adv: bool = True
    target_kl: Optional[float] = None
    adam_eps: float = 1e-5
    credit_backend: str = "auto"  # kernels backend: auto | triton | torch
    # EnvPool instances the envs are split into (a divisor of env.num_envs), stepped in turn: the policy acts on
    # one group while the others step, overlapping inference with stepping. 1 steps all envs at once.
    env_groups: int = 1
    # Replay the rollout's policy step from a CUDA graph (rl_app/graphed_act.py): one launch instead of one per
    # kernel, the same random draws. null: on for a CUDA device, off otherwise; true needs a CUDA device.
    cuda_graph_act: Optional[bool] = None
    # Replay each update epoch (its minibatch steps) from a CUDA graph (rl_app/graphed_update.py): the same steps
    # from the same minibatch order. null: on for a CUDA device in a single process, off otherwise (torchrun's
    # replicas average gradients between backward and step); true needs a CUDA device and one process.
    cuda_graph_update: Optional[bool] = None


@dataclass
class IMPALAConfig:
    """IMPALA actor-learner with V-trace (Espeholt et al. 2018, arXiv:1802.01561)."""

    name: str = "impala"
    unroll_length: int = 20  # T of each trajectory
    batch_size: int = 32  # trajectories of unroll_length steps per learner step (one per env and unroll)
    learning_rate: float = 6e-4
    anneal_lr: bool = True
    optimizer: str = "rmsprop"
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 0.01
    rmsprop_momentum: float = 0.0
    adam_eps: float = 1e-8
    gamma: float = 0.99
    # Multiplies the rewards the learner trains on (episode returns are logged unscaled). Keeps value targets
    # near 1 where they would reach 1 / (1 - gamma): a tanh critic saturates to output ~100, and a saturated
    # critic is a constant that cannot follow the policy when it degrades.
    reward_scale: float = 1.0
    vtrace_lambda: float = 1.0
    rho_clip: float = 1.0
    c_clip: float = 1.0
    pg_rho_clip: float = 1.0
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    # Normalise pg_advantages over the batch's valid rows (not in the paper; steadies small-batch CartPole).
    norm_adv: bool = False
    # How the loss reduces over the batch's valid rows: "sum" as in the paper, whose RMSProp epsilon (0.01)
    # assumes gradients that grow with the batch; "mean" for batch-size-independent Adam settings.
    loss_reduction: str = "sum"
    max_grad_norm: float = 40.0
    num_actor_threads: int = 2
    # EnvPool batch of each actor: 0 steps its envs synchronously; a divisor of its envs below their count
    # makes EnvPool asynchronous (recv returns the first this-many envs to finish a step), so the actor's
    # inference on one batch overlaps the stepping of the others, and unrolls have this many trajectories.
    # Off by default: on 2 CPU cores, synchronous actor threads out-stepped it on CartPole and Pong (README.md).
    actor_env_batch_size: int = 0
    queue_size: int = 4  # trajectories waiting for the learner; bounds the policy lag
    # Replay each synchronous actor's policy step from a CUDA graph (rl_app/graphed_act.py), as PPO's. null: on for
    # a CUDA device with algo.actor_env_batch_size=0, off otherwise; true needs both.
    cuda_graph_act: Optional[bool] = None
    # PPO's setting, here so that a sweep over both algorithms can set it: null or false; true is an error.
    cuda_graph_update: Optional[bool] = None
    deterministic: bool = False  # single thread: act, then learn, in lock-step (tests)
    credit_backend: str = "auto"


# --------------------------------------------------------------------------- logging
@dataclass
class LoggerConfig:
    name: str = MISSING  # wandb | none


@dataclass
class WandbLoggerConfig(LoggerConfig):
    name: str = "wandb"
    mode: str = "offline"  # offline (no account needed; `wandb sync` later) | online | disabled
    project: str = "fastrl"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: List[str] = field(default_factory=list)


@dataclass
class NoLoggerConfig(LoggerConfig):
    name: str = "none"


# --------------------------------------------------------------------------- top level
@dataclass
class Config:
    algo: Any = MISSING
    env: Any = MISSING
    logger: Any = MISSING
    total_timesteps: float = 500_000  # environment steps over all envs; a float so `2e6` works
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda
    torch_deterministic: bool = True
    torch_threads: int = 1  # intra-op CPU threads for torch: EnvPool workers need the cores (0: torch default)
    log_interval_s: float = 5.0  # seconds between metric lines, summary.json updates and W&B logs
    checkpoint_interval_s: float = 300.0  # seconds between checkpoints (one is always written at the end)
    time_limit_s: Optional[float] = None  # stop (with summary and checkpoint) after this much wall-clock time
    progress_bar: bool = True
    # A checkpoint file or a run directory (its checkpoints/last.pt): continue that run's training (learner,
    # counters, RNG states) up to total_timesteps in a new run directory; environments start new episodes.
    resume: Optional[str] = None


@dataclass
class EvalConfig:
    """``evaluate.py``: episodes of a trained policy from a checkpoint (README, "Evaluating a checkpoint")."""

    logger: Any = MISSING  # none (default) | wandb: a W&B run (job_type "eval") with the results and video
    checkpoint: str = MISSING  # a checkpoint file or a run directory holding checkpoints/last.pt
    episodes: int = 10  # episodes in all; env i plays (episodes + i) // num_envs of them, so short ones don't win
    num_envs: int = 8  # envs stepped together (at most `episodes` are used)
    greedy: bool = True  # the most likely action (discrete) or the mean action (continuous); false: sample
    seed: int = 1_000_000  # env i is seeded seed + i; also seeds the action sampling when greedy=false
    device: str = "auto"  # auto | cpu | cuda
    torch_threads: int = 1  # intra-op CPU threads for torch (0: torch default)
    video: bool = False  # Atari: env 0's first episode as video.gif (the last frame of each observed stack)
    video_fps: int = 15  # frames per second of video.gif (15 is real time at frame_skip 4; GIF rounds to 1/100 s)
    video_max_frames: int = 10_000  # the video stops here (a frame is one agent step)


def register_configs() -> None:
    """Register the schemas; YAML files under ``conf/`` name them in their defaults lists."""
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(name="evaluate_schema", node=EvalConfig)
    for group, schemas in OPTION_SCHEMAS.items():  # algo and logger
        for option, schema in schemas.items():
            cs.store(group=group, name=f"{option}_schema", node=schema)
    cs.store(group="env", name="classic_schema", node=ClassicEnvConfig)
    cs.store(group="env", name="atari_schema", node=AtariEnvConfig)
    cs.store(group="env", name="mujoco_schema", node=MujocoEnvConfig)


class ConfigError(ValueError):
    """A setting with a value the application cannot run with; the message names the key."""


def _require(ok: bool, key: str, allowed: str, value: Any) -> None:
    if not ok:
        typed = {True: "true", False: "false", None: "null"}  # a bool or None as written on the command line
        shown = typed[value] if isinstance(value, bool) or value is None else repr(value)
        raise ConfigError(f"{key} must be {allowed}, got {shown}")


# Float settings for which inf is meaningful (no clipping); every other float must be finite.
INF_ALLOWED = ("algo.rho_clip", "algo.c_clip", "algo.pg_rho_clip", "algo.max_grad_norm")
FLOAT32_MAX = 3.4028234663852886e38
# EnvPool seeds env i with seed + i (int32), so seed + env.num_envs must stay below 2**31.
MAX_SEED = 2 ** 31 - 1
# Height and width of the smallest Atari frame rl_app.models' Nature CNN takes (8x8/4, 4x4/2, 3x3/1 convolutions).
MIN_ATARI_IMAGE = 36


def _floats(node: Any, prefix: str = "") -> Iterator[Tuple[str, float]]:
    """(dotted key, value) of every float in a composed config."""
    for key in node:
        value = node[key]
        name = f"{prefix}{key}"
        if isinstance(value, float):
            yield name, value
        elif hasattr(value, "keys"):
            yield from _floats(value, name + ".")


# Config nodes whose extra keys are not the application's to reject: ``+env.<option>`` passes an EnvPool option
# that the schema lacks to ``envpool.make``, which rejects an unknown one (a ConfigError before training).
PASSTHROUGH_NODES = ("env",)
# EnvPool options the application sets itself, with the setting to use instead (an async batch_size made the
# trainers' buffers the wrong size: a native abort in IMPALA's actors).
RESERVED_ENVPOOL_OPTIONS = {"batch_size": "algo.actor_env_batch_size (IMPALA; PPO's EnvPools are synchronous)",
                            "seed": "seed", "env_seed": "seed (EnvPool's other name for its seed option)",
                            "env_type": "nothing (the application uses gymnasium's API)"}


# Each option's schema of the groups whose options have settings of their own, to name the option that has a key
# given with '+' under another (``+logger.mode=online`` under ``logger=none``).
OPTION_SCHEMAS = {"algo": {"ppo": PPOConfig, "impala": IMPALAConfig},
                  "logger": {"wandb": WandbLoggerConfig, "none": NoLoggerConfig}}


def unknown_key_error(key: str, known: List[str], program: str = "") -> ConfigError:
    """The error for a key that :func:`unknown_keys` found: the key, the closest known name or the group options
    that have it, and the known names (``program``: e.g. ``" of evaluate.py"``)."""
    parent, _, name = key.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    options = [option for option, schema in OPTION_SCHEMAS.get(parent, {}).items()
               if name in {f.name for f in dataclasses.fields(schema)}]
    if options:
        hint = f"; {name} is a setting of {' and '.join(f'{parent}={option}' for option in options)}."
    elif close:
        hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?"
    else:
        hint = "."
    return ConfigError(f"{key} is not a setting{program} (Hydra adds a key given with '+' without checking it){hint} "
                       f"The settings{' of ' + parent if parent else ''} are: {', '.join(known)}")


def unknown_keys(node: Any, prefix: str = "") -> Iterator[Tuple[str, List[str]]]:
    """(dotted key, the schema's keys there) of every key that a node's schema (a dataclass) does not define,
    outside :data:`PASSTHROUGH_NODES`.

    Hydra rejects an unknown key in an override (``algo.lerning_rate=1``) but adds one given with ``+``
    (``+algo.lerning_rate=1``) unchecked, and the run would silently ignore it."""
    schema = OmegaConf.get_type(node)
    checked = dataclasses.is_dataclass(schema) and prefix.rstrip(".") not in PASSTHROUGH_NODES
    known = [f.name for f in dataclasses.fields(schema)] if checked else None
    for key in node:
        if known is not None and key not in known:
            yield f"{prefix}{key}", known
        elif isinstance(node[key], DictConfig):
            yield from unknown_keys(node[key], f"{prefix}{key}.")


# The key that says which schema a group's option follows; the option sets it, and the code reads the rest of the
# group's keys by it (an Atari network for env.family=atari, IMPALA's keys for algo.name=impala).
SCHEMA_KEYS = {"env": "family", "algo": "name", "logger": "name"}


def check_schema_keys(cfg: DictConfig, groups: Iterable[str] = tuple(SCHEMA_KEYS)) -> None:
    """``ConfigError`` for the first key of :data:`SCHEMA_KEYS` in ``groups`` that an override changed from the
    value its option's schema fixes (``logger.name=none`` under ``logger=wandb``)."""
    for group in groups:
        key = SCHEMA_KEYS[group]
        schema = OmegaConf.get_type(cfg[group])
        if dataclasses.is_dataclass(schema):
            fixed = {f.name: f.default for f in dataclasses.fields(schema)}.get(key)
            if isinstance(fixed, str) and fixed != MISSING and cfg[group][key] != fixed:
                raise ConfigError(f"{group}.{key} must be {fixed!r} with this {group} option, got {cfg[group][key]!r}: "
                                  f"choose the {group} option instead ({group}=<option>; `--help` lists them)")


def validate_logger(logger: Any) -> None:
    """``ConfigError`` naming the first ``logger.*`` setting out of range (train.py and evaluate.py)."""
    _require(logger.name in LOGGERS, "logger.name", "one of wandb, none", logger.name)
    if logger.name == "wandb":
        _require(logger.mode in WANDB_MODES, "logger.mode", "one of offline, online, disabled", logger.mode)


def resume_checkpoint_path(resume: str, key: str = "resume") -> Path:
    """``resume`` as given (a checkpoint file or a run directory; a relative path is taken from the directory
    train.py or evaluate.py was started in) to the checkpoint file's absolute path; ``ConfigError`` naming the
    setting ``key`` if there is none."""
    from hydra.utils import to_absolute_path

    if not str(resume).strip():
        raise ConfigError(f"{key} must be a checkpoint file or a run directory holding checkpoints/last.pt, "
                          f"got {resume!r}")
    # relative to the directory train.py started in, also with hydra.job.chdir=true
    path = Path(to_absolute_path(str(Path(resume).expanduser()))).resolve()
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    if not path.is_file():
        raise ConfigError(f"{key} must be a checkpoint file or a run directory holding checkpoints/last.pt, "
                          f"got {resume!r} (no file {str(path)!r})")
    return path


def torchrun_int(name: str, default: int, positive: bool = False) -> int:
    """The integer in environment variable ``name`` as torchrun sets it (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``),
    ``default`` when unset. ``ConfigError`` if it is not an integer (not a positive one, with ``positive``)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or (positive and value < 1):
        kind = "a positive integer" if positive else "an integer"
        raise ConfigError(f"environment variable {name}={raw!r} is not {kind} (torchrun sets it)")
    return value


def launched_world_size() -> int:
    """How many data-parallel processes torchrun started: its ``WORLD_SIZE`` (1 when unset). ``ConfigError`` if
    it is not a positive integer."""
    return torchrun_int("WORLD_SIZE", 1, positive=True)


def check_tuning_overrides(overrides: Sequence[str], options: Sequence[str]) -> None:
    """Raise :class:`ConfigError` if an override names a tuning option that has no file.

    ``overrides`` are a run's (or a sweep job's) command-line overrides, ``options`` the tuning group's options
    (Hydra's config loader, with the run's search path). The tuning default is optional, so Hydra skips a name
    without a file: right for the default ``<algo>_<env>`` (a pair without tuned values), but a mistyped
    ``tuning=ppo_cartpol`` (or ``tuning=[ppo_cartpol]``) would drop the tuned values without a word. Every name an
    override gives is checked; ``~tuning``, an empty value and interpolations (``tuning=${algo}_${env}``, which
    Hydra resolves like the default) pass."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.key_or_group != "tuning" or override.is_delete() or override.is_sweep_override():
            continue
        value = override.value()
        for name in value if isinstance(value, list) else [value]:
            if not isinstance(name, str) or not name or "${" in name:
                continue
            name = name.removesuffix(".yaml")
            if name not in options:
                close = difflib.get_close_matches(name, options, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(f"tuning={name} names no file in conf/tuning/{hint}: choose one of "
                                  f"{', '.join(options)}, or ~tuning for none")


def _cuda_available() -> bool:
    """Whether ``device=auto`` resolves to CUDA here (rl_app.runtime.resolve_device)."""
    import torch

    return torch.cuda.is_available()


def check_interpolations(cfg: DictConfig) -> None:
    """Resolve every interpolation of ``cfg`` (e.g. ``algo.gamma=${oops}``) before anything reads it: one that does
    not resolve is a :class:`ConfigError` naming its key, not omegaconf's traceback from wherever it is first read."""
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except InterpolationResolutionError as err:
        raise ConfigError(f"{err.full_key}: {str(err).splitlines()[0]}") from None


def validate_config(cfg: Any) -> None:
    """Check what the schema's types cannot express: keys added with ``+`` that no schema defines, keys left
    without a value, keys that the chosen option fixes, and value ranges; raises ``ValueError``
    (:class:`ConfigError`) naming the key."""
    if isinstance(cfg, DictConfig):
        check_interpolations(cfg)
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            raise ConfigError(f"{', '.join(missing)} must be set (a group's *_schema options are its bare schemas: "
                              f"choose an option that sets them, e.g. env=cartpole, or set them on the command line)")
        for key, known in unknown_keys(cfg):
            raise unknown_key_error(key, known)
        for option, instead in RESERVED_ENVPOOL_OPTIONS.items():
            if option in cfg.env:
                raise ConfigError(f"env.{option} is set by the application, not passed to EnvPool; use {instead}")
        check_schema_keys(cfg)
    for key, value in _floats(cfg):
        _require(not math.isnan(value) and (math.isfinite(value) or key in INF_ALLOWED), key,
                 "a finite number" if key not in INF_ALLOWED else "a number (inf allowed) and not nan", value)
    world = launched_world_size()  # under torchrun the processes' envs take seeds seed, seed + 1, ... in turn
    envs, where = ("env.num_envs", "") if world == 1 else ("WORLD_SIZE * env.num_envs",
                                                           f" with torchrun's WORLD_SIZE={world}")
    _require(0 <= cfg.seed <= MAX_SEED - world * cfg.env.num_envs, "seed",
             f"in [0, 2**31 - 1 - {envs}] = [0, {MAX_SEED - world * cfg.env.num_envs}]{where} (EnvPool seeds env i "
             f"with seed + i as an int32)", cfg.seed)
    _require(cfg.device in DEVICES or re.fullmatch(r"cuda:\d+", str(cfg.device)) is not None, "device",
             "one of auto, cpu, cuda, cuda:N (N >= 0)", cfg.device)
    _require(cfg.total_timesteps >= 1 and float(cfg.total_timesteps).is_integer(), "total_timesteps",
             "a whole number >= 1 (2e6 is fine)", cfg.total_timesteps)
    if cfg.get("resume") is not None:
        resume_checkpoint_path(cfg.resume)
    _require(cfg.log_interval_s > 0, "log_interval_s", "> 0", cfg.log_interval_s)
    _require(cfg.checkpoint_interval_s > 0, "checkpoint_interval_s", "> 0", cfg.checkpoint_interval_s)
    _require(cfg.torch_threads >= 0, "torch_threads", ">= 0 (0 keeps torch's default)", cfg.torch_threads)
    if cfg.time_limit_s is not None:
        _require(cfg.time_limit_s > 0, "time_limit_s", "> 0 or null", cfg.time_limit_s)
    env = cfg.env
    _require(env.family in ENV_FAMILIES, "env.family", f"one of {', '.join(ENV_FAMILIES)}", env.family)
    _require(env.num_envs >= 1, "env.num_envs", ">= 1", env.num_envs)
    _require(env.num_threads >= 0, "env.num_threads", ">= 0 (0 lets EnvPool choose)", env.num_threads)
    if env.max_episode_steps is not None:
        _require(env.max_episode_steps >= 1, "env.max_episode_steps", ">= 1 or null", env.max_episode_steps)
    validate_logger(cfg.logger)
    if env.family == "atari":
        _require(env.stack_num >= 1, "env.stack_num", ">= 1", env.stack_num)
        _require(env.frame_skip >= 1, "env.frame_skip", ">= 1", env.frame_skip)
        _require(env.noop_max >= 1, "env.noop_max", ">= 1 (EnvPool crashes at 0)", env.noop_max)
        _require(0.0 <= env.repeat_action_probability <= 1.0, "env.repeat_action_probability", "in [0, 1]",
                 env.repeat_action_probability)
        for key in ("img_height", "img_width"):
            _require(getattr(env, key) >= MIN_ATARI_IMAGE, f"env.{key}", f">= {MIN_ATARI_IMAGE} (the smallest "
                     f"frame the Nature CNN's three convolutions take)", getattr(env, key))
    algo = cfg.algo
    _require(0.0 <= algo.gamma <= 1.0, "algo.gamma", "in [0, 1]", algo.gamma)
    _require(0 < algo.learning_rate <= FLOAT32_MAX / 10, "algo.learning_rate", "> 0 and at most 3.4e37 (the "
             "optimizers keep it as a float32, and Adam's first step is learning_rate / (1 - beta1) = 10x it)",
             algo.learning_rate)
    _require(algo.credit_backend in CREDIT_BACKENDS, "algo.credit_backend", "one of auto, triton, torch",
             algo.credit_backend)
    _require(algo.max_grad_norm > 0, "algo.max_grad_norm", "> 0", algo.max_grad_norm)
    _require(algo.ent_coef >= 0, "algo.ent_coef", ">= 0", algo.ent_coef)
    _require(algo.vf_coef > 0, "algo.vf_coef", "> 0", algo.vf_coef)
    _require(algo.adam_eps > 0, "algo.adam_eps", "> 0", algo.adam_eps)
    _require(algo.name == "ppo" or algo.cuda_graph_update is not True, "algo.cuda_graph_update",
             "null or false for IMPALA (it graphs PPO's update epochs)", algo.cuda_graph_update)
    graphs = [key for key in ("cuda_graph_act", "cuda_graph_update") if getattr(algo, key) is True]
    if graphs and (cfg.device == "cpu" or cfg.device == "auto" and not _cuda_available()):
        where = "device=cpu" if cfg.device == "cpu" else "device=auto on a machine without a CUDA GPU"
        _require(False, f"algo.{graphs[0]}", f"null or false on a CPU ({where}: CUDA graphs need a CUDA GPU)", True)
    if algo.name == "ppo":
        _require(algo.num_steps >= 1, "algo.num_steps", ">= 1", algo.num_steps)
        _require(0.0 <= algo.gae_lambda <= 1.0, "algo.gae_lambda", "in [0, 1]", algo.gae_lambda)
        _require(algo.num_minibatches >= 1, "algo.num_minibatches", ">= 1", algo.num_minibatches)
        batch = algo.num_steps * env.num_envs
        _require(batch % algo.num_minibatches == 0, "algo.num_minibatches",
                 f"a divisor of algo.num_steps * env.num_envs = {batch}", algo.num_minibatches)
        _require(batch >= 2 or not algo.norm_adv, "algo.norm_adv",
                 f"false for a batch of one sample (algo.num_steps * env.num_envs = {batch}: advantages normalised "
                 f"over one sample are all 0), or give more steps or environments", algo.norm_adv)
        _require(batch // algo.num_minibatches >= 2 or not algo.norm_adv, "algo.num_minibatches",
                 f"at most algo.num_steps * env.num_envs / 2 = {batch // 2} with algo.norm_adv=true (advantages "
                 f"normalised over a minibatch of one sample are all 0)", algo.num_minibatches)
        _require(algo.update_epochs >= 1, "algo.update_epochs", ">= 1", algo.update_epochs)
        _require(algo.env_groups >= 1 and env.num_envs % algo.env_groups == 0, "algo.env_groups",
                 f"a divisor of env.num_envs ({env.num_envs})", algo.env_groups)
        _require(algo.clip_coef > 0, "algo.clip_coef", "> 0", algo.clip_coef)
        if algo.target_kl is not None:
            _require(algo.target_kl > 0, "algo.target_kl", "> 0 or null", algo.target_kl)
    elif algo.name == "impala":
        _require(algo.unroll_length >= 1, "algo.unroll_length", ">= 1", algo.unroll_length)
        _require(algo.batch_size >= 1, "algo.batch_size", ">= 1", algo.batch_size)
        _require(algo.batch_size * algo.unroll_length >= 2 or not algo.norm_adv,
                 "algo.batch_size * algo.unroll_length", ">= 2 with algo.norm_adv=true (advantages normalised over "
                 "one sample are 0)", algo.batch_size * algo.unroll_length)
        _require(algo.loss_reduction in ("sum", "mean"), "algo.loss_reduction", "one of sum, mean",
                 algo.loss_reduction)
        _require(algo.optimizer in OPTIMIZERS, "algo.optimizer", "one of rmsprop, adam", algo.optimizer)
        if algo.optimizer == "rmsprop":
            _require(0.0 <= algo.rmsprop_alpha < 1.0, "algo.rmsprop_alpha", "in [0, 1)", algo.rmsprop_alpha)
            _require(algo.rmsprop_eps > 0, "algo.rmsprop_eps", "> 0", algo.rmsprop_eps)
            # momentum 1 never forgets a step; above it the steps grow without bound
            _require(0.0 <= algo.rmsprop_momentum < 1.0, "algo.rmsprop_momentum", "in [0, 1)", algo.rmsprop_momentum)
        _require(0.0 <= algo.vtrace_lambda <= 1.0, "algo.vtrace_lambda", "in [0, 1]", algo.vtrace_lambda)
        _require(algo.reward_scale > 0, "algo.reward_scale", "> 0", algo.reward_scale)
        for key in ("rho_clip", "c_clip", "pg_rho_clip"):
            _require(getattr(algo, key) > 0, f"algo.{key}", "> 0", getattr(algo, key))
        _require(algo.num_actor_threads >= 1, "algo.num_actor_threads", ">= 1", algo.num_actor_threads)
        _require(env.num_envs % algo.num_actor_threads == 0, "env.num_envs",
                 f"a multiple of algo.num_actor_threads ({algo.num_actor_threads})", env.num_envs)
        per_actor = env.num_envs // algo.num_actor_threads
        env_batch = algo.actor_env_batch_size
        _require(env_batch == 0 or (0 < env_batch < per_actor and per_actor % env_batch == 0),
                 "algo.actor_env_batch_size", f"0 (synchronous EnvPool) or a divisor of the envs per actor "
                 f"(env.num_envs / algo.num_actor_threads = {per_actor}) smaller than it", env_batch)
        _require(env_batch == 0 or algo.cuda_graph_act is not True, "algo.cuda_graph_act",
                 "null or false with algo.actor_env_batch_size > 0 (an asynchronous actor acts on batches of "
                 "changing size; a graph has one)", algo.cuda_graph_act)
        _require(env_batch == 0 or not algo.deterministic, "algo.actor_env_batch_size",
                 "0 when algo.deterministic=true (an asynchronous EnvPool returns envs in a timing-dependent "
                 "order, so runs would not repeat)", env_batch)
        width = env_batch or per_actor
        _require(algo.batch_size % width == 0, "algo.batch_size",
                 f"a multiple of the trajectories per unroll ({width}: env.num_envs / algo.num_actor_threads, "
                 f"or algo.actor_env_batch_size when it is set)", algo.batch_size)
        _require(algo.queue_size >= 1, "algo.queue_size", ">= 1", algo.queue_size)
    else:
        raise ConfigError(f"algo.name must be one of ppo, impala, got {algo.name!r}")
