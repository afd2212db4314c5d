"""EnvPool adapter: batched environments in gymnasium mode, torch tensors in and out, episode statistics.

EnvPool resets with *next-step* autoreset. When env ``i`` ends at step ``t`` (terminated or truncated),
the observation returned by that step is the true final observation; the *next* call to ``step`` ignores
env ``i``'s action and returns the reset observation with reward 0 and both flags false. In time-major
rollout storage this means:

- row ``t`` (the done step) is a real transition; a truncation there bootstraps from the value of the
  final observation, which is the observation, and so the value, stored on row ``t + 1``;
- row ``t + 1`` is not a real transition (its action was ignored): :attr:`EnvPoolAdapter.valid` is false
  for it, and the losses and advantage statistics leave it out.

Episode statistics use the raw reward (``info["reward"]`` for Atari, where ``reward_clip`` is on) and the
real end of a game (``info["terminated"]`` for Atari, where ``episodic_life`` ends an episode at every
lost life), so they are the numbers papers report.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import difflib
import warnings
from typing import Any, Deque, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from rl_app.config import RESERVED_ENVPOOL_OPTIONS, ConfigError

# Keys of the env config that belong to this application, not to envpool.make.
_APP_KEYS = {"id", "family", "num_envs", "normalize_obs"}


class StepResult(NamedTuple):
    """One batched step. Tensors are ``[N]`` (``obs``: ``[N, *obs_shape]``) on the adapter's device."""

    obs: torch.Tensor  # observation for the next action (final observation where done)
    rewards: torch.Tensor  # float32, the reward the agent trains on (clipped for Atari)
    terminated: torch.Tensor  # bool
    truncated: torch.Tensor  # bool


def envpool_kwargs(env_cfg: Any) -> Dict[str, Any]:
    """The options of ``env_cfg`` that go to ``envpool.make`` (``None`` values keep EnvPool's defaults)."""
    items = env_cfg.items() if hasattr(env_cfg, "items") else dataclasses.asdict(env_cfg).items()
    return {k: v for k, v in items if k not in _APP_KEYS and v is not None}


