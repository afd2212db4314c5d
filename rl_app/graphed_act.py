"""The rollout's policy step replayed from a CUDA graph (``algo.cuda_graph_act``).

At the batch sizes of a rollout (a few to a few hundred observations) one eager ``act`` is some twenty small
kernels, each launched from Python: the host's launch time, not the GPU, sets its pace. A CUDA graph launches
them all at once. The random draws stay outside the graph, drawn by the same ``generator`` calls as an eager
``act``, so a graphed rollout samples the actions an eager one would (up to floating-point differences between
kernels that read the same numbers).
"""

from __future__ import annotations

from typing import Optional

import torch

from rl_app.config import ConfigError
from rl_app.models import ActorCritic, PolicyOutput


def graph_act_enabled(setting: Optional[bool], device: torch.device) -> bool:
    """Whether a run replays its policy step from a CUDA graph: ``algo.cuda_graph_act`` (``setting``; None: on
    for a CUDA ``device``) on the run's device. Raises ConfigError (a ValueError) for true on a non-CUDA device."""
    if setting is None:
        return device.type == "cuda"
    if setting and device.type != "cuda":
        raise ConfigError(f"algo.cuda_graph_act=true needs a CUDA device (CUDA graphs); this run's device is "
                          f"{device.type}: use algo.cuda_graph_act=null (on for CUDA devices) or false")
    return setting


class GraphedAct:
    """``model.act`` on ``[batch, *obs_shape]`` observations of ``obs_dtype``, captured once into a CUDA graph
    on ``device`` and replayed on every call.

    The graph reads the model's parameters and buffers where they are, so in-place updates (optimizer steps,
    ``load_state_dict``, broadcasts, observation-normalisation statistics) are seen by the next call; a parameter
    or buffer replaced by a new tensor (assigning ``.data`` or a new ``Parameter``) would not be. Each call copies
    ``obs`` into the graph's input, draws the noise with ``generator`` into its noise buffer
    (``ActorCritic.draw_noise``), replays, and returns the graph's output tensors: they are overwritten by the
    next call, so copy what must outlive it.

    Raises:
        ValueError: ``device`` is not a CUDA device, or ``batch`` < 1.
    """

    def __init__(self, model: ActorCritic, batch: int, obs_shape: tuple, obs_dtype: torch.dtype,
                 device: torch.device, warmup_calls: int = 3):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"GraphedAct needs a CUDA device (CUDA graphs), got device={device}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.model = model
        self.batch = batch
        self.obs = torch.zeros((batch, *obs_shape), dtype=obs_dtype, device=device)
        # A valid draw for either distribution, made without a generator: capturing draws nothing from any.
        self.noise = torch.full((batch, model.noise_width), 0.5, device=device)
        # Eager calls first, on a side stream as capture requires: cuBLAS and cuDNN set up their handles and
        # workspaces there, outside the graph. The capture runs on that stream too, which is on ``device``:
        # torch.cuda.graph's own default stream belongs to whichever device was current at a process's first
        # capture, and a graph captured there would record none of this device's kernels.
        with torch.cuda.device(device):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(warmup_calls):
                    model.act_with_noise(self.obs, self.noise)
            torch.cuda.current_stream(device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=side):
                self.out = model.act_with_noise(self.obs, self.noise)

    def act(self, obs: torch.Tensor, generator: Optional[torch.Generator] = None) -> PolicyOutput:
        """Policy outputs for ``obs`` (``[batch, *obs_shape]`` of the captured dtype, on the graph's device): the
        graph's own tensors. Raises ValueError for another shape or dtype."""
        if obs.shape != self.obs.shape or obs.dtype != self.obs.dtype:
            raise ValueError(f"obs must be {tuple(self.obs.shape)} {self.obs.dtype} (the captured batch), got "
                             f"{tuple(obs.shape)} {obs.dtype}")
        self.obs.copy_(obs)
        self.model.draw_noise(self.batch, self.noise.device, generator, out=self.noise)
        self.graph.replay()
        return self.out
