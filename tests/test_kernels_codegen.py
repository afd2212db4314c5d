"""Properties of the code Triton generates for the kernels, checked without a GPU (sm_90 SASS from the
ptxas and nvdisasm bundled with Triton)."""
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
triton = pytest.importorskip("triton")
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def _sass_shuffles():
    """scripts/sass_shuffles.py as a module (not on sys.path)."""
    spec = importlib.util.spec_from_file_location("sass_shuffles_for_tests",
                                                  os.path.join(ROOT, "scripts", "sass_shuffles.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not all(os.path.exists(os.path.join(BIN, b)) for b in ("ptxas", "nvdisasm")),
                    reason="Triton's bundled ptxas / nvdisasm are missing")
def test_backward_chunk_walks_have_no_warp_shuffles(monkeypatch):
    """A warp walking 32 environments' horizon in chunks of 4 or 8 rows keeps each chunk's rows inside its
    threads, so its scans need no data from other lanes. Held in the recurrence's order, the backward
    estimators' chunks scan forwards; a reverse scan put 80-160 shuffles into each of these kernels
    (scripts/sass_shuffles.py; on the H200 V-trace took 1.3x as long with them at 65536x128)."""
    S = _sass_shuffles()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compiled kernels, not the interpreter's
    K = S.load_kernels(os.path.join(ROOT, "kernels"), "kernels_codegen_check")
    try:
        for name, plan in (("gae_kernel", (8, 32, 1, 0, False)), ("vtrace_kernel", (4, 32, 1, 0, False)),
                           ("retrace_kernel", (4, 32, 1, 0, False)), ("lambda_returns_kernel", (8, 32, 1, 0, False)),
                           ("discounted_kernel", (8, 32, 1, 0, False))):
            shuffles, instructions = S.counts(S.sass(getattr(K, name), plan, 16 if plan[0] == 8 else 32))
            assert instructions > 100, name  # a real listing
            assert shuffles == 0, (name, shuffles)
    finally:
        for mod in [m for m in sys.modules if m.startswith("kernels_codegen_check")]:
            del sys.modules[mod]
