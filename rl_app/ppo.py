"""The PPO update as functions of tensors: masked clipped-objective loss and the minibatch epochs.

Clipped surrogate objective, clipped value loss and entropy bonus as in Schulman et al. 2017
(arXiv:1707.06347); advantages from GAE (arXiv:1506.02438). Rows that are not real transitions
(``valid`` false: the autoreset row after a done) carry zero weight in every loss and statistic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, NamedTuple, Optional

import torch
from torch import nn

from rl_app.graphed_update import optimizer_tensors
from rl_app.models import ActorCritic

if TYPE_CHECKING:
    from rl_app.distributed import Replicas
    from rl_app.graphed_update import GraphedEpochs


class PPOBatch(NamedTuple):
    """Flat ``[B]`` training batch (``obs``: ``[B, *obs_shape]``; ``actions``: ``[B]`` or ``[B, A]``)."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor  # behaviour log-probabilities at collection time
    values: torch.Tensor  # V at collection time (for value clipping)
    advantages: torch.Tensor
    returns: torch.Tensor  # value targets
    valid: torch.Tensor  # bool


class PPOLoss(NamedTuple):
    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def masked_mean(x: torch.Tensor, weight: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``sum(x * weight) / count`` with ``weight`` 0/1 and ``count = max(sum(weight), 1)``."""
    return (x * weight).sum() / count


def normalize_advantages(advantages: torch.Tensor, weight: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit (unbiased) standard deviation over the rows with ``weight`` 1."""
    mean = masked_mean(advantages, weight, count)
    var = ((advantages - mean) ** 2 * weight).sum() / (count - 1.0).clamp(min=1.0)
    return (advantages - mean) / (var.sqrt() + 1e-8)


def ppo_loss(new_log_probs: torch.Tensor, entropy: torch.Tensor, new_values: torch.Tensor, mb: PPOBatch, *,
             clip_coef: float, clip_vloss: bool, ent_coef: float, vf_coef: float, norm_adv: bool) -> PPOLoss:
    """PPO's loss on one minibatch.

    ``loss = pg_loss - ent_coef * entropy + vf_coef * v_loss`` with
    ``pg_loss = mean(max(-A r, -A clip(r, 1 - clip_coef, 1 + clip_coef)))``, ``r = exp(new - old log-prob)``,
    and ``v_loss = 0.5 mean(max((V - G)^2, (V_old + clip(V - V_old, -clip_coef, clip_coef) - G)^2))`` (the
    unclipped ``0.5 mean((V - G)^2)`` when ``clip_vloss`` is false). Means run over valid rows only.
    """
    weight = mb.valid.to(new_values.dtype)
    count = weight.sum().clamp(min=1.0)
    log_ratio = new_log_probs - mb.log_probs
    ratio = log_ratio.exp()
    advantages = normalize_advantages(mb.advantages, weight, count) if norm_adv else mb.advantages

    pg_loss = masked_mean(torch.max(-advantages * ratio,
                                    -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)), weight, count)
    v_error = (new_values - mb.returns) ** 2
    if clip_vloss:
        v_clipped = mb.values + (new_values - mb.values).clamp(-clip_coef, clip_coef)
        v_error = torch.max(v_error, (v_clipped - mb.returns) ** 2)
    v_loss = 0.5 * masked_mean(v_error, weight, count)
    entropy_mean = masked_mean(entropy, weight, count)
    loss = pg_loss - ent_coef * entropy_mean + vf_coef * v_loss
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, weight, count)  # Schulman's k3 estimator
        clip_fraction = masked_mean(((ratio - 1.0).abs() > clip_coef).to(weight.dtype), weight, count)
    return PPOLoss(loss, pg_loss.detach(), v_loss.detach(), entropy_mean.detach(), approx_kl, clip_fraction)


STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


