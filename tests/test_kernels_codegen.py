"""Properties of the code Triton generates for the kernels, checked without a GPU (sm_90 SASS from the
bundled ptxas and nvdisasm)."""
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

triton = pytest.importorskip("triton")
NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")


@pytest.mark.skipif(not os.path.exists(NVDISASM) and not shutil.which("nvdisasm"), reason="no nvdisasm")
def test_backward_chunk_walks_have_no_warp_shuffles(monkeypatch):
    """A warp walking 32 environments' horizon in chunks of 4 or 8 rows keeps each chunk's rows inside its
    threads, so its scans need no data from other lanes. Held in the recurrence's order, the backward
    estimators' chunks scan forwards; a reverse scan put 80-160 shuffles into each of these kernels
    (scripts/sass_shuffles.py; on the H200 V-trace took 1.3x as long with them at 65536x128)."""
    import sass_shuffles as S
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
