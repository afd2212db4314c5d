"""Actor-critic networks and the policy-distribution math they use.

The distribution functions are written out rather than taken from ``torch.distributions`` because its
argument validation reads tensors back to the host, which would put a GPU sync in the rollout loop.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import nn

_LOG_2PI = math.log(2.0 * math.pi)
Gather = Callable[[torch.Tensor], torch.Tensor]  # one tensor of every data-parallel replica, stacked in rank order


class PolicyOutput(NamedTuple):
    actions: torch.Tensor  # [N] int64 (discrete) or [N, A] float32
    log_probs: torch.Tensor  # [N]
    values: torch.Tensor  # [N]


class EvalOutput(NamedTuple):
    log_probs: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B]
    values: torch.Tensor  # [B]


# --------------------------------------------------------------------------- distribution math
def categorical_sample(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Sample ``[..., K]`` logits by the Gumbel-max trick from uniform draws in [0, 1) of the same shape (no
    host sync): ``argmax(logits - log(-log(u)))``."""
    return torch.argmax(logits - torch.log(-torch.log(uniform.clamp(1e-20, 1.0))), dim=-1)


def categorical_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits, dim=-1)
    return log_p.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def normal_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over the action dimensions."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(-1)


def normal_entropy(log_std: torch.Tensor) -> torch.Tensor:
    return (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)


