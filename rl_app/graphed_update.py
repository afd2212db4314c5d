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

from typing import Any, Callable, List, Optional, Sequence

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

    Call after building the optimizer and again after loading a checkpoint's state into it: the step counts come
    back where the saved run kept them (torch's load follows that run's ``capturable``), while the learning rate
    and ``capturable`` are this run's (``rl_app.checkpoint.TrainState`` keeps the run's own settings), so this
    moves the step counts and makes the learning rate a tensor or a number. Only the form changes, not the
    numbers (the learning rate goes through float32 on its way to the device).
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
    call. :meth:`run` runs the epoch eagerly at its first call, on the object's own side stream (cuDNN, cuBLAS
    and the optimizer set up their workspaces and state for that stream there, outside any graph), captures it
    on the same stream at the second call and then replays it; a capture records without running, so the second
    call replays once after capturing. Each process captures anew: a resumed run warms up again.

    A graph reads and writes tensors where they were at capture, with the Python values it was captured with.
    :meth:`run` takes the tensors the epoch uses and a key of those values, and raises RuntimeError if a tensor
    is not where it was at capture (a batch in new storage, an optimizer state loaded after the capture) or the
    key differs (other hyperparameters); in-place changes (``load_state_dict`` of the model,
    ``set_learning_rate``, the observation-normalisation statistics) are seen by the next replay.

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """

    def __init__(self, device: torch.device):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"GraphedEpochs needs a CUDA device (CUDA graphs), got device={device}")
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.calls = 0
        self.order: Optional[torch.Tensor] = None
        self.stats: Optional[torch.Tensor] = None
        self.epoch_kl: Optional[torch.Tensor] = None
        self._captured_with: Optional[tuple] = None

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

    def run(self, epoch: Callable[[], None], tensors: Sequence[torch.Tensor], key: Any) -> None:
        """One epoch: ``epoch()`` (which reads ``order`` and adds to ``stats`` and ``epoch_kl``) eagerly, captured
        or replayed, as the class says. ``tensors``: every tensor ``epoch`` reads or writes in place; ``key``: the
        Python values ``epoch`` uses (compared with ``==`` to those of the capture)."""
        where = (tuple(t.data_ptr() for t in tensors), key)
        if self._captured_with is not None and where != self._captured_with:
            what = "tensor" if where[0] != self._captured_with[0] else "setting"
            raise RuntimeError(f"a {what} of the PPO update is not what the captured graph was captured with (new "
                               f"batch storage, optimizer state loaded after the capture, other hyperparameters): "
                               f"build a new GraphedEpochs")
        if self.graph is None:
            if self.calls == 0:
                self._warm_up(epoch)
            else:
                self.graph = self._capture(epoch)
                self._captured_with = where
        self.calls += 1
        if self.graph is not None:
            self._replay()

    def _warm_up(self, epoch: Callable[[], None]) -> None:
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            epoch()
        current.wait_stream(self.stream)

    def _capture(self, epoch: Callable[[], None]) -> Any:
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device), torch.cuda.graph(graph, stream=self.stream):
            epoch()
        current.wait_stream(self.stream)
        return graph

    def _replay(self) -> None:
        self.graph.replay()
