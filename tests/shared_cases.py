"""The small hand-computed credit-assignment cases from real bug reports (``credit_assignment.json``).

The team keeps them in ``../shared/cases/`` beside the checkout; that file is read when it exists, so cases added
there are tested at once. A clone without it uses the snapshot committed in ``tests/data/``, so that the suite runs
from any checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

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
