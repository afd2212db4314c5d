"""IMPALA training loop (Espeholt et al. 2018, arXiv:1802.01561): actors and a learner joined by a queue.

Threaded mode: ``algo.num_actor_threads`` actor threads (:mod:`rl_app.impala_actor`), each with its own
EnvPool instance (asynchronous when ``algo.actor_env_batch_size > 0``) and ``env.num_envs /
num_actor_threads`` envs, put unrolls on a bounded queue of
``algo.queue_size``; the main thread is the learner (:mod:`rl_app.impala_learner`). EnvPool and torch
release the GIL, so acting and learning overlap. The queue bounds the policy lag, which is measured in
learner updates (learner version when the unroll is consumed minus the version that acted).

Deterministic mode (``algo.deterministic``): the main thread acts one batch of unrolls, then learns on it,
in lock-step, so the same seed gives the same run (the policy lag is 0).

Either way the learner takes ``algo.batch_size / n`` unrolls of ``n`` trajectories per update (``n`` is the
envs per actor, or ``algo.actor_env_batch_size`` in asynchronous mode) and concatenates them along the batch
dimension into a ``[T, algo.batch_size]`` batch.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from rl_app.checkpoint import TrainState, load_resume, resume_into, rng_state, save_checkpoint
from rl_app.envs import EnvPoolAdapter, space_shapes
from rl_app.graphed_act import graph_act_enabled
from rl_app.impala_actor import (Actor, AsyncActor, PolicyStore, SharedEpisodeStats, Unroll, actor_env_cfg,
                                 actor_seed, split_envs, unrolls_per_batch)
from rl_app.impala_learner import StatsAccumulator, learner_step, make_optimizer
from rl_app.models import ActorCritic, build_model
from rl_app.runtime import STOP, setup_process
from rl_app.tracking import PhaseTimer, RunLogger, summary_payload

POLL_S = 0.05  # how often blocked queue operations look at the stop flag
JOIN_TIMEOUT_S = 30.0  # an actor finishes its current unroll before it sees the stop flag


class LockstepActors:
    """Deterministic mode: the main thread runs the actors in turn with the latest weights."""

    def __init__(self, actors: List[Actor], store: PolicyStore, unroll_length: int):
        self.actors = actors
        self.store = store
        self.unroll_length = unroll_length
        self._next = 0

    def take(self, count: int) -> List[Unroll]:
        unrolls = []
        for _ in range(count):
            unrolls.append(self.actors[self._next].unroll(self.unroll_length, self.store))
            self._next = (self._next + 1) % len(self.actors)
        return unrolls

    def queue_fill(self) -> float:
        return 0.0

    def close(self) -> List[str]:
        return []

    def stopped_actors(self) -> List[Actor]:
        return self.actors


class ActorThreads:
    """Actor threads feeding a bounded queue; an actor's exception stops the run and re-raises in :meth:`take`.

    Every blocking call polls a stop event, so :meth:`close` ends all threads within one unroll.
    """

    def __init__(self, actors: List[Actor], store: PolicyStore, unroll_length: int, queue_size: int):
        self.actors = actors
        self.store = store
        self.unroll_length = unroll_length
        self.queue: "queue.Queue[Unroll]" = queue.Queue(maxsize=queue_size)
        self.stop = threading.Event()
        self.errors: List[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(actor,), name=f"impala-actor-{actor.actor_id}",
                                         daemon=True) for actor in actors]
        for thread in self.threads:
            thread.start()

    def _run(self, actor: Actor) -> None:
        try:
            while not self.stop.is_set():
                self._put(actor.unroll(self.unroll_length, self.store))
        except BaseException as err:  # noqa: BLE001 - handed to the main thread, which re-raises it
            self.errors.append(err)
            self.stop.set()

    def _put(self, unroll: Unroll) -> None:
        while not self.stop.is_set():
            try:
                self.queue.put(unroll, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def check(self) -> None:
        """Re-raise the first actor exception in the calling (main) thread."""
        if self.errors:
            raise self.errors[0]

    def take(self, count: int) -> List[Unroll]:
        unrolls: List[Unroll] = []
        while len(unrolls) < count:
            self.check()
            if self.stop.is_set():
                raise RuntimeError("IMPALA actor threads stopped")
            try:
                unrolls.append(self.queue.get(timeout=POLL_S))
            except queue.Empty:
                continue
        return unrolls

    def queue_fill(self) -> float:
        return self.queue.qsize() / self.queue.maxsize

    def close(self) -> List[str]:
        """Stop and join the threads; return the names of any still running (their envs stay open)."""
        self.stop.set()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        while True:  # drop queued unrolls so their memory goes with the run
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        return [t.name for t in self.threads if t.is_alive()]

    def stopped_actors(self) -> List[Actor]:
        return [a for a, t in zip(self.actors, self.threads) if not t.is_alive()]


def build_actors(cfg: Any, envs_per_actor: int, stats: SharedEpisodeStats, device: torch.device) -> List[Actor]:
    """One actor per ``algo.num_actor_threads``, each with its own share of the envs and seeds; an
    :class:`AsyncActor` when ``algo.actor_env_batch_size > 0``, else an :class:`Actor` whose policy step is a
    CUDA graph where ``algo.cuda_graph_act`` says so."""
    env_cfg = actor_env_cfg(cfg.env, envs_per_actor)
    env_batch_size = cfg.algo.actor_env_batch_size
    graph_act = graph_act_enabled(cfg.algo.cuda_graph_act, device) and not env_batch_size

    def make_model(envs: EnvPoolAdapter) -> ActorCritic:
        return model_for(cfg, envs)

    actors: List[Actor] = []
    try:
        for i in range(cfg.algo.num_actor_threads):
            seed = actor_seed(cfg.seed, i, envs_per_actor)
            if env_batch_size:
                actors.append(AsyncActor(i, env_cfg, seed, make_model, stats, device, env_batch_size))
            else:
                actors.append(Actor(i, env_cfg, seed, make_model, stats, device, graph_act=graph_act))
    except BaseException:
        for actor in actors:
            actor.close()
        raise
    return actors


def model_for(cfg: Any, envs: EnvPoolAdapter) -> ActorCritic:
    obs_shape, action_shape, num_actions = space_shapes(envs)
    return build_model(cfg.env.family, obs_shape, num_actions, action_shape, cfg.env.normalize_obs)


class IMPALATrainer:
    """The learner side of a run: model, optimizer, counters, logging and checkpoints."""

    def __init__(self, cfg: Any, run_dir: Path, config_dict: Dict[str, Any], device: torch.device,
                 actors: List[Actor], stats: SharedEpisodeStats, resume: Optional[Dict[str, Any]] = None):
        algo = cfg.algo
        self.cfg, self.algo, self.device, self.actors, self.stats = cfg, algo, device, actors, stats
        self.config_dict = config_dict
        model = model_for(cfg, actors[0].envs).to(device)
        generators = {f"actor{actor.actor_id}": actor.generator for actor in actors}
        self.state = TrainState(model, make_optimizer(model, algo), generators=generators)
        if resume is not None:
            resume_into(self.state, resume, stats, config_dict)
        self.store = PolicyStore(model, version=self.state.iteration)
        self.unrolls_per_update = unrolls_per_batch(algo.batch_size, actors[0].unroll_width)
        self.steps_per_update = algo.unroll_length * algo.batch_size
        self.num_updates, self.planned_steps = self.state.plan(cfg.total_timesteps, self.steps_per_update)
        self.logger = RunLogger(cfg, run_dir, self.planned_steps, config_dict, initial_step=self.state.global_step)
        self.state.resumed_from = self.logger.moved.get(self.state.resumed_from, self.state.resumed_from)
        self.timer = PhaseTimer(device)
        self.accumulator = StatsAccumulator()
        self.checkpoint_path = Path(run_dir) / "checkpoints" / "last.pt"
        self.sps = 0.0
        self.start_time = self.state.start_session()
        self._interval = self._interval_marks(self.start_time)

    # ---------------------------------------------------------------- the loop
    def run(self, source: Any) -> Dict[str, Any]:
        """Train until ``total_timesteps`` have been learned on (or ``time_limit_s`` has passed);
        ``source.take(k)`` supplies unrolls."""
        last_checkpoint = self.start_time
        stop_reason = None
        for update in range(self.state.iteration + 1, self.num_updates + 1):
            self._set_learning_rate()
            wait_start = time.perf_counter()
            unrolls = source.take(self.unrolls_per_update)
            self._note_batch(unrolls, source.queue_fill(), time.perf_counter() - wait_start)
            batch = Unroll.concat(unrolls, self.device)
            self.accumulator.add(learner_step(self.state.model, self.state.optimizer, batch, self.algo,
                                              self.timer))
            self.state.iteration = update
            self.store.publish(self.state.model, update)
            self.state.global_step += self.steps_per_update
            now = time.perf_counter()
            session_s = self.state.clock(now)
            self.sps = self.state.global_step / max(self.state.wall_time_s, 1e-9)
            self.logger.advance(self.steps_per_update, self.sps, self.stats.mean_return())
            limit = self.cfg.time_limit_s
            out_of_time = limit is not None and session_s >= limit
            stop_reason = "time_limit_s" if out_of_time else STOP.reason
            interval_over = now - self._interval["time"] >= self.cfg.log_interval_s
            if interval_over or update == self.num_updates or stop_reason is not None:
                self._log(now)
            if now - last_checkpoint >= self.cfg.checkpoint_interval_s:
                self.write_checkpoint()
                last_checkpoint = now
            if stop_reason is not None:
                break
        return self.summary(finished=True, stop_reason=stop_reason)

    def _set_learning_rate(self) -> None:
        lr = self.algo.learning_rate
        if self.algo.anneal_lr:
            lr *= 1.0 - self.state.global_step / self.planned_steps
        self.state.optimizer.param_groups[0]["lr"] = lr

    def _note_batch(self, unrolls: List[Unroll], queue_fill: float, wait_s: float) -> None:
        """Host bookkeeping of one batch: policy lag in learner updates, queue fill, time waiting for it."""
        marks = self._interval
        for unroll in unrolls:
            lag = self.state.iteration - unroll.policy_version
            marks["lag_sum"] += lag
            marks["lag_max"] = max(marks["lag_max"], lag)
        marks["unrolls"] += len(unrolls)
        marks["fill_sum"] += queue_fill
        marks["batches"] += 1
        marks["wait_s"] += wait_s

    # ---------------------------------------------------------------- logging and artifacts
    def _actor_totals(self) -> Dict[str, float]:
        return {"steps": sum(a.steps for a in self.actors), "env_s": sum(a.env_s for a in self.actors),
                "inference_s": sum(a.inference_s for a in self.actors)}

    def _interval_marks(self, now: float) -> Dict[str, float]:
        return {"time": now, "global_step": self.state.global_step, **self._actor_totals(),
                "lag_sum": 0, "lag_max": 0, "unrolls": 0, "fill_sum": 0.0, "batches": 0, "wait_s": 0.0}

    def _log(self, now: float) -> None:
        """One metrics line; reads the device statistics (the learner's only host sync).

        ``interval_sps``: env steps learned on per wall-clock second; ``learner_sps``: per second of learner
        compute (its capacity); ``actor_sps``: env steps acted per wall-clock second, all actors together.
        """
        marks, actors = self._interval, self._actor_totals()
        elapsed = max(now - marks["time"], 1e-9)
        phases = self.timer.drain()
        learned = self.state.global_step - marks["global_step"]
        metrics = {
            "global_step": self.state.global_step, "iteration": self.state.iteration, "sps": self.sps,
            "interval_sps": learned / elapsed,
            "learner_sps": learned / max(phases["credit_assignment"] + phases["update"], 1e-9),
            "actor_sps": (actors["steps"] - marks["steps"]) / elapsed, "actor_steps": actors["steps"],
            "episodic_return_mean": self.stats.mean_return(), "episodic_length_mean": self.stats.mean_length(),
            "episodes": self.stats.episodes, "learning_rate": self.state.optimizer.param_groups[0]["lr"],
            "policy_lag_mean": marks["lag_sum"] / max(marks["unrolls"], 1), "policy_lag_max": marks["lag_max"],
            "queue_fill": marks["fill_sum"] / max(marks["batches"], 1),
            **self.accumulator.drain(),
            "time/env_s": actors["env_s"] - marks["env_s"],
            "time/inference_s": actors["inference_s"] - marks["inference_s"],
            "time/credit_assignment_s": phases["credit_assignment"], "time/update_s": phases["update"],
            "time/learner_wait_s": marks["wait_s"],
        }
        self.logger.log(metrics)
        self.logger.write_summary(self.summary(finished=False))
        self._interval = self._interval_marks(now)

    def summary(self, finished: bool, stop_reason: Optional[str] = None) -> Dict[str, Any]:
        return summary_payload(self.cfg, self.state, self.stats, self.device, self.sps, finished, stop_reason,
                               cuda_graph_act=any(actor.policy is not actor.model for actor in self.actors))

    def write_checkpoint(self) -> None:
        save_checkpoint(self.checkpoint_path, {**self.state.state_dict(), "config": self.config_dict,
                                               "rng": rng_state(), "episode_stats": self.stats.state_dict(),
                                               "policy_version": self.state.iteration})


def train_impala(cfg: Any, run_dir: Path, config_dict: Dict[str, Any]) -> Dict[str, Any]:
    """Train IMPALA as configured by ``cfg``; write the run's artifacts under ``run_dir``; return the summary.

    ``summary.json`` is written on every exit: ``finished`` true after the last update, false (with
    ``error``) when the run stops on an exception, which is then re-raised here. Actor threads are joined
    before their envs close.
    """
    algo = cfg.algo
    resume = load_resume(cfg)
    device = setup_process(cfg)
    envs_per_actor = split_envs(cfg.env.num_envs, algo.num_actor_threads)
    unrolls_per_batch(algo.batch_size, algo.actor_env_batch_size or envs_per_actor)  # before making envs
    stats = SharedEpisodeStats(cfg.env.num_envs)
    actors = build_actors(cfg, envs_per_actor, stats, device)
    source: Any = None
    trainer: Optional[IMPALATrainer] = None
    try:
        trainer = IMPALATrainer(cfg, run_dir, config_dict, device, actors, stats, resume)
        if algo.deterministic:
            source = LockstepActors(actors, trainer.store, algo.unroll_length)
        else:
            source = ActorThreads(actors, trainer.store, algo.unroll_length, algo.queue_size)
        return _train(trainer, source)
    finally:
        if trainer is not None:
            trainer.logger.close()
        for actor in actors if source is None else source.stopped_actors():
            actor.close()


def _train(trainer: IMPALATrainer, source: Any) -> Dict[str, Any]:
    """Run the trainer; always stop the actors and write ``summary.json``; re-raise actor errors.

    Everything after the last update (joining the actor threads, their late errors, the final checkpoint) is
    inside the ``try``: a second signal while the threads are joined, or a checkpoint that cannot be written,
    still leaves a summary with ``error``. If stopping the actors is itself interrupted, the summary is
    written all the same and the interruption propagates."""
    closed = False
    try:
        summary = trainer.run(source)
        hung = source.close()
        closed = True
        if hung:
            raise RuntimeError(f"IMPALA actor threads did not stop within {JOIN_TIMEOUT_S}s: {hung}")
        if isinstance(source, ActorThreads):
            source.check()
        trainer.write_checkpoint()
    except BaseException as err:
        try:
            if not closed:  # a hung thread would make a second join wait JOIN_TIMEOUT_S again
                source.close()
        finally:
            trainer.state.clock(time.perf_counter())
            trainer.logger.write_summary({**trainer.summary(finished=False, stop_reason=STOP.reason),
                                          "error": repr(err)})
        raise
    trainer.logger.write_summary(summary)
    return summary