# --------------------------------------------------------------------------- building blocks
def layer_init(layer: nn.Module, std: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights and constant bias, the initialisation the PPO recipes use."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class RunningObsNorm(nn.Module):
    """Running mean and variance of observations (parallel-variance update), kept as module buffers.

    Updated from whole rollout batches on the device, so it needs no host sync and is checkpointed with
    the model.
    """

    def __init__(self, shape: Tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(eps))
        self.clip = clip
        self.eps = eps

    @torch.no_grad()
    def update(self, obs: torch.Tensor, gather: Optional[Gather] = None) -> None:
        """Add a batch ``[..., *shape]``. With ``gather`` (``rl_app.distributed.Replicas.gather``: a tensor of every
        data-parallel replica, stacked), the batch is the union of every replica's equally sized batch."""
        obs = obs.reshape(-1, *self.mean.shape).float()
        batch_mean, batch_var, n = obs.mean(0), obs.var(0, unbiased=False), obs.shape[0]
        if gather is not None:
            every = gather(torch.stack([batch_mean, batch_var]))  # [replicas, 2, *shape]
            means, variances = every[:, 0], every[:, 1]
            batch_mean = means.mean(0)
            batch_var = variances.mean(0) + (means - batch_mean).square().mean(0)
            n *= every.shape[0]
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * (n / total)
        self.var.copy_((self.var * self.count + batch_var * n + delta * delta * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)


class ActorCritic(nn.Module):
    """Shared interface: ``act`` samples during rollouts, ``evaluate`` scores stored actions in updates."""

    discrete: bool = True
    noise_width: int  # logits per observation (discrete) or action dimensions (Gaussian)

    def features(self, obs: torch.Tensor):  # pragma: no cover - overridden
        raise NotImplementedError

    def update_obs_norm(self, obs: torch.Tensor, gather: Optional[Gather] = None) -> None:
        """Overridden by models that normalise observations (``gather``: see :meth:`RunningObsNorm.update`)."""

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.features(obs)[1]

    def draw_noise(self, batch: int, device: torch.device, generator: Optional[torch.Generator] = None,
                   out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The random draws one :meth:`act` on ``batch`` observations takes, ``[batch, noise_width]`` float32:
        uniform in [0, 1) for a discrete policy (Gumbel-max), standard normal for a Gaussian one. ``out``: a
        buffer of that shape to draw into (the same numbers)."""
        draw = torch.rand if self.discrete else torch.randn
        return draw((batch, self.noise_width), device=device, generator=generator, out=out)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, generator: Optional[torch.Generator] = None) -> PolicyOutput:
        """Sample actions for ``[B, *obs_shape]`` observations; the draws come from ``generator``."""
        return self.act_with_noise(obs, self.draw_noise(obs.shape[0], obs.device, generator))

    @torch.no_grad()
    def act_with_noise(self, obs: torch.Tensor, noise: torch.Tensor) -> PolicyOutput:
        """:meth:`act` with its random draws given (``noise`` from :meth:`draw_noise`): a function of tensors
        only, so a CUDA graph can replay it (``rl_app.graphed_act``)."""
        dist, values = self.features(obs)
        if self.discrete:
            actions = categorical_sample(dist, noise)
            return PolicyOutput(actions, categorical_log_prob(dist, actions), values)
        mean, log_std = dist
        actions = mean + noise * torch.exp(log_std)
        return PolicyOutput(actions, normal_log_prob(mean, log_std, actions), values)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> EvalOutput:
        dist, values = self.features(obs)
        if self.discrete:
            return EvalOutput(categorical_log_prob(dist, actions), categorical_entropy(dist), values)
        mean, log_std = dist
        return EvalOutput(normal_log_prob(mean, log_std, actions), normal_entropy(log_std).expand(mean.shape[0]),
                          values)


class MLPActorCritic(ActorCritic):
    """Separate two-layer tanh MLPs for policy and value (the classic-control and MuJoCo recipe)."""

    def __init__(self, obs_dim: int, num_actions: Optional[int], action_dim: int = 0, hidden: int = 64,
                 normalize_obs: bool = False):
        super().__init__()
        self.discrete = num_actions is not None
        self.obs_norm = RunningObsNorm((obs_dim,)) if normalize_obs else None
        out = self.noise_width = num_actions if self.discrete else action_dim
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, 1), std=1.0))
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, out), std=0.01))
        if not self.discrete:
            self.actor_log_std = nn.Parameter(torch.zeros(action_dim))

    def update_obs_norm(self, obs: torch.Tensor, gather: Optional[Gather] = None) -> None:
        if self.obs_norm is not None:
            self.obs_norm.update(obs, gather)

    def features(self, obs: torch.Tensor):
        x = obs.float()
        if self.obs_norm is not None:
            x = self.obs_norm(x)
        values = self.critic(x).squeeze(-1)
        out = self.actor(x)
        if self.discrete:
            return out, values
        return (out, self.actor_log_std.expand_as(out)), values


def nature_cnn_output_hw(height: int, width: int) -> Tuple[int, int]:
    """Height and width after the Nature CNN's convolutions (8x8 stride 4, 4x4 stride 2, 3x3 stride 1): 7x7 for
    84x84 frames; at least 1x1 from 36x36 on (``rl_app.config.MIN_ATARI_IMAGE``)."""
    def out(n: int) -> int:
        return ((n - 8) // 4 + 1 - 4) // 2 + 1 - 2
    return out(height), out(width)


class NatureCNNActorCritic(ActorCritic):
    """The Nature-DQN torso (Mnih et al. 2015) with policy and value heads on uint8 ``[N, C, H, W]`` frames
    (84x84 by default, as EnvPool's Atari ``img_height`` / ``img_width``)."""

    def __init__(self, in_channels: int, num_actions: int, frame_hw: Tuple[int, int] = (84, 84)):
        super().__init__()
        out_h, out_w = nature_cnn_output_hw(*frame_hw)
        self.torso = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * out_h * out_w, 512)), nn.ReLU())
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.noise_width = num_actions
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def features(self, obs: torch.Tensor):
        hidden = self.torso(obs.float() * (1.0 / 255.0))
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


def build_model(family: str, obs_shape: Tuple[int, ...], num_actions: Optional[int],
                action_shape: Tuple[int, ...], normalize_obs: bool = False) -> ActorCritic:
    """The network for an env family: ``atari`` gets the Nature CNN, the others MLPs."""
    if family == "atari":
        if num_actions is None:
            raise ValueError("env.family=atari needs a discrete action space")
        return NatureCNNActorCritic(obs_shape[0], num_actions, frame_hw=tuple(obs_shape[1:3]))
    obs_dim = int(np.prod(obs_shape))
    action_dim = int(np.prod(action_shape)) if action_shape else 0
    return MLPActorCritic(obs_dim, num_actions, action_dim, normalize_obs=normalize_obs)
