"""Process-level setup shared by the trainers: device choice, seeding, torch threads."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any, Dict, Optional

import numpy as np
import torch

from rl_app.config import ConfigError


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when available, else CPU; asking for CUDA without a GPU is a ``ConfigError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but torch sees no CUDA device; use device=cpu or device=auto")
    return device


def setup_process(cfg: Any, rank: int = 0) -> torch.device:
    """Seed Python, NumPy and torch with ``seed + rank`` (``rank``: a data-parallel replica's), apply
    ``torch_threads`` and determinism flags; return the device."""
    random.seed(cfg.seed + rank)
    np.random.seed(cfg.seed + rank)
    torch.manual_seed(cfg.seed + rank)
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
    torch.backends.cudnn.deterministic = bool(cfg.torch_deterministic)
    torch.backends.cudnn.benchmark = not cfg.torch_deterministic
    return resolve_device(cfg.device)


class StopSignal:
    """SIGINT and SIGTERM as a request to stop at the end of the current iteration.

    The trainers read :attr:`signum` (an attribute, no system call) where they check ``time_limit_s`` and
    stop the same way: final checkpoint and a summary whose ``stop_reason`` names the signal. A second
    signal gets the previous handler's behaviour (``KeyboardInterrupt`` for SIGINT) for a run stuck before
    its next check, unless it is the same signal within ``DUPLICATE_S`` seconds of the first: coreutils'
    ``timeout`` sends its signal to the command and then to its whole process group, so the trainer receives
    it twice at once, and that must not cost the final checkpoint. Handlers can only be installed from the
    main thread; elsewhere this does nothing.
    """

    DUPLICATE_S = 1.0

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._first_at = 0.0
        self._previous: Dict[int, Any] = {}

    def install(self) -> None:
        self.signum = None
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @property
    def reason(self) -> Optional[str]:
        return None if self.signum is None else self.describe(self.signum)

    def adopt(self, signum: int) -> None:
        """Stop on ``signum`` as if it had arrived here (a data-parallel replica's, which all replicas act on),
        unless a signal already did."""
        if self.signum is None:
            self.signum = signum

    @staticmethod
    def describe(signum: int) -> str:
        """``stop_reason`` for a stop on signal ``signum``: ``"signal SIGINT"``, ``"signal SIGTERM"``."""
        return f"signal {signal.Signals(signum).name}"

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._first_at = signum, now
            return
        if signum == self.signum and now - self._first_at < self.DUPLICATE_S:
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)


STOP = StopSignal()
