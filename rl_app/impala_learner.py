"""The IMPALA learner: V-trace targets and the actor-critic loss on a batch of unrolls.

Espeholt et al. 2018 (arXiv:1802.01561), Section 4. For a batch ``[T, N]`` collected with behaviour
policy ``mu`` and the learner's current policy ``pi`` and value ``V``:

    rho_t = min(rho_clip, pi(a_t|x_t) / mu(a_t|x_t)),   c_t = lambda * min(c_clip, pi / mu)
    vs_t  = V(x_t) + sum_{s>=t} gamma^{s-t} (prod_{i=t}^{s-1} c_i) rho_s delta_s V      (eq. 1)
    pg_advantage_t = min(pg_rho_clip, pi / mu) (r_t + gamma vs_{t+1} - V(x_t))     (Section 4.2)

and the loss over the valid rows (the autoreset row after a done is not a transition):

    L = -sum(pg_advantage * log pi(a_t|x_t)) + vf_coef * 0.5 sum((vs - V(x_t))^2) - ent_coef * sum(H[pi])

with sums as in the paper (``algo.loss_reduction=sum``; its RMSProp epsilon of 0.01 is sized for them) or
means (``mean``). The logged parts are always means. ``algo.norm_adv`` (off in the paper's recipe)
normalises ``pg_advantage`` to zero mean and unit variance over the valid rows first.

``kernels.compute_vtrace`` computes ``vs`` and ``pg_advantages`` from the rewards times ``algo.reward_scale``,
with terminated and truncated kept apart (a truncation bootstraps from the final observation's value, stored
on the next row or, at ``t = T - 1``, ``V(bootstrap_obs)``).
"""

from __future__ import annotations

import math

from typing import Any, Dict, NamedTuple

import torch
from torch import nn

import kernels
from rl_app.impala_actor import Unroll
from rl_app.models import ActorCritic
from rl_app.ppo import explained_variance, masked_mean, normalize_advantages
from rl_app.tracking import PhaseTimer


class Targets(NamedTuple):
    """What the learner derives from a batch; every tensor ``[T, N]``."""

    target_log_probs: torch.Tensor  # log pi(a_t | x_t), differentiable
    entropy: torch.Tensor  # H[pi(. | x_t)], differentiable
    values: torch.Tensor  # V(x_t), differentiable
    log_rhos: torch.Tensor  # log pi - log mu, detached
    vs: torch.Tensor  # V-trace value targets, detached
    pg_advantages: torch.Tensor  # detached


def compute_targets(model: ActorCritic, batch: Unroll, algo: Any) -> Targets:
    """Re-evaluate ``batch`` under the learner's ``model`` and compute V-trace targets (see module doc)."""
    T, N = batch.rewards.shape
    evaluation = model.evaluate(batch.obs.flatten(0, 1), batch.actions.flatten(0, 1))
    target_log_probs = evaluation.log_probs.view(T, N)
    values = evaluation.values.view(T, N)
    with torch.no_grad():
        bootstrap_value = model.value(batch.bootstrap_obs)
    rewards = batch.rewards if algo.reward_scale == 1.0 else batch.rewards * algo.reward_scale
    vtrace = kernels.compute_vtrace(
        rewards, values.detach(), batch.terminated, batch.truncated,
        behaviour_log_probs=batch.behaviour_log_probs, target_log_probs=target_log_probs.detach(),
        gamma=algo.gamma, lambda_=algo.vtrace_lambda, rho_clip=algo.rho_clip, c_clip=algo.c_clip,
        pg_rho_clip=algo.pg_rho_clip, bootstrap_value=bootstrap_value, backend=algo.credit_backend)
    return Targets(target_log_probs, evaluation.entropy.view(T, N), values,
                   (target_log_probs - batch.behaviour_log_probs).detach(), vtrace.vs, vtrace.pg_advantages)


