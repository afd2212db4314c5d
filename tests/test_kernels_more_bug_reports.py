"""The second and third sets of hand-computed cases from public bug reports (``tests/data/bug_report_cases_more.json``,
``tests/data/bug_report_cases_third.json``), in the format of the team's ``credit_assignment.json`` plus ``source``
(the issue or pull-request thread), ``arithmetic`` and, for the half-precision cases, ``dtype``.

Each case holds one environment's inputs as lists (time-major, flags as 0/1) and the expected outputs worked out by
hand from the credit-assignment issue's formulas (``arithmetic``; not from ``kernels.reference``); the helpers that
wrote them (fifty-sixth and sixty-fifth sessions) also checked every one against a float64 loop of their own. A few
third-set cases pin behaviour that their thread did not confirm as a bug; their ``why`` says so. Retrace's
next_values form gives ``"values": null`` in ``kwargs``. They run through both backends ("triton" under
TRITON_INTERPRET=1 on a CPU, "triton-cuda" on a GPU), in float32 and float64, or in the case's own dtype. What a
one-environment case cannot hold (batch layout, vectorised against per-environment calls, gradients) is in
test_kernels_third_bug_reports.py.
"""
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

from pathlib import Path  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
from kernels import reference  # noqa: E402
from tests.shared_cases import BACKENDS, PER_STEP_KW, kernels_on, run_case  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
CASES = [case for name in ("bug_report_cases_more.json", "bug_report_cases_third.json")
         for case in json.loads((DATA / name).read_text())["cases"]]
# float64 to rounding; float32 relative to each value (the cases' values are small); half types exactly: their
# expected values are what float32 accumulation rounds to once at the end
TOLERANCE = {torch.float64: (1e-9, 1e-12), torch.float32: (1e-5, 1e-6), torch.float16: (0, 0), torch.bfloat16: (0, 0)}


def _runs():
    for case in CASES:
        dtypes = [getattr(torch, case["dtype"])] if "dtype" in case else [torch.float32, torch.float64]
        for dtype in dtypes:
            yield pytest.param(case, dtype, id=f"{case['name']}-{str(dtype).split('.')[1]}")


def test_the_cases_are_well_formed():
    names = [c["name"] for c in CASES]
    assert len(CASES) >= 37 + 33 and len(set(names)) == len(names)
    for c in CASES:
        assert c["source"] and c["why"] and c["arithmetic"] and hasattr(kernels, c["function"]), c["name"]
        lengths = ({len(v) for v in c["inputs"].values()} | {len(v) for v in c["expected"].values()}
                   | {len(v) for k, v in c["kwargs"].items() if k in PER_STEP_KW})
        assert len(lengths) == 1, c["name"]


def _check(case, outs, dtype):
    assert len(outs) == len(case["expected"])
    rtol, atol = TOLERANCE[dtype]
    for (name, expected), got in zip(case["expected"].items(), outs):
        assert got.dtype == dtype and got.shape == (len(expected), 1)
        torch.testing.assert_close(got[:, 0].double(), torch.tensor(expected, dtype=torch.float64), rtol=rtol,
                                   atol=atol, equal_nan=True, msg=lambda m: f"{case['name']} {name}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case,dtype", list(_runs()))
def test_a_case_from_a_bug_report(case, dtype, backend):
    _check(case, run_case(case, getattr(kernels_on(backend), case["function"]), dtype), dtype)


@pytest.mark.parametrize("case", [c for c in CASES if "dtype" not in c], ids=lambda c: c["name"])
def test_the_float64_reference_gives_each_case(case):
    """The reference is the spec: it must give the hand-computed values too (the half-precision cases hold only in
    their dtype)."""
    fn = getattr(reference, case["function"].removeprefix("compute_"))
    _check(case, run_case(case, fn, torch.float64), torch.float64)
