"""PPO training loop: rollout, credit assignment, update, logging, in that order, once per iteration.

Started by ``torchrun``, every process runs this loop as a data-parallel replica (rl_app/distributed.py).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Dict

import torch

import kernels
from rl_app.checkpoint import TrainState, load_resume, resume_into, rng_state, save_checkpoint
from rl_app.distributed import Replicas, stream_seed
from rl_app.envs import EnvPoolAdapter, space_shapes
from rl_app.graphed_act import GraphedAct, graph_act_enabled
from rl_app.graphed_update import GraphedEpochs, graph_update_enabled, prepare_optimizer, set_learning_rate
from rl_app.models import build_model
from rl_app.ppo import PPOBatch, explained_variance, ppo_update
from rl_app.runtime import STOP, StopSignal, setup_process
from rl_app.storage import Rollout
from rl_app.tracking import PhaseTimer, ReplicaLogger, RunLogger, summary_payload


def collect_rollout(envs: EnvPoolAdapter, policy: Any, rollout: Rollout, obs: torch.Tensor,
                    generator: torch.Generator, timer: PhaseTimer) -> torch.Tensor:
    """Fill ``rollout`` with the next ``T`` steps of every env, acting on ``obs`` (``[N, *obs_shape]``, the
    observation of each env now) with ``policy.act(obs, generator)`` (the model, or its
    ``rl_app.graphed_act.GraphedAct``); return the observation after the window (``obs`` itself, overwritten: no
    allocation per step).

    The envs step a group at a time (``envs.group_columns``): the policy acts on group g, sends it its actions,
    then waits for the next group's step to end and acts on that one, so while the policy runs on one group the
    others are stepping. With one group this is act, step, act, step. Every row of step ``t`` is acted on by
    the same parameters, so a rollout does not depend on the grouping but for the order in which actions are
    sampled from ``generator``.
    """
    T = rollout.rewards.shape[0]
    rollout.obs[0] = obs
    for t in range(T + 1):
        current = rollout.obs[t] if t < T else obs  # where step t's observations go: one copy each
        for group, cols in enumerate(envs.group_columns):
            if t > 0:  # the group's step t - 1 ends
                with timer.phase("env"):
                    step = envs.recv_group(group)
                rollout.rewards[t - 1, cols] = step.rewards
                rollout.terminated[t - 1, cols] = step.terminated
                rollout.truncated[t - 1, cols] = step.truncated
                current[cols] = step.obs
            if t == T:
                continue
            rollout.valid[t, cols] = envs.valid[cols]
            with timer.phase("inference"):
                acted = policy.act(current[cols], generator)
                actions = envs.actions_to_numpy(acted.actions)
            rollout.actions[t, cols] = acted.actions
            rollout.log_probs[t, cols] = acted.log_probs
            rollout.values[t, cols] = acted.values
            with timer.phase("env"):
                envs.send_group(group, actions)
    return obs


def train_ppo(cfg: Any, run_dir: Path, config_dict: Dict[str, Any]) -> Dict[str, Any]:
    """Train PPO as configured by ``cfg``; write the run's artifacts under ``run_dir``; return the summary."""
    algo = cfg.algo
    resume = load_resume(cfg)
    replicas = Replicas.from_environment()
    device = replicas.device(setup_process(cfg, rank=replicas.rank))
    graph_act = graph_act_enabled(algo.cuda_graph_act, device)
    graph_update = graph_update_enabled(algo.cuda_graph_update, device, replicas.world_size)
    with contextlib.ExitStack() as on_error:  # closes the process group and envs if setting up fails
        replicas.start(device)
        on_error.callback(replicas.close)
        # EnvPool seeds env i with seed + i: each replica's envs take the next num_envs seeds.
        envs = EnvPoolAdapter(cfg.env, seed=cfg.seed + replicas.rank * cfg.env.num_envs, device=device,
                              groups=algo.env_groups)
        on_error.callback(envs.close)
        obs_shape, action_shape, num_actions = space_shapes(envs)
        model = build_model(cfg.env.family, obs_shape, num_actions, action_shape, cfg.env.normalize_obs).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=algo.learning_rate, eps=algo.adam_eps)
        generator = torch.Generator(device=device)  # minibatch order and action sampling
        generator.manual_seed(stream_seed(cfg.seed, replicas.rank))
        state = TrainState(model, optimizer, generators={"ppo": generator})
        if resume is not None:
            resume_into(state, resume, envs.stats, config_dict, learner_only=not replicas.is_main)
            if not replicas.is_main:  # a stream of its own, not the one its first session drew
                generator.manual_seed(stream_seed(cfg.seed, replicas.rank, state.iteration))
        # After resuming: the checkpoint's run may have kept the other form. Eager steps keep host numbers: with
        # them on the device an eager update is slower (scripts/bench_ppo_update.py).
        prepare_optimizer(optimizer, on_device=graph_update)
        replicas.broadcast_module(model)  # rank 0's initial weights

        T, N = algo.num_steps, envs.num_envs
        steps_per_iteration = T * N * replicas.world_size
        num_iterations, planned_steps = state.plan(cfg.total_timesteps, steps_per_iteration)
        obs_dtype = torch.uint8 if cfg.env.family == "atari" else torch.float32
        rollout = Rollout.allocate(T, N, obs_shape, obs_dtype, action_shape, envs.discrete, device)
        # The rollout acts on one env group at a time: one graph for that batch.
        policy = GraphedAct(model, N // algo.env_groups, obs_shape, obs_dtype, device) if graph_act else model
        update_graph = GraphedEpochs(device) if graph_update else None

        logger = replicas.together(lambda: RunLogger(cfg, run_dir, planned_steps, config_dict,
                                                     initial_step=state.global_step)
                                   if replicas.is_main else ReplicaLogger())
        state.resumed_from = logger.moved.get(state.resumed_from, state.resumed_from)  # resumed into its own dir
        on_error.pop_all()
    timer = PhaseTimer(device)
    checkpoint_path = Path(run_dir) / "checkpoints" / "last.pt"

    def write_checkpoint() -> None:
        replicas.check_in_sync(model)
        stats = replicas.episode_stats(envs.stats)
        if replicas.is_main:
            save_checkpoint(checkpoint_path, {**state.state_dict(), "config": config_dict, "rng": rng_state(),
                                              "episode_stats": stats.state_dict()})

    def summary(stats: Any, **status: Any) -> Dict[str, Any]:
        return summary_payload(cfg, state, stats, device, sps, world_size=replicas.world_size,
                               cuda_graph_act=graph_act, cuda_graph_update=graph_update, **status)

    start = state.start_session()
    last_log = last_checkpoint = start
    last_log_step = state.global_step
    sps = 0.0
    update_stats: Dict[str, torch.Tensor] = {}
    reported_stats = envs.stats  # the episode statistics a failed run's summary gives
    obs = envs.reset()
    try:
        stop_reason = None
        for iteration in range(state.iteration + 1, num_iterations + 1):
            state.iteration = iteration
            if algo.anneal_lr:
                set_learning_rate(optimizer, algo.learning_rate * (1.0 - state.global_step / planned_steps))

            # 1. Rollout: T steps of N envs into time-major storage.
            with timer.phase("rollout"):
                obs = collect_rollout(envs, policy, rollout, obs, generator, timer)
            state.global_step += steps_per_iteration

            # 2. Credit assignment: GAE with terminated and truncated kept apart; V(s_T) bootstraps the window.
            with timer.phase("credit_assignment", device=True):
                with torch.no_grad():
                    bootstrap_value = model.value(obs)
                kernels.compute_gae(rollout.rewards, rollout.values, rollout.terminated, rollout.truncated,
                                    gamma=algo.gamma, lambda_=algo.gae_lambda, bootstrap_value=bootstrap_value,
                                    backend=algo.credit_backend, out=(rollout.advantages, rollout.returns))

            # 3. Update: epochs of shuffled minibatches over the flattened rollout.
            with timer.phase("update", device=True):
                flat = rollout.flat()
                batch = PPOBatch(flat.obs, flat.actions, flat.log_probs, flat.values, flat.advantages,
                                 flat.returns, flat.valid)
                update_stats = ppo_update(
                    model, optimizer, batch, num_minibatches=algo.num_minibatches,
                    update_epochs=algo.update_epochs, clip_coef=algo.clip_coef, clip_vloss=algo.clip_vloss,
                    ent_coef=algo.ent_coef, vf_coef=algo.vf_coef, norm_adv=algo.norm_adv,
                    max_grad_norm=algo.max_grad_norm, target_kl=algo.target_kl, generator=generator,
                    replicas=replicas if replicas.enabled else None, graph=update_graph)
                update_stats["explained_variance"] = explained_variance(flat.values, batch.returns, flat.valid)
                # Normalisation statistics move after the update, so rollout and update saw the same ones.
                model.update_obs_norm(flat.obs, replicas.gather if replicas.enabled else None)

            # 4. Logging: host numbers every iteration; device statistics once per log interval.
            now = time.perf_counter()
            session_s = state.clock(now)
            sps = state.global_step / max(state.wall_time_s, 1e-9)
            # Under torchrun the bar shows every replica's episodes as merged at the last log (no collective here).
            logger.advance(steps_per_iteration, sps,
                           (reported_stats if replicas.enabled else envs.stats).mean_return())
            # Replicas act on a decision together (one waiting in a collective for another would hang): rank 0's
            # clock decides, a signal to any of them stops all.
            timed = [cfg.time_limit_s is not None and session_s >= cfg.time_limit_s,
                     now - last_log >= cfg.log_interval_s, now - last_checkpoint >= cfg.checkpoint_interval_s]
            if not replicas.is_main:
                timed = [False] * len(timed)
            out_of_time, log_due, checkpoint_due, signum = replicas.max([*timed, STOP.signum or 0])
            if out_of_time:
                stop_reason = "time_limit_s"
            elif signum:
                stop_reason = StopSignal.describe(signum)
                STOP.adopt(signum)  # a signal another replica received stops this one as if it had
            last_iteration = iteration == num_iterations or stop_reason is not None
            if log_due or last_iteration:
                interval_sps = (state.global_step - last_log_step) / max(now - last_log, 1e-9)
                phases = timer.drain()
                stats = reported_stats = replicas.episode_stats(envs.stats)
                if replicas.enabled:  # the losses' mean over the replicas
                    names = list(update_stats)
                    means = replicas.average(torch.stack([update_stats[k].to(device, torch.float32) for k in names]))
                    update_stats = dict(zip(names, means.unbind(0)))
                metrics = {
                    "global_step": state.global_step, "iteration": iteration, "sps": sps,
                    "interval_sps": interval_sps, "episodic_return_mean": stats.mean_return(),
                    "episodic_length_mean": stats.mean_length(), "episodes": stats.episodes,
                    "learning_rate": float(optimizer.param_groups[0]["lr"]),
                    **{k: float(v) for k, v in update_stats.items()},
                    **{f"time/{k}_s": v for k, v in phases.items()},
                }
                logger.log(metrics)
                logger.write_summary(summary(stats, finished=False))
                last_log, last_log_step = now, state.global_step
            if checkpoint_due:
                write_checkpoint()
                last_checkpoint = now
            if stop_reason is not None:
                break
        write_checkpoint()
        final = summary(replicas.episode_stats(envs.stats), finished=True, stop_reason=stop_reason)
        logger.write_summary(final)
        replicas.close(wait_for_others=True)
        return final
    except BaseException as err:
        # No collective here (another replica may be gone): the episodes of every replica as last logged.
        state.clock(time.perf_counter())
        logger.write_summary({**summary(reported_stats, finished=False, stop_reason=STOP.reason),
                              "error": repr(err)})
        raise
    finally:
        logger.close()
        envs.close()
        replicas.close()
