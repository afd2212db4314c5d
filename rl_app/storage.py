"""Time-major rollout storage, preallocated once on the training device."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Tuple

import torch


@dataclass
class Rollout:
    """One rollout of ``T = num_steps`` steps of ``N = num_envs`` environments, every tensor ``[T, N, ...]``.

    ``valid[t, n]`` is false on the row that follows a done (EnvPool's next-step autoreset: the action was
    ignored); such rows are left out of the losses and the advantage statistics. ``values[t + 1]`` on such
    a row is the value of the final observation, which a truncation at ``t`` bootstraps from.
    """

    obs: torch.Tensor  # uint8 for Atari frames, float32 otherwise
    actions: torch.Tensor  # int64 [T, N] or float32 [T, N, A]
    log_probs: torch.Tensor  # float32, behaviour log-probabilities
    values: torch.Tensor  # float32, V(obs[t])
    rewards: torch.Tensor  # float32
    terminated: torch.Tensor  # bool
    truncated: torch.Tensor  # bool
    valid: torch.Tensor  # bool
    advantages: torch.Tensor  # float32, written by credit assignment (``out=``, no allocation per rollout)
    returns: torch.Tensor  # float32, value targets, likewise

    @classmethod
    def allocate(cls, num_steps: int, num_envs: int, obs_shape: Tuple[int, ...], obs_dtype: torch.dtype,
                 action_shape: Tuple[int, ...], discrete: bool, device: torch.device) -> "Rollout":
        tn = (num_steps, num_envs)
        return cls(
            obs=torch.zeros(tn + tuple(obs_shape), dtype=obs_dtype, device=device),
            actions=torch.zeros(tn + tuple(action_shape), dtype=torch.int64 if discrete else torch.float32,
                                device=device),
            log_probs=torch.zeros(tn, device=device),
            values=torch.zeros(tn, device=device),
            rewards=torch.zeros(tn, device=device),
            terminated=torch.zeros(tn, dtype=torch.bool, device=device),
            truncated=torch.zeros(tn, dtype=torch.bool, device=device),
            valid=torch.ones(tn, dtype=torch.bool, device=device),
            advantages=torch.zeros(tn, device=device),
            returns=torch.zeros(tn, device=device),
        )

    def flat(self) -> "Rollout":
        """A view with ``T`` and ``N`` merged into one batch dimension (for minibatching)."""
        return Rollout(**{f.name: getattr(self, f.name).flatten(0, 1) for f in fields(self)})