def impala_loss(targets: Targets, valid: torch.Tensor, algo: Any) -> Dict[str, torch.Tensor]:
    """The loss of the module doc and its parts, as 0-d device tensors (``loss`` is differentiable)."""
    weight = valid.to(targets.values.dtype)
    count = weight.sum().clamp(min=1.0)
    pg_advantages = targets.pg_advantages
    if algo.norm_adv:
        pg_advantages = normalize_advantages(pg_advantages, weight, count)
    policy_loss = masked_mean(-(pg_advantages * targets.target_log_probs), weight, count)
    value_loss = masked_mean(0.5 * (targets.vs - targets.values) ** 2, weight, count)
    entropy = masked_mean(targets.entropy, weight, count)
    loss = policy_loss + algo.vf_coef * value_loss - algo.ent_coef * entropy
    if algo.loss_reduction == "sum":
        loss = loss * count
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


# Log-ratio margin above log(rho_clip) that counts as clipped: the learner recomputes the target log-probs in
# another batch shape than the actor, so on-policy ratios land a float32 rounding either side of 1.
CLIPPED_LOG_MARGIN = 1e-3


def importance_stats(log_rhos: torch.Tensor, valid: torch.Tensor, rho_clip: float) -> Dict[str, torch.Tensor]:
    """Mean ``pi/mu`` and the fraction of valid rows where ``rho_clip`` cut it by more than 0.1%
    (``log(pi/mu) > log(rho_clip) + 1e-3``), as 0-d device tensors."""
    weight = valid.to(log_rhos.dtype)
    count = weight.sum().clamp(min=1.0)
    clipped = log_rhos > math.log(rho_clip) + CLIPPED_LOG_MARGIN
    return {"rho_mean": masked_mean(log_rhos.exp(), weight, count),
            "rho_clipped_frac": masked_mean(clipped.to(weight.dtype), weight, count)}


def learner_step(model: ActorCritic, optimizer: torch.optim.Optimizer, batch: Unroll, algo: Any,
                 timer: PhaseTimer) -> Dict[str, torch.Tensor]:
    """One gradient step on ``batch`` (``[T, N]`` on the learner's device); returns detached statistics.

    Nothing here reads a device tensor on the host, so on CUDA the step is queued without a sync.
    """
    with timer.phase("credit_assignment", device=True):
        targets = compute_targets(model, batch, algo)
    with timer.phase("update", device=True):
        losses = impala_loss(targets, batch.valid, algo)
        optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), algo.max_grad_norm)
        optimizer.step()
        model.update_obs_norm(batch.obs)
    stats = {k: v.detach() for k, v in losses.items()}
    stats.update(importance_stats(targets.log_rhos, batch.valid, algo.rho_clip))
    stats["grad_norm"] = grad_norm.detach()
    stats["explained_variance"] = explained_variance(targets.values.detach(), targets.vs, batch.valid)
    return stats


def make_optimizer(model: nn.Module, algo: Any) -> torch.optim.Optimizer:
    """RMSProp as in the paper (Section 5: decay 0.99, epsilon 0.01), or Adam."""
    if algo.optimizer == "rmsprop":
        return torch.optim.RMSprop(model.parameters(), lr=algo.learning_rate, alpha=algo.rmsprop_alpha,
                                   eps=algo.rmsprop_eps, momentum=algo.rmsprop_momentum)
    return torch.optim.Adam(model.parameters(), lr=algo.learning_rate, eps=algo.adam_eps)


class StatsAccumulator:
    """Sums of per-step statistics kept on the device; :meth:`drain` reads them once per log interval."""

    def __init__(self):
        self._sums: Dict[str, torch.Tensor] = {}
        self._count = 0

    def add(self, stats: Dict[str, torch.Tensor]) -> None:
        for key, value in stats.items():
            self._sums[key] = self._sums[key] + value if key in self._sums else value.clone()
        self._count += 1

    def drain(self) -> Dict[str, float]:
        """Means since the last drain (one host sync for all of them)."""
        if not self._count:
            return {}
        keys = list(self._sums)
        means = (torch.stack([self._sums[k].float() for k in keys]) / self._count).tolist()
        self._sums.clear()
        self._count = 0
        return dict(zip(keys, means))
