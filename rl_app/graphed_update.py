"""PPO's update epochs replayed from a CUDA graph (``algo.cuda_graph_update``).

One minibatch step of PPO (gather, forward, loss, backward, gradient clipping, Adam) is a few hundred small
kernels; at the minibatch sizes of Atari PPO the host's launch time, not the GPU, sets their pace. A CUDA graph of
one epoch (all its minibatch steps) launches them at once. What a graph cannot do stays outside it: the
minibatch order is drawn by the same ``generator`` call as an eager epoch and copied into the graph's input, and
an early stop on ``target_kl`` reads the epoch's KL between replays.

For a graph, the optimizer must keep every number it uses on the device: Adam's step counts and its learning rate
(a tensor, which :func:`set_learning_rate` fills in place, so that annealing reaches the replays).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch

from rl_app.config import ConfigError


def graph_update_enabled(setting: Optional[bool], device: torch.device, world_size: int) -> bool:
    """Whether a PPO run replays its update epochs from a CUDA graph: ``algo.cuda_graph_update`` (``setting``;
    None: on for a CUDA ``device`` in a single process) for the run's device and number of data-parallel
    replicas. Raises ConfigError (a ValueError) for true on a non-CUDA device or with several replicas (their
    gradients are averaged between backward and step, by collectives the graph does not hold)."""
    if setting is None:
        return device.type == "cuda" and world_size == 1
    if setting and device.type != "cuda":
        raise ConfigError(f"algo.cuda_graph_update=true needs a CUDA device (CUDA graphs); this run's device is "
                          f"{device.type}: use algo.cuda_graph_update=null (on for CUDA devices) or false")
    if setting and world_size > 1:
        raise ConfigError(f"algo.cuda_graph_update=true needs a single process, this run has {world_size} "
                          f"replicas: use algo.cuda_graph_update=null (off under torchrun) or false")
    return setting


def prepare_optimizer(optimizer: torch.optim.Optimizer, on_device: bool) -> None:
    """Keep ``optimizer``'s learning rates and step counts on its parameters' device (``on_device``: what a CUDA
    graph of its steps needs; ``capturable`` set) or as host numbers (the default of torch's optimizers).

    Call after building the optimizer and again after loading a state dict: a checkpoint carries the form of the
    run that saved it, and either run may resume the other's. Only the form changes, not the numbers (the
    learning rate is read and written back at float32 precision when it moves to the device).
    """
    for group in optimizer.param_groups:
        device = group["params"][0].device
        lr = group["lr"]
        if on_device:
            group["lr"] = lr.to(device) if isinstance(lr, torch.Tensor) else torch.tensor(float(lr), device=device)
        else:
            group["lr"] = float(lr)
        if "capturable" in group:
            group["capturable"] = on_device
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                optimizer.state[p]["step"] = step.to(device if on_device else "cpu", torch.float32)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate: in place where it is a tensor (a captured graph reads it there)."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    """The tensors a step of ``optimizer`` reads and writes: parameters, their state, tensor learning rates."""
    out: List[torch.Tensor] = []
    for group in optimizer.param_groups:
        out += [t for t in (group["lr"],) if isinstance(t, torch.Tensor)]
        for p in group["params"]:
            out.append(p)
            out += [t for t in optimizer.state.get(p, {}).values() if isinstance(t, torch.Tensor)]
    return out


class GraphedEpochs:
    """Replays one epoch of minibatch steps from a CUDA graph on ``device``.

    Owns the static tensors an epoch reads and writes besides the model, the optimizer and the batch: ``order``
    (the epoch's permutation of the batch rows, copied in before each replay), ``stats`` (summed minibatch
    statistics) and ``epoch_kl`` (the epoch's summed approximate KL); allocated at the first :meth:`buffers`
    call. :meth:`run` runs the epoch eagerly at its first call, on a side stream (cuDNN, cuBLAS and the
    optimizer set up their workspaces and state there, outside any graph), captures it at the second call and
    then replays it; a capture records without running, so the second call replays once after capturing.

    A graph reads and writes tensors where they were at capture. :meth:`run` takes the tensors the epoch uses
    and raises RuntimeError if any of them is not where it was at capture (a batch in new storage, an optimizer
    state loaded after the capture); in-place changes (``load_state_dict`` of the model, ``set_learning_rate``,
    the observation-normalisation statistics) are seen by the next replay.

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """

    def __init__(self, device: torch.device):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"GraphedEpochs needs a CUDA device (CUDA graphs), got device={device}")
        self.device = device
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.calls = 0
        self.order: Optional[torch.Tensor] = None
        self.stats: Optional[torch.Tensor] = None
        self.epoch_kl: Optional[torch.Tensor] = None
        self._captured_on: Optional[tuple] = None

    def buffers(self, rows: int, num_stats: int):
        """``(order, stats, epoch_kl)``: ``[rows]`` int64, ``[num_stats]`` float32 and a float32 scalar."""
        if self.order is None:
            self.order = torch.zeros(rows, dtype=torch.int64, device=self.device)
            self.stats = torch.zeros(num_stats, device=self.device)
            self.epoch_kl = torch.zeros((), device=self.device)
        if self.order.shape[0] != rows or self.stats.shape[0] != num_stats:
            raise RuntimeError(f"GraphedEpochs was set up for {self.order.shape[0]} rows and "
                               f"{self.stats.shape[0]} statistics, asked for {rows} and {num_stats}")
        return self.order, self.stats, self.epoch_kl

    def run(self, epoch: Callable[[], None], tensors: Sequence[torch.Tensor]) -> None:
        """One epoch: ``epoch()`` (which reads ``order`` and adds to ``stats`` and ``epoch_kl``) eagerly, captured
        or replayed, as the class says. ``tensors``: every tensor ``epoch`` reads or writes in place."""
        where = tuple(t.data_ptr() for t in tensors)
        if self._captured_on is not None and where != self._captured_on:
            raise RuntimeError("a tensor of the PPO update is not where the captured graph reads it (new batch "
                               "storage or optimizer state after the capture): build a new GraphedEpochs")
        current = torch.cuda.current_stream(self.device)
        if self.graph is None:
            with torch.cuda.device(self.device):
                side = torch.cuda.Stream(self.device)
                side.wait_stream(current)
                if self.calls == 0:
                    with torch.cuda.stream(side):
                        epoch()
                else:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, stream=side):
                        epoch()
                    self.graph, self._captured_on = graph, where
                current.wait_stream(side)
        self.calls += 1
        if self.graph is not None:
            self.graph.replay()