@contextlib.contextmanager
def _quiet_spaces() -> Iterator[None]:
    """Without gymnasium's warning that EnvPool's float64 Box bounds are cast to float32, which it gives at every
    access of a space: harmless here, and it cluttered every run's console."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered.*")
        yield


def spaces(envs: Any) -> Tuple[Any, Any]:
    """``(observation_space, action_space)`` of an EnvPool instance (see :func:`_quiet_spaces`)."""
    with _quiet_spaces():
        return envs.observation_space, envs.action_space


# Options envpool.make takes itself (rendering, pixels) besides those of the id's spec.
_MAKE_OPTIONS = ["from_pixels", "render_mode", "render_env_id", "render_width", "render_height", "render_camera_id"]


# EnvPool's registry modules of the families this application has networks and tunings for.
_FAMILY_OF_MODULE = {"envpool.atari": "atari", "envpool.classic_control": "classic", "envpool.mujoco": "mujoco"}


def _registered_family(env_id: str) -> Optional[str]:
    """The ``env.family`` an EnvPool id belongs to, from the module its registry entry imports; ``None`` for an id
    of another module (box2d, toy_text, ...), which only the observation check of :func:`make_envpool` judges."""
    from envpool.registration import registry

    entry = registry.specs.get(env_id)
    module = entry[0] if entry else ""
    for prefix, family in _FAMILY_OF_MODULE.items():
        if module == prefix or module.startswith(prefix + "."):
            return family
    return None


def check_env_options(env_cfg: Any) -> None:
    """Raise ``ConfigError`` when EnvPool does not know ``env.id``, when ``env.id`` belongs to another
    ``env.family`` than the config's (a MuJoCo id under ``env=cartpole``, say), or when an ``env`` option (a schema
    key or a ``+env.<option>``) is not one that EnvPool takes for that id, with the closest names. Reads EnvPool's
    registry and the id's option names only (no environment is made), so a sweep checks every job with it
    before the first one starts."""
    import envpool

    ids = envpool.list_all_envs()
    if env_cfg.id not in ids:
        close = difflib.get_close_matches(env_cfg.id, ids, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"env.id={env_cfg.id!r} is not an EnvPool environment{hint}; pick a config group such as "
                          f"env=pong, or an id from envpool.list_all_envs()")
    family = _registered_family(env_cfg.id)
    if family is not None and family != env_cfg.family:
        raise ConfigError(f"env.id={env_cfg.id!r} is a {family} environment, which does not fit "
                          f"env.family={env_cfg.family!r} (its network, tuning and observation handling); choose "
                          f"the matching config group (env=cartpole, env=pong, env=halfcheetah, ...) and override "
                          f"env.id there")
    try:
        fields = envpool.make_spec(env_cfg.id).config._fields
    except Exception:  # noqa: BLE001 - an id whose backend does not load here: envpool.make will say why
        return
    options = [name for name in fields if name not in _APP_KEYS and name not in RESERVED_ENVPOOL_OPTIONS]
    options += _MAKE_OPTIONS
    for key in envpool_kwargs(env_cfg):
        if key not in options:
            close = difflib.get_close_matches(key, options + sorted(_APP_KEYS), n=1)
            hint = f" (did you mean env.{close[0]}?)" if close else ""
            raise ConfigError(f"env.{key} is not an option EnvPool takes for {env_cfg.id!r}{hint}; its options: "
                              f"{', '.join(options)}")


def make_envpool(env_cfg: Any, seed: int, num_envs: Optional[int] = None, batch_size: int = 0):
    """Create the EnvPool environment described by ``env_cfg`` in gymnasium mode.

    ``batch_size`` (0: synchronous) below the env count makes it asynchronous (see :class:`EnvPoolAdapter`).

    Raises ``ConfigError`` naming ``env.id`` or the option when EnvPool does not know the id, does not take an
    option (:func:`check_env_options`) or rejects an option's value, and when the environment does not fit
    ``env.family`` (an Atari id under a classic-control config, say).
    """
    import envpool

    check_env_options(env_cfg)
    kwargs = envpool_kwargs(env_cfg)
    if batch_size:
        kwargs["batch_size"] = batch_size
    try:
        with _quiet_spaces():
            envs = envpool.make(env_cfg.id, env_type="gymnasium", num_envs=num_envs or env_cfg.num_envs,
                                seed=seed, **kwargs)
    except (AssertionError, KeyError, ValueError, TypeError, RuntimeError) as err:  # the id and names are fine
        reason = str(err) or f"{type(err).__name__} without a message"
        raise ConfigError(f"env.id={env_cfg.id!r}: EnvPool rejected the values of its options {kwargs} ({reason}); "
                          f"check the env settings and +env.<option> overrides") from err
    obs, _ = spaces(envs)
    is_atari_like = obs.dtype == np.uint8 and len(obs.shape) == 3
    if (env_cfg.family == "atari") != is_atari_like:
        raise ConfigError(f"env.id={env_cfg.id!r} has observations {obs.shape} {obs.dtype}, which do not fit "
                          f"env.family={env_cfg.family!r}; choose the matching config group (env=cartpole, "
                          f"env=pong, env=halfcheetah, ...) and override env.id there")
    return envs


class EpisodeStats:
    """Running returns and lengths of every env; the last ``window`` finished episodes (host numpy)."""

    def __init__(self, num_envs: int, window: int = 100):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.finished_returns: Deque[float] = collections.deque(maxlen=window)
        self.finished_lengths: Deque[int] = collections.deque(maxlen=window)
        self.episodes = 0
        self.ended_now: List[Tuple[int, float, int]] = []  # (env, return, length) of the last update's ends

    def update(self, env_ids: np.ndarray, raw_rewards: np.ndarray, counted: np.ndarray, ended: np.ndarray):
        """Add one step of ``env_ids``; ``counted`` marks real transitions; ``ended`` real episode ends."""
        self.returns[env_ids] += raw_rewards
        self.lengths[env_ids] += counted
        self.ended_now = []
        if ended.any():
            done_ids = env_ids[ended]
            returns, lengths = self.returns[done_ids].tolist(), self.lengths[done_ids].tolist()
            self.ended_now = list(zip(done_ids.tolist(), returns, lengths))
            self.finished_returns.extend(returns)
            self.finished_lengths.extend(lengths)
            self.episodes += len(done_ids)
            self.returns[done_ids] = 0.0
            self.lengths[done_ids] = 0

    def mean_return(self) -> Optional[float]:
        return float(np.mean(self.finished_returns)) if self.finished_returns else None

    def mean_length(self) -> Optional[float]:
        return float(np.mean(self.finished_lengths)) if self.finished_lengths else None

    def state_dict(self) -> Dict[str, Any]:
        return {"finished_returns": list(self.finished_returns), "finished_lengths": list(self.finished_lengths),
                "episodes": self.episodes}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.finished_returns.extend(state["finished_returns"])
        self.finished_lengths.extend(state["finished_lengths"])
        self.episodes = state["episodes"]


class Received(NamedTuple):
    """One batch from an asynchronous :meth:`EnvPoolAdapter.recv`: the envs ``env_ids`` finished a step.

    Tensors are ``[B]`` (``obs``: ``[B, *obs_shape]``) in the order of ``env_ids``; ``valid`` says which of
    the observations are real (false on the row after a done), as :attr:`EnvPoolAdapter.valid` does.
    """

    env_ids: np.ndarray  # int64
    obs: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor


class EnvPoolAdapter:
    """Batched EnvPool environments with torch tensors on ``device``.

    Synchronous (``batch_size=0``): ``step(actions)`` returns :class:`StepResult`; before each step,
    :attr:`valid` (``[N]`` bool) says which rows of the observation being acted on are real (false on the
    row after a done).

    Groups (``groups=G``, synchronous only): the envs are G EnvPool instances of ``N / G`` envs each, env
    ``i`` in group ``i // (N / G)`` (columns :attr:`group_columns`), seeded as one pool would seed them
    (``seed + i``), so a run's envs do not depend on G. ``send_group(g, actions)`` starts group g's step and
    returns at once; ``recv_group(g)`` waits for it and returns the group's rows. The caller acts on one group
    while the others step; ``step`` sends to every group and then receives from each.

    Asynchronous (``0 < batch_size < N``): ``send(actions, env_ids)`` hands some envs their actions and
    returns at once; ``recv()`` waits for the first ``batch_size`` envs to finish their step and returns
    them (:class:`Received`). EnvPool's ``recv`` waits for ``batch_size`` envs to finish, so with fewer in
    flight it blocks forever: the caller must keep at least that many in flight. Autoreset works per env as
    in synchronous mode (envpool 1.2.5: an env's result after a done is its reset observation, reward 0, no flag).
    """

    def __init__(self, env_cfg: Any, seed: int, device: torch.device, batch_size: int = 0, groups: int = 1):
        if groups < 1 or env_cfg.num_envs % groups or (batch_size and groups > 1):
            raise ValueError(f"groups must be a divisor of the env count ({env_cfg.num_envs}), and 1 when batch_size "
                             f"makes EnvPool asynchronous; got groups={groups}, batch_size={batch_size}")
        self.cfg = env_cfg
        self.family = env_cfg.family
        self.num_envs = env_cfg.num_envs
        self.batch_size = batch_size
        self.device = device
        size = self.num_envs // groups
        self.group_columns = [slice(g * size, (g + 1) * size) for g in range(groups)]
        self.pools = []
        try:
            for g in range(groups):
                self.pools.append(make_envpool(env_cfg, seed + g * size, num_envs=size, batch_size=batch_size))
        except BaseException:
            self.close()
            raise
        self.observation_space, self.action_space = spaces(self.pools[0])
        self.discrete = hasattr(self.action_space, "n")
        self.stats = EpisodeStats(self.num_envs)
        self._env_ids = np.arange(self.num_envs)
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._pin = device.type == "cuda"
        self._valid = np.ones(self.num_envs, dtype=bool)  # host copy of valid, updated a group at a time
        self.valid = torch.ones(self.num_envs, dtype=torch.bool, device=device)

    def _to_device(self, array: np.ndarray, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if dtype is not None and tensor.dtype != dtype and tensor.dtype != torch.uint8:
            tensor = tensor.to(dtype)
        if self._pin:
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        # Atari frames stay uint8 until the network; vector observations become float32.
        return self._to_device(obs, None if obs.dtype == np.uint8 else torch.float32)

    def reset(self) -> torch.Tensor:
        """Reset every env; the ``[N, *obs_shape]`` first observations. Asynchronous: no env is in flight after."""
        if self.batch_size:
            pool = self.pools[0]
            pool.async_reset()
            # Every env's reset comes back once, in finishing order; put them in env order.
            batches = [pool.recv() for _ in range(self.num_envs // self.batch_size)]
            ids = np.concatenate([info["env_id"] for *_, info in batches])
            obs = np.concatenate([b[0] for b in batches])[np.argsort(ids)]
        else:
            obs = np.concatenate([pool.reset()[0] for pool in self.pools])
        self._prev_done[:] = False
        self._valid[:] = True
        self.valid = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return self._obs(obs)

    def actions_to_numpy(self, actions: torch.Tensor) -> np.ndarray:
        actions = actions.detach().cpu().numpy()
        if self.discrete:
            return actions.astype(np.int32, copy=False)
        low, high = self.action_space.low, self.action_space.high
        return np.clip(actions, low, high).astype(np.float64 if actions.dtype == np.float64 else np.float32)

    def step(self, actions: np.ndarray) -> StepResult:
        """Synchronous mode: step every env with its action (``[N, ...]``, from :meth:`actions_to_numpy`)."""
        for group, columns in enumerate(self.group_columns):
            self.send_group(group, actions[columns])
        if len(self.pools) == 1:
            return self.recv_group(0)
        steps, ended = [], []
        for group in range(len(self.pools)):
            steps.append(self.recv_group(group))
            ended += self.stats.ended_now  # each group's update replaces it: keep the step's ends of all groups
        self.stats.ended_now = ended
        return StepResult(*(torch.cat(parts) for parts in zip(*steps)))

    def send_group(self, group: int, actions: np.ndarray) -> None:
        """Synchronous mode: start the step of group ``group``'s envs (its ``[N / G, ...]`` actions); returns at
        once, and :meth:`recv_group` takes the result."""
        self.pools[group].send(actions)

    def recv_group(self, group: int) -> StepResult:
        """Synchronous mode: wait for the step :meth:`send_group` started; the group's ``[N / G]`` rows. Updates
        the group's entries of :attr:`valid` (a new tensor: one taken before stays as it was)."""
        obs, reward, terminated, truncated, info = self.pools[group].recv()
        columns = self.group_columns[group]
        self._valid[columns] = self._account(self._env_ids[columns], reward, terminated, truncated, info)
        self.valid = self._to_device(self._valid.copy())
        return StepResult(self._obs(obs), self._to_device(reward, torch.float32),
                          self._to_device(terminated), self._to_device(truncated))

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Asynchronous mode: step ``env_ids`` with ``actions`` (from :meth:`actions_to_numpy`) in the background."""
        self.pools[0].send(actions, env_ids)

    def recv(self) -> Received:
        """Asynchronous mode: the next ``batch_size`` envs to finish the step :meth:`send` gave them."""
        obs, reward, terminated, truncated, info = self.pools[0].recv()
        env_ids = info["env_id"].astype(np.int64)
        valid = self._account(env_ids, reward, terminated, truncated, info)
        return Received(env_ids, self._obs(obs), self._to_device(reward, torch.float32),
                        self._to_device(terminated), self._to_device(truncated), self._to_device(valid))

    def _account(self, env_ids: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 info: Dict[str, Any]) -> np.ndarray:
        """Episode statistics of one step of ``env_ids``; returns whether their new observations are real."""
        counted = ~self._prev_done[env_ids]
        if self.family == "atari":
            raw_reward, game_over = info["reward"], info["terminated"].astype(bool) | truncated
        else:
            raw_reward, game_over = reward, terminated | truncated
        self.stats.update(env_ids, raw_reward, counted, game_over & counted)
        done = terminated | truncated
        self._prev_done[env_ids] = done
        return ~done

    def close(self) -> None:
        for pool in self.pools:
            close = getattr(pool, "close", None)
            if close is not None:
                close()


def space_shapes(adapter: EnvPoolAdapter) -> Tuple[Tuple[int, ...], Tuple[int, ...], Optional[int]]:
    """``(obs_shape, action_shape, num_discrete_actions or None)``."""
    obs_shape = tuple(adapter.observation_space.shape)
    if adapter.discrete:
        return obs_shape, (), int(adapter.action_space.n)
    return obs_shape, tuple(adapter.action_space.shape), None
