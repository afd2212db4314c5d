"""The small hand-computed credit-assignment cases from real bug reports (``credit_assignment.json``).

The team keeps them in ``../shared/cases/`` beside the checkout; that file is read when it exists, so cases added
there are tested at once. A clone without it uses the snapshot committed in ``tests/data/``, so that the suite runs
from any checkout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TEAM_FILE = ROOT.parent / "shared" / "cases" / "credit_assignment.json"
SNAPSHOT = ROOT / "tests" / "data" / "credit_assignment.json"


def cases_file() -> Path:
    """The team's file if this checkout sits beside ``shared/``, else the committed snapshot."""
    return TEAM_FILE if TEAM_FILE.is_file() else SNAPSHOT


def load_cases() -> List[Dict[str, Any]]:
    """The cases: each a dict with ``name``, ``function`` (a ``kernels`` function name), ``inputs``, ``kwargs``
    and ``expected`` (one list per output, in the function's output order)."""
    return json.loads(cases_file().read_text())["cases"]


PER_STEP_KW = {"next_values", "behaviour_log_probs", "target_log_probs"}

TRITON_OK = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
# "triton": the kernels under TRITON_INTERPRET=1 on a CPU; "triton-cuda": the compiled kernels on a GPU (inputs
# moved there, outputs back), for runs on a CUDA machine with TRITON_INTERPRET=0.
BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="no interpreter")),
            pytest.param("triton-cuda", marks=pytest.mark.skipif(
                not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                reason="needs a GPU and TRITON_INTERPRET=0"))]


class kernels_on:  # noqa: N801 - reads as a call: kernels_on(backend).compute_gae(...)
    """``kernels`` for one entry of BACKENDS: ``kernels_on(backend).compute_gae(...)`` moves every tensor argument
    to the backend's device (``Tensor.to``: a CPU tensor stays as it is, a dense view such as ``.t()`` keeps its
    strides on the GPU), calls with its ``backend=`` and returns the outputs on the CPU."""

    def __init__(self, backend: str):
        self.device = "cuda" if backend == "triton-cuda" else "cpu"
        self.backend = backend.split("-")[0]

    def __getattr__(self, name: str) -> Callable:
        import kernels  # after the test module has set TRITON_INTERPRET

        fn = getattr(kernels, name)

        def call(*args, **kwargs):
            def move(x):
                return x.to(self.device) if torch.is_tensor(x) else x

            kwargs = {key: move(value) for key, value in kwargs.items()}
            kwargs["backend"] = self.backend
            out = fn(*map(move, args), **kwargs)
            return type(out)(*(o.cpu() for o in out)) if isinstance(out, tuple) else out.cpu()

        return call


def run_case(case: Dict[str, Any], fn: Callable, dtype: torch.dtype) -> Tuple[torch.Tensor, ...]:
    """``fn(**inputs, **kwargs)`` on one case: its per-step lists as ``[T, 1]`` columns of ``dtype``, its
    per-sequence lists (``bootstrap_value``, ``initial``) as ``[1]`` tensors, scalars as they are; the outputs
    as a tuple."""
    col = lambda xs: torch.tensor(xs, dtype=dtype).reshape(-1, 1)  # noqa: E731
    inputs = {k: col(v) for k, v in case["inputs"].items()}
    kw = {k: (col(v) if k in PER_STEP_KW else torch.tensor(v, dtype=dtype) if isinstance(v, list) else v)
          for k, v in case["kwargs"].items()}
    out = fn(**inputs, **kw)
    return out if isinstance(out, tuple) else (out,)
