"""The small hand-computed credit-assignment cases from real bug reports (``credit_assignment.json``).

The team keeps them in ``../shared/cases/`` beside the checkout; that file is read when it exists, so cases added
there are tested at once. A clone without it uses the snapshot committed in ``tests/data/``, so that the suite runs
from any checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

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
