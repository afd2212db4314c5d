"""Properties of the code Triton generates for the kernels, checked without a GPU (sm_90 SASS from the
ptxas and nvdisasm bundled with Triton)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
triton = pytest.importorskip("triton")
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


@pytest.mark.skipif(not all(os.path.exists(os.path.join(BIN, b)) for b in ("ptxas", "nvdisasm")),
                    reason="Triton's bundled ptxas / nvdisasm are missing")
def test_backward_chunk_walks_have_no_warp_shuffles(tmp_path):
    """A warp walking 32 environments' horizon in chunks of 4 or 8 rows keeps each chunk's rows inside its
    threads, so its scans need no data from other lanes. Held in the recurrence's order, the backward
    estimators' chunks scan forwards; a reverse scan put 80-160 shuffles into each of these kernels
    (scripts/sass_shuffles.py; on the H200 V-trace took 1.3x as long with them at 65536x128). The one
    reduction over the lanes that remains, five shuffles once per program after the walk, is the check for
    non-finite values (kernels._triton_kernels._solve).

    The kernels are compiled in a process of their own: this one may run Triton's interpreter, and a process
    cannot switch between the two once Triton's JIT functions exist."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "sass.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_shuffles.py"), "--walks", "--out", str(out)],
                   env=env, check=True, capture_output=True, timeout=600)
    counts = json.loads(out.read_text())
    backward = ("gae_kernel", "vtrace_kernel", "retrace_kernel", "lambda_returns_kernel", "discounted_kernel")
    walks = {k: v["this"] for k, v in counts.items() if k.split("/")[0] in backward}
    assert len(walks) == len(backward)
    for key, c in walks.items():
        assert c["instructions"] > 100, key  # a real listing
        assert c["shfl"] <= 5, (key, c["shfl"])


@pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ptxas")), reason="Triton's bundled ptxas is missing")
def test_importance_ratio_clips_keep_a_nan_on_the_gpu():
    """V-trace's and Retrace's clips of pi/mu are minimums. A GPU's plain min returns the other operand when one
    is NaN, so a NaN log-prob would come out clipped and finite, where the reference (and the interpreter, which
    runs numpy's minimum) gives NaN; the kernels ask for the NaN-propagating form (PTX min.NaN), found by an
    independent audit on the H200. Compiled in a process of its own, as above."""
    code = (
        "import os, sys; sys.path.insert(0, os.path.join(sys.argv[1], 'scripts'))\n"
        "import sass_shuffles as S\n"
        "K = S.load_kernels(os.path.join(sys.argv[1], 'kernels'), 'kernels_ptx')\n"
        "for name, n in (('vtrace_kernel', 3), ('retrace_kernel', 1)):\n"
        "    ptx = S.compiled(getattr(K, name), (64, 32, 8, 8, False), 2).asm['ptx']\n"
        "    print(name, ptx.count('min.NaN'), ptx.count('min.f32'), n)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code, ROOT], env=env, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    for line in out.strip().splitlines():
        name, nan_mins, plain_mins, clips = line.split()
        assert int(nan_mins) >= int(clips), line  # each clip of pi/mu, per element held by a thread
        assert int(plain_mins) == 0, line