def ppo_update(model: ActorCritic, optimizer: torch.optim.Optimizer, batch: PPOBatch, *, num_minibatches: int,
               update_epochs: int, clip_coef: float, clip_vloss: bool, ent_coef: float, vf_coef: float,
               norm_adv: bool, max_grad_norm: float, target_kl: Optional[float] = None,
               generator: Optional[torch.Generator] = None,
               replicas: Optional["Replicas"] = None,
               graph: Optional["GraphedEpochs"] = None) -> Dict[str, torch.Tensor]:
    """``update_epochs`` passes of shuffled minibatches over ``batch``; returns mean statistics as tensors.

    Nothing is read back to the host unless ``target_kl`` is set: then the approximate KL of each epoch is
    read once to decide whether to stop early. With data-parallel ``replicas`` every minibatch's gradients are
    averaged over them before clipping, and the early stop uses the epoch's KL averaged over them, so all take
    the same steps. With ``graph`` (``rl_app.graphed_update.GraphedEpochs``; not with ``replicas``) each epoch
    is replayed from a CUDA graph: the same steps from the same permutations (drawn outside the graph), so the
    same result as eager epochs with the same optimizer. A replay runs what was captured: the arguments other
    than ``batch``'s values, ``update_epochs``, ``target_kl`` and ``generator`` must be those of the call that
    captured (checked), and the learning rate changes only through ``rl_app.graphed_update.set_learning_rate``.

    Raises:
        ValueError: ``graph`` together with ``replicas``.
        RuntimeError: from ``graph``, when a tensor the epoch uses is not where the graph captured it, or a
            setting differs from the capture's.
    """
    if graph is not None and replicas is not None:
        raise ValueError("ppo_update: graph and replicas cannot be combined (gradients are averaged by "
                         "collectives outside the graph)")
    size = batch.valid.shape[0]
    mb_size = size // num_minibatches
    device = batch.valid.device
    if graph is None:
        stats = torch.zeros(len(STAT_NAMES), device=device)
        epoch_kl = torch.zeros((), device=device)
    else:
        order, stats, epoch_kl = graph.buffers(size, len(STAT_NAMES))
        stats.zero_()
        # What the captured epoch has baked in besides tensors (the learning rate is a tensor: left out).
        key = (mb_size, num_minibatches, clip_coef, clip_vloss, ent_coef, vf_coef, norm_adv, max_grad_norm,
               id(model), id(optimizer), [sorted((k, v) for k, v in group.items() if k not in ("params", "lr"))
                                          for group in optimizer.param_groups])

    def epoch(order: torch.Tensor) -> None:
        for start in range(0, mb_size * num_minibatches, mb_size):
            idx = order[start:start + mb_size]
            mb = PPOBatch(*(t[idx] for t in batch))
            new = model.evaluate(mb.obs, mb.actions)
            out = ppo_loss(new.log_probs, new.entropy, new.values, mb, clip_coef=clip_coef, clip_vloss=clip_vloss,
                           ent_coef=ent_coef, vf_coef=vf_coef, norm_adv=norm_adv)
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            if replicas is not None:
                replicas.average_gradients(model.parameters())
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            stats.add_(torch.stack([out.policy_loss, out.value_loss, out.entropy, out.approx_kl,
                                    out.clip_fraction, grad_norm.detach().to(stats.dtype)]))
            epoch_kl.add_(out.approx_kl)

    epochs_done = 0
    for _ in range(update_epochs):
        permutation = torch.randperm(size, device=device, generator=generator)
        epoch_kl.zero_()
        if graph is None:
            epoch(permutation)
        else:
            order.copy_(permutation)
            # The optimizer's state exists from its first step on: listed at each epoch.
            graph.run(lambda: epoch(order), [*batch, *model.buffers(), *optimizer_tensors(optimizer)], key)
        epochs_done += 1
        kl = epoch_kl
        if replicas is not None and target_kl is not None:
            kl = replicas.average(kl)
        if target_kl is not None and float(kl) / num_minibatches > target_kl:
            break
    out = dict(zip(STAT_NAMES, (stats / max(epochs_done * num_minibatches, 1)).unbind(0)))
    out["update_epochs_done"] = torch.tensor(float(epochs_done))
    return out


def explained_variance(values: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``1 - Var[G - V] / Var[G]`` over valid rows (a tensor; NaN when the returns have no variance)."""
    w = valid.to(values.dtype)
    n = w.sum().clamp(min=1.0)
    mean_g = (returns * w).sum() / n
    var_g = (((returns - mean_g) ** 2) * w).sum() / n
    err = returns - values
    mean_e = (err * w).sum() / n
    var_e = (((err - mean_e) ** 2) * w).sum() / n
    return 1.0 - var_e / var_g
