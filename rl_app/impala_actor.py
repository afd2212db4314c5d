"""IMPALA actors: each owns an EnvPool instance and a policy snapshot, and produces time-major unrolls.

An actor (Espeholt et al. 2018, arXiv:1802.01561, Section 3) copies the learner's latest weights before
each unroll, acts for ``T = unroll_length`` steps with that fixed behaviour policy ``mu``, and records what
V-trace needs: the behaviour log-probabilities ``log mu(a_t | x_t)``, rewards, the terminated and truncated
flags, the ``valid`` mask of EnvPool's next-step autoreset (see :mod:`rl_app.envs`) and the observation
after the last step, whose value bootstraps the window.

:class:`Actor` steps a synchronous EnvPool: every env moves one step per policy call. :class:`AsyncActor`
steps an asynchronous one, so the policy acts on one batch of envs while EnvPool's threads step the others.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from rl_app.config import ConfigError
from rl_app.envs import EnvPoolAdapter, EpisodeStats, space_shapes
from rl_app.graphed_act import GraphedAct
from rl_app.models import ActorCritic


@dataclass
class Unroll:
    """``T`` steps of ``n`` envs, time-major on the host; a batch of unrolls concatenates along ``n``.

    ``bootstrap_obs`` (``[n, *obs_shape]``) is the observation after the last step. With next-step
    autoreset it is the final observation where row ``T - 1`` is done, so ``V(bootstrap_obs)`` is exactly
    the value a truncation there bootstraps from.
    """

    obs: torch.Tensor  # [T, n, *obs_shape], uint8 for Atari frames, float32 otherwise
    actions: torch.Tensor  # [T, n] int64 or [T, n, A] float32
    behaviour_log_probs: torch.Tensor  # [T, n] float32, log mu(a_t | x_t)
    rewards: torch.Tensor  # [T, n] float32
    terminated: torch.Tensor  # [T, n] bool
    truncated: torch.Tensor  # [T, n] bool
    valid: torch.Tensor  # [T, n] bool, false on the autoreset row after a done
    bootstrap_obs: torch.Tensor  # [n, *obs_shape]
    policy_version: int  # learner updates behind the weights that acted

    @staticmethod
    def concat(unrolls: List["Unroll"], device: torch.device) -> "Unroll":
        """One batch ``[T, sum(n)]`` on ``device``; ``policy_version`` is the oldest one in it."""
        pin = device.type == "cuda"
        tensors: Dict[str, torch.Tensor] = {}
        for f in fields(Unroll):
            if f.name == "policy_version":
                continue
            dim = 0 if f.name == "bootstrap_obs" else 1
            joined = torch.cat([getattr(u, f.name) for u in unrolls], dim=dim)
            # Pinned host memory lets the copy overlap with the learner's queued device work.
            tensors[f.name] = (joined.pin_memory() if pin else joined).to(device, non_blocking=True)
        return Unroll(**tensors, policy_version=min(u.policy_version for u in unrolls))


class PolicyStore:
    """The learner's latest weights and their version (the number of learner updates behind them).

    :meth:`publish` stores a fresh copy, so actors never read tensors the optimizer is updating in place.
    On CUDA the copy is ordered after the update by an event that the reading stream waits on; no host sync.
    """

    def __init__(self, model: ActorCritic, version: int = 0):
        self._lock = threading.Lock()
        self._weights: Dict[str, torch.Tensor] = {}
        self._event: Optional[torch.cuda.Event] = None
        self.version = version
        self.publish(model, version)

    def publish(self, model: ActorCritic, version: int) -> None:
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        event = None
        if next(iter(weights.values())).is_cuda:
            event = torch.cuda.Event()
            event.record()
        with self._lock:
            self._weights, self._event, self.version = weights, event, version

    def load_into(self, model: ActorCritic) -> int:
        """Copy the latest weights into ``model`` (on the caller's current stream); return their version."""
        with self._lock:
            weights, event, version = self._weights, self._event, self.version
        stream = torch.cuda.current_stream() if event is not None else None
        if stream is not None:
            stream.wait_event(event)
        with torch.no_grad():
            for name, tensor in model.state_dict().items():
                tensor.copy_(weights[name])
                if stream is not None:
                    # The learner may drop this copy while the read is still queued on our stream.
                    weights[name].record_stream(stream)
        return version


class SharedEpisodeStats:
    """One :class:`EpisodeStats` window over the envs of every actor, safe to update from actor threads.

    Each actor gets a :meth:`view` that offsets its env ids into the shared arrays, so the summary's "last
    100 finished episodes" is one window over all envs, in finishing order.
    """

    def __init__(self, num_envs: int):
        self.stats = EpisodeStats(num_envs)
        self.lock = threading.Lock()

    def view(self, offset: int) -> "_EpisodeStatsView":
        return _EpisodeStatsView(self, offset)

    def mean_return(self) -> Optional[float]:
        with self.lock:
            return self.stats.mean_return()

    def mean_length(self) -> Optional[float]:
        with self.lock:
            return self.stats.mean_length()

    @property
    def episodes(self) -> int:
        return self.stats.episodes

    def state_dict(self) -> Dict[str, Any]:
        with self.lock:
            return self.stats.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        with self.lock:
            self.stats.load_state_dict(state)


class _EpisodeStatsView:
    """Stands in for an adapter's ``stats``: forwards its updates to the shared window."""

    def __init__(self, shared: SharedEpisodeStats, offset: int):
        self._shared = shared
        self._offset = offset

    def update(self, env_ids: np.ndarray, raw_rewards: np.ndarray, counted: np.ndarray, ended: np.ndarray):
        with self._shared.lock:
            self._shared.stats.update(env_ids + self._offset, raw_rewards, counted, ended)


class Actor:
    """One EnvPool instance, its policy snapshot and sampling generator; :meth:`unroll` is all it does.

    Env stepping stays on the host (``EnvPoolAdapter`` on CPU); inference runs on ``device`` (on CUDA in
    the actor's own stream, so it overlaps the learner's work), replayed from a CUDA graph with ``graph_act``
    (``rl_app.graphed_act.GraphedAct``, captured here for the actor's ``num_envs`` observations).
    """

    def __init__(self, actor_id: int, env_cfg: Any, seed: int,
                 build_model: Callable[[EnvPoolAdapter], ActorCritic], stats: SharedEpisodeStats,
                 device: torch.device, env_batch_size: int = 0, graph_act: bool = False):
        self.actor_id = actor_id
        self.envs = EnvPoolAdapter(env_cfg, seed=seed, device=torch.device("cpu"), batch_size=env_batch_size)
        self.envs.stats = stats.view(actor_id * env_cfg.num_envs)
        self.num_envs = self.envs.num_envs
        self.unroll_width = self.num_envs  # the n of every Unroll this actor produces
        self.model = build_model(self.envs).to(device)
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.obs = self.envs.reset()
        self.policy: Any = self.model
        if graph_act:
            try:
                self.policy = GraphedAct(self.model, self.num_envs, tuple(self.obs.shape[1:]), self.obs.dtype,
                                         device)
            except BaseException:
                self.envs.close()
                raise
        # Host counters read by the main thread at log intervals (a stale read only shifts an interval).
        self.steps = 0
        self.env_s = 0.0
        self.inference_s = 0.0

    def unroll(self, length: int, store: PolicyStore) -> Unroll:
        """Refresh the snapshot from ``store``, act ``length`` steps, return the trajectory (:class:`Unroll`)."""
        if self.stream is None:
            return self._unroll(length, store)
        with torch.cuda.stream(self.stream):
            unroll = self._unroll(length, store)
            # The learner reads these tensors on another stream; make them complete before handing over.
            self.stream.synchronize()
            return unroll

    def _unroll(self, length: int, store: PolicyStore) -> Unroll:
        version = store.load_into(self.model)
        obs, valid, rewards, terminated, truncated = [], [], [], [], []
        actions: List[torch.Tensor] = []
        log_probs: List[torch.Tensor] = []
        for _ in range(length):
            obs.append(self.obs)
            valid.append(self.envs.valid)
            t0 = time.perf_counter()
            policy = self.policy.act(self.obs.to(self.device, non_blocking=True), self.generator)
            host_actions = self.envs.actions_to_numpy(policy.actions)
            t1 = time.perf_counter()
            step = self.envs.step(host_actions)
            self.env_s += time.perf_counter() - t1
            self.inference_s += t1 - t0
            actions.append(policy.actions.clone())  # a graph's outputs are overwritten by its next step
            log_probs.append(policy.log_probs.clone())
            rewards.append(step.rewards)
            terminated.append(step.terminated)
            truncated.append(step.truncated)
            self.obs = step.obs
        self.steps += length * self.num_envs
        return Unroll(
            obs=torch.stack(obs), actions=torch.stack(actions).cpu(),
            behaviour_log_probs=torch.stack(log_probs).cpu(), rewards=torch.stack(rewards),
            terminated=torch.stack(terminated), truncated=torch.stack(truncated), valid=torch.stack(valid),
            bootstrap_obs=self.obs, policy_version=version)

    def close(self) -> None:
        self.envs.close()


class AsyncActor(Actor):
    """An actor on an asynchronous EnvPool (``env_batch_size`` envs per ``recv``) with ``[T, env_batch_size]`` unrolls.

    Each env keeps its own time index into host buffers of ``T + 1`` rows. A received batch completes the
    pending step of its envs; those that have recorded ``T`` steps and their bootstrap observation are
    parked (sent no action), the policy acts on the others and sends their actions at once, so inference on
    this batch overlaps EnvPool stepping the envs still in flight. As soon as ``env_batch_size`` envs are
    parked, they leave as one unroll, the snapshot is refreshed, and it acts on their bootstrap observations,
    which start their next unroll.

    Parked envs leave in groups rather than once all are parked because EnvPool's ``recv`` blocks until
    ``env_batch_size`` envs have finished a step: envs drift apart in time (``recv`` returns them in
    finishing order), so waiting for all could leave fewer than that in flight, forever. With fewer than
    ``env_batch_size`` parked before every ``recv``, more than ``num_envs - env_batch_size >= env_batch_size``
    are in flight. A refresh also changes the policy of envs in mid-unroll: each step's behaviour
    log-probability is that of the snapshot that acted it, and an unroll's ``policy_version`` is the oldest.
    """

    def __init__(self, actor_id: int, env_cfg: Any, seed: int,
                 build_model: Callable[[EnvPoolAdapter], ActorCritic], stats: SharedEpisodeStats,
                 device: torch.device, env_batch_size: int):
        super().__init__(actor_id, env_cfg, seed, build_model, stats, device, env_batch_size)
        self.unroll_width = env_batch_size
        self._length = 0  # T of the buffers; they are made by the first unroll, which knows it
        self._parked: List[int] = []

    def _unroll(self, length: int, store: PolicyStore) -> Unroll:
        if not self._length:
            self._start(length, store)
        elif length != self._length:
            raise ValueError(f"an AsyncActor keeps its unroll_length: {self._length}, asked for {length}")
        while len(self._parked) < self.unroll_width:
            self._receive()
        group = torch.tensor(self._parked[:self.unroll_width])
        del self._parked[:self.unroll_width]
        T = self._length
        unroll = Unroll(
            obs=self._obs[:T, group], actions=self._actions[:, group],
            behaviour_log_probs=self._log_probs[:, group], rewards=self._rewards[:, group],
            terminated=self._terminated[:, group], truncated=self._truncated[:, group],
            valid=self._valid[:T, group], bootstrap_obs=self._obs[T, group],
            policy_version=int(self._versions[group].min()))
        self._obs[0, group] = self._obs[T, group]
        self._valid[0, group] = self._valid[T, group]
        self._time[group] = 0
        self._versions[group] = store.load_into(self.model)
        self._act(group)
        return unroll

    def _start(self, length: int, store: PolicyStore) -> None:
        """Make the buffers, put the reset observations on row 0 and send every env its first action."""
        self._length = length
        n = self.num_envs
        _, action_shape, _ = space_shapes(self.envs)
        self._obs = torch.zeros((length + 1, *self.obs.shape), dtype=self.obs.dtype)
        self._valid = torch.ones(length + 1, n, dtype=torch.bool)
        self._actions = torch.zeros((length, n, *action_shape),
                                    dtype=torch.int64 if self.envs.discrete else torch.float32)
        self._log_probs = torch.zeros(length, n)
        self._rewards = torch.zeros(length, n)
        self._terminated = torch.zeros(length, n, dtype=torch.bool)
        self._truncated = torch.zeros(length, n, dtype=torch.bool)
        self._time = torch.zeros(n, dtype=torch.int64)
        self._obs[0] = self.obs
        self._versions = torch.full((n,), store.load_into(self.model), dtype=torch.int64)
        self._act(torch.arange(n))

    def _receive(self) -> None:
        """Complete the pending step of the next batch; park the envs at ``T``, act on the rest."""
        t0 = time.perf_counter()
        got = self.envs.recv()
        self.env_s += time.perf_counter() - t0
        ids = torch.from_numpy(got.env_ids)
        step = self._time[ids]
        self._rewards[step, ids] = got.rewards
        self._terminated[step, ids] = got.terminated
        self._truncated[step, ids] = got.truncated
        step += 1
        self._time[ids] = step
        self._obs[step, ids] = got.obs
        self._valid[step, ids] = got.valid
        self.steps += len(ids)
        full = step == self._length
        self._parked.extend(ids[full].tolist())
        if not full.all():
            self._act(ids[~full])

    def _act(self, ids: torch.Tensor) -> None:
        """Sample actions for envs ``ids`` at their current time index, record them and send them."""
        t0 = time.perf_counter()
        step = self._time[ids]
        policy = self.model.act(self._obs[step, ids].to(self.device, non_blocking=True), self.generator)
        actions, log_probs = policy.actions.cpu(), policy.log_probs.cpu()
        t1 = time.perf_counter()
        self._actions[step, ids] = actions
        self._log_probs[step, ids] = log_probs
        self.envs.send(self.envs.actions_to_numpy(actions), ids.numpy())
        self.env_s += time.perf_counter() - t1
        self.inference_s += t1 - t0


def split_envs(num_envs: int, num_actors: int) -> int:
    """Envs per actor: ``env.num_envs`` is split evenly among ``algo.num_actor_threads`` actors."""
    if num_envs % num_actors != 0:
        raise ConfigError(f"env.num_envs ({num_envs}) must be a multiple of algo.num_actor_threads ({num_actors})")
    return num_envs // num_actors


def unrolls_per_batch(batch_size: int, unroll_width: int) -> int:
    """Unrolls of ``unroll_width`` trajectories the learner concatenates into ``algo.batch_size`` of them."""
    if batch_size % unroll_width != 0:
        raise ConfigError(f"algo.batch_size ({batch_size}) must be a multiple of the trajectories per unroll "
                          f"({unroll_width}: env.num_envs / algo.num_actor_threads, or algo.actor_env_batch_size "
                          f"when it is set)")
    return batch_size // unroll_width


def actor_seed(seed: int, actor_id: int, envs_per_actor: int) -> int:
    """EnvPool seeds env ``i`` with ``seed + i``; offsetting by actor keeps every env's seed distinct."""
    return seed + actor_id * envs_per_actor


def actor_env_cfg(env_cfg: Any, envs_per_actor: int) -> Any:
    """A copy of ``env_cfg`` with ``num_envs`` set to one actor's share."""
    from omegaconf import OmegaConf

    sub = OmegaConf.to_container(env_cfg, resolve=True) if OmegaConf.is_config(env_cfg) else dict(env_cfg)
    sub["num_envs"] = envs_per_actor
    return OmegaConf.create(sub)

