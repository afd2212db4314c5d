"""IMPALA actors: each owns an EnvPool instance and a policy snapshot, and produces time-major unrolls.

An actor (Espeholt et al. 2018, arXiv:1802.01561, Section 3) copies the learner's latest weights before
each unroll, acts for ``T = unroll_length`` steps with that fixed behaviour policy ``mu``, and records what
V-trace needs: the behaviour log-probabilities ``log mu(a_t | x_t)``, rewards, the terminated and truncated
flags, the ``valid`` mask of EnvPool's next-step autoreset (see :mod:`rl_app.envs`) and the observation
after the last step, whose value bootstraps the window.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from rl_app.envs import EnvPoolAdapter, EpisodeStats
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

    def __init__(self, model: ActorCritic):
        self._lock = threading.Lock()
        self._weights: Dict[str, torch.Tensor] = {}
        self._event: Optional[torch.cuda.Event] = None
        self.version = 0
        self.publish(model, 0)

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
    the actor's own stream, so it overlaps the learner's work).
    """

    def __init__(self, actor_id: int, env_cfg: Any, seed: int,
                 build_model: Callable[[EnvPoolAdapter], ActorCritic], stats: SharedEpisodeStats,
                 device: torch.device):
        self.actor_id = actor_id
        self.envs = EnvPoolAdapter(env_cfg, seed=seed, device=torch.device("cpu"))
        self.envs.stats = stats.view(actor_id * env_cfg.num_envs)
        self.num_envs = self.envs.num_envs
        self.model = build_model(self.envs).to(device)
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.obs = self.envs.reset()
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
            policy = self.model.act(self.obs.to(self.device, non_blocking=True), self.generator)
            host_actions = self.envs.actions_to_numpy(policy.actions)
            t1 = time.perf_counter()
            step = self.envs.step(host_actions)
            self.env_s += time.perf_counter() - t1
            self.inference_s += t1 - t0
            actions.append(policy.actions)
            log_probs.append(policy.log_probs)
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


def split_envs(num_envs: int, num_actors: int) -> int:
    """Envs per actor: ``env.num_envs`` is split evenly among ``algo.num_actor_threads`` actors."""
    if num_envs % num_actors != 0:
        raise ValueError(f"env.num_envs ({num_envs}) must be a multiple of algo.num_actor_threads ({num_actors})")
    return num_envs // num_actors


def unrolls_per_batch(batch_size: int, envs_per_actor: int) -> int:
    """Unrolls the learner concatenates to make ``algo.batch_size`` trajectories (columns)."""
    if batch_size % envs_per_actor != 0:
        raise ValueError(f"algo.batch_size ({batch_size}) must be a multiple of the envs per actor "
                         f"(env.num_envs / algo.num_actor_threads = {envs_per_actor})")
    return batch_size // envs_per_actor


def actor_seed(seed: int, actor_id: int, envs_per_actor: int) -> int:
    """EnvPool seeds env ``i`` with ``seed + i``; offsetting by actor keeps every env's seed distinct."""
    return seed + actor_id * envs_per_actor


def actor_env_cfg(env_cfg: Any, envs_per_actor: int) -> Any:
    """A copy of ``env_cfg`` with ``num_envs`` set to one actor's share."""
    from omegaconf import OmegaConf

    sub = OmegaConf.to_container(env_cfg, resolve=True) if OmegaConf.is_config(env_cfg) else dict(env_cfg)
    sub["num_envs"] = envs_per_actor
    return OmegaConf.create(sub)

