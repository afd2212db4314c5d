"""Data-parallel PPO across processes started by ``torchrun``: one replica of the learner per process.

``torchrun --nproc_per_node=K train.py ...`` starts K processes. Each steps its own EnvPool of ``env.num_envs``
envs (seeds offset by rank, so no two envs share one), collects its own ``[T, num_envs]`` rollout and computes
its own GAE; the update averages every minibatch's gradients over the processes (one all-reduce of one flat
buffer), so the replicas take identical optimizer steps from identical starting weights (rank 0's, broadcast).
An iteration therefore takes ``K * num_steps * num_envs`` environment steps, and ``total_timesteps`` counts
them all. Rank 0 alone writes the run directory (metrics, summary, checkpoints, W&B).

Outside ``torchrun`` (``WORLD_SIZE`` unset or 1) :class:`Replicas` is a single process and every method is a
no-op that communicates nothing. Decisions (stop, log, checkpoint) are agreed by all processes once per iteration
on a CPU (gloo) group, so no process waits in a collective that another has left, and the GPU stream is not
synchronized for it: rank 0's clock decides those taken by time, a signal to any process stops them all.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Sequence

import torch

from rl_app.config import ConfigError, launched_world_size, torchrun_int
from rl_app.envs import EpisodeStats


def check_launch(cfg: Any) -> None:
    """``ConfigError`` for an algorithm other than PPO under torchrun (``WORLD_SIZE`` > 1). (``validate_config``
    checks that every process's envs get int32 seeds.)"""
    world = launched_world_size()
    if world > 1 and cfg.algo.name != "ppo":
        raise ConfigError(f"algo={cfg.algo.name} runs in one process; torchrun (WORLD_SIZE={world}) runs "
                          f"data-parallel algo=ppo only")


def stream_seed(seed: int, rank: int, iteration: int = 0) -> int:
    """The seed of a replica's sampling generator: ``seed`` itself for rank 0 of a fresh run (a single process
    draws as it always did), else ``seed + rank * 2**31 + iteration * 2**40`` (``iteration``: a resume's), so no
    two (seed, rank, iteration) with ``seed < 2**31`` share a stream, also across the runs of a seed sweep."""
    return seed + (rank << 31) + ((iteration % (1 << 23)) << 40)


@dataclass
class Replicas:
    """Which replica this process is, and the collectives data-parallel PPO needs.

    ``rank`` in ``[0, world_size)``; ``local_rank`` picks the GPU on this host (``cuda:<local_rank>``).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    _control: Any = None  # the CPU (gloo) process group for host-side decisions and objects
    _owns_group: bool = False  # start() made the default process group (and close() ends it)

    @classmethod
    def from_environment(cls) -> "Replicas":
        """The replica torchrun started (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); a single one without them.

        Raises ``ConfigError`` if the variables are inconsistent (a rank outside ``[0, WORLD_SIZE)``)."""
        world = launched_world_size()
        rank, local_rank = torchrun_int("RANK", 0), torchrun_int("LOCAL_RANK", 0)
        if not 0 <= rank < world or local_rank < 0:
            raise ConfigError(f"torchrun's RANK={rank}, LOCAL_RANK={local_rank}, WORLD_SIZE={world} are inconsistent "
                              f"(0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0)")
        return cls(rank=rank, world_size=world, local_rank=local_rank)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run's files."""
        return self.rank == 0

    def device(self, requested: torch.device) -> torch.device:
        """The device of this replica: ``cuda:<local_rank>`` when ``requested`` is CUDA, else ``requested``.

        Raises ``ConfigError`` for an explicit ``cuda:N`` (each process takes the GPU of its local rank) or a local
        rank without a GPU."""
        if not self.enabled or requested.type != "cuda":
            return requested
        if requested.index is not None:
            raise ConfigError(f"device={requested} with torchrun: each process uses the GPU of its LOCAL_RANK; "
                              f"give device=cuda or device=auto")
        if self.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={self.local_rank} but this host has {torch.cuda.device_count()} GPU(s): "
                              f"start at most that many processes per node (torchrun --nproc_per_node)")
        device = torch.device("cuda", self.local_rank)
        torch.cuda.set_device(device)
        return device

    def start(self, device: torch.device) -> None:
        """Join the process group (NCCL for CUDA replicas, gloo on CPUs) and make the CPU (gloo) control group."""
        if not self.enabled or self._control is not None:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", rank=self.rank,
                                    world_size=self.world_size,
                                    **({"device_id": device} if device.type == "cuda" else {}))
            self._owns_group = True
        self._control = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")

    def close(self, wait_for_others: bool = False) -> None:
        """Leave the process group if :meth:`start` joined it; with ``wait_for_others`` (a normal end, every
        replica here) first wait until all replicas are done, since gloo aborts a process whose group is torn
        down while a peer still works (rank 0 writing its last checkpoint)."""
        import torch.distributed as dist

        control, self._control = self._control, None
        if self._owns_group and dist.is_initialized():
            if wait_for_others:
                dist.barrier(group=control)
            # destroy_process_group drops torch's references to the groups; with ours gone too (and any cycle
            # collected) gloo's groups and their threads go now rather than at interpreter exit, which we suspect
            # of one abort seen at exit under load (not reproduced; torch reports such aborts for gloo groups left
            # to interpreter finalization).
            del control
            dist.destroy_process_group()
            gc.collect()
        self._owns_group = False

    # ----------------------------------------------------------------- learner state
    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Give every replica rank 0's parameters and buffers (in place)."""
        if not self.enabled:
            return
        import torch.distributed as dist

        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor.data, src=0)

    def average_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its mean over the replicas: one all-reduce of one flat buffer.

        Parameters without a gradient are skipped; they are the same on every replica (one network, one loss)."""
        if not self.enabled:
            return
        import torch.distributed as dist

        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def average(self, tensor: torch.Tensor) -> torch.Tensor:
        """The mean of ``tensor`` over the replicas (a new tensor; ``tensor`` itself when single)."""
        if not self.enabled:
            return tensor
        import torch.distributed as dist

        total = tensor.clone()
        dist.all_reduce(total)
        return total / self.world_size

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[world_size, *tensor.shape]``: every replica's ``tensor``, in rank order."""
        if not self.enabled:
            return tensor.unsqueeze(0)
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    def check_in_sync(self, module: torch.nn.Module) -> None:
        """Raise ``RuntimeError`` unless every replica's parameters and buffers have the same float64 sum and sum
        of squares, bit for bit (NaNs included), per tensor: a cheap test that the replicas took the same steps.

        The sums are gathered from every replica: a read-back, on checkpoints and at the end only."""
        if not self.enabled:
            return
        tensors = list(module.parameters()) + list(module.buffers())
        with torch.no_grad():
            sums = torch.stack([torch.stack([t.double().sum(), t.double().square().sum()]) for t in tensors])
        every = self.gather(sums).cpu().view(torch.int64)  # bit patterns: a NaN equals the same NaN
        differ = [i for i in range(len(tensors)) if not torch.equal(every[:, i], every[:1, i].expand_as(every[:, i]))]
        if differ:
            names = [name for name, _ in list(module.named_parameters()) + list(module.named_buffers())]
            raise RuntimeError(f"data-parallel replicas diverged: {len(differ)} tensor(s) differ between processes "
                               f"({', '.join(names[i] for i in differ[:4])}{' ...' if len(differ) > 4 else ''})")

    # ----------------------------------------------------------------- host-side agreement
    def max(self, values: Sequence[int]) -> List[int]:
        """For each value, its maximum over the replicas (one small all-reduce on the CPU group)."""
        if not self.enabled:
            return [int(v) for v in values]
        import torch.distributed as dist

        votes = torch.tensor([int(v) for v in values], dtype=torch.int64)
        dist.all_reduce(votes, op=dist.ReduceOp.MAX, group=self._control)
        return votes.tolist()

    def together(self, make: Callable[[], Any]) -> Any:
        """``make()`` on every replica, then agree that it worked everywhere: where it raised, the error goes on;
        the other replicas raise a ``ConfigError`` saying so instead of waiting for that one in a collective (rank
        0's W&B may refuse to start, for one)."""
        try:
            made = make()
        except BaseException:
            self.max([1])
            raise
        if self.max([0])[0]:
            raise ConfigError("another process failed while starting (its error is above)")
        return made

    def gather_objects(self, obj: Any) -> List[Any]:
        """Every replica's ``obj`` (picklable), in rank order (on the CPU group)."""
        if not self.enabled:
            return [obj]
        import torch.distributed as dist

        out: List[Optional[Any]] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self._control)
        return out

    def episode_stats(self, stats: EpisodeStats) -> EpisodeStats:
        """``stats`` over every replica (``stats`` itself when single): ``episodes`` summed, and the replicas'
        windows of finished episodes interleaved, most recent last (each replica's last episode among the last
        ``world_size`` entries), so the means are over the last ``window`` episodes of each replica and any shorter
        window of the merged ones (a resume in fewer processes keeps ``window``) holds every replica's latest."""
        if not self.enabled:
            return stats
        states = self.gather_objects(stats.state_dict())
        merged = EpisodeStats(0, window=(stats.finished_returns.maxlen or 100) * self.world_size)
        merged.load_state_dict({"finished_returns": _interleave([s["finished_returns"] for s in states]),
                                "finished_lengths": _interleave([s["finished_lengths"] for s in states]),
                                "episodes": sum(int(s["episodes"]) for s in states)})
        return merged


def _interleave(lists: Sequence[Sequence[Any]]) -> List[Any]:
    """The lists' items aligned at their ends and taken position by position, rank order within a position:
    ``[[1, 2, 3], [10, 20]]`` gives ``[1, 2, 10, 3, 20]``."""
    longest = max((len(items) for items in lists), default=0)
    return [items[i - (longest - len(items))] for i in range(longest) for items in lists
            if i >= longest - len(items)]
