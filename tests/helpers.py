"""Shared test utilities: compose the application's Hydra config without the command line; a SIGTERM handler
that raises, as the handler a run finds installed before it starts."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Iterator, Sequence

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from rl_app.config import register_configs

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
ALGOS = ("ppo", "impala")
ENVS = ("cartpole", "pong", "breakout", "halfcheetah")

register_configs()


def compose_config(overrides: Sequence[str] = (), config_name: str = "config") -> DictConfig:
    """The config ``python train.py <overrides>`` would run with (``evaluate.py``'s with ``config_name="evaluate"``)."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


class Interrupted(Exception):
    """What the SIGTERM handler of :func:`sigterm_raises_interrupted` raises."""


@contextlib.contextmanager
def sigterm_raises_interrupted() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted` inside the block: a run's second signal gets this handler (the one it
    found), so the run ends on that exception. The handler from before is restored after the block."""

    def interrupt(signum, frame):
        raise Interrupted()

    outer = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, outer)


class ReusedOutputs:
    """Wraps a policy so that every ``act`` returns the same three tensors, overwritten in place, as a replayed
    CUDA graph (``rl_app.graphed_act.GraphedAct``) does: a caller that keeps them instead of copying them sees
    each of its earlier steps turn into the latest one."""

    def __init__(self, policy):
        self.policy = policy
        self.outputs = None

    def act(self, obs, generator):
        from rl_app.models import PolicyOutput

        acted = self.policy.act(obs, generator)
        if self.outputs is None:
            self.outputs = PolicyOutput(*(x.clone() for x in acted))
        else:
            for kept, new in zip(self.outputs, acted):
                kept.copy_(new)
        return self.outputs
