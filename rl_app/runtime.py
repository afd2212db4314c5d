"""Process-level setup shared by the trainers: device choice, seeding, torch threads."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when available, else CPU; asking for CUDA without a GPU is a ``ValueError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but torch sees no CUDA device; use device=cpu or device=auto")
    return device


def setup_process(cfg: Any) -> torch.device:
    """Seed Python, NumPy and torch, apply ``torch_threads`` and determinism flags; return the device."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.torch_threads > 0:
        torch.set_num_threads(cfg.torch_threads)
    torch.backends.cudnn.deterministic = bool(cfg.torch_deterministic)
    torch.backends.cudnn.benchmark = not cfg.torch_deterministic
    return resolve_device(cfg.device)
