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


def _in_a_process_of_its_own(code: str) -> str:
    """stdout of the Python `code`, run with this checkout's root as sys.argv[1] in a new process without
    TRITON_INTERPRET (a process that has run Triton's interpreter cannot compile for a GPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code, ROOT], env=env, check=True, capture_output=True, text=True,
                          timeout=900).stdout


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
    out = _in_a_process_of_its_own(code)
    for line in out.strip().splitlines():
        name, nan_mins, plain_mins, clips = line.split()
        assert int(nan_mins) >= int(clips), line  # each clip of pi/mu, per element held by a thread
        assert int(plain_mins) == 0, line


@pytest.mark.skipif(not all(os.path.exists(os.path.join(BIN, b)) for b in ("ptxas", "nvdisasm")),
                    reason="Triton's bundled ptxas / nvdisasm are missing")
def test_with_pdl_every_kernel_waits_for_the_previous_grid_before_touching_memory():
    """Plans launched with programmatic dependent launch (kernels._triton_ops._pdl) may start while the kernel
    before them in the stream, e.g. the one that wrote their inputs, still runs. So in the SASS of every kernel
    compiled with PDL, two segment plans (one loading the next chunk ahead) and a split plan (whose programs also read
    their epoch from a workspace), the grid-dependency wait (ACQBULK) comes before any global load, store or atomic;
    without PDL the kernels hold no grid-dependency instruction. Compiled in a process of its own, as above."""
    code = (
        "import os, re, sys; sys.path.insert(0, os.path.join(sys.argv[1], 'scripts'))\n"
        "import sass_shuffles as S\n"
        "K = S.load_kernels(os.path.join(sys.argv[1], 'kernels'), 'kernels_pdl')\n"
        "for name in ('gae_kernel', 'vtrace_kernel', 'lambda_returns_kernel', 'discounted_kernel',\n"
        "             'retrace_kernel', 'forward_kernel'):\n"
        "    for plan, n_chunks, preload in (((64, 32, 8, 8, False), 2, 0), ((16, 32, 4, 4, False), 8, 2),\n"
        "                                    ((128, 32, 8, 16, True), 4, 0)):\n"
        "        for pdl in (False, True):\n"
        "            cubin = S.compiled(getattr(K, name), plan, n_chunks, preload, pdl=pdl).asm['cubin']\n"
        "            ops = re.findall(r'^\\s*/\\*[0-9a-f]{4}\\*/\\s+(?:@!?U?P\\w+\\s+)?([A-Z][A-Z0-9_.]*)',\n"
        "                             S.nvidia_tool('nvdisasm', cubin, '-c'), re.M)\n"
        "            mem = [i for i, op in enumerate(ops)\n"
        "                   if op.split('.')[0] in ('LDG', 'STG', 'ATOMG', 'ATOM', 'RED', 'REDG', 'LD', 'ST')]\n"
        "            wait = [i for i, op in enumerate(ops) if op == 'ACQBULK']\n"
        "            print(name, plan[4], int(pdl), len(ops), wait[0] if wait else -1, mem[0] if mem else -1,\n"
        "                  len(wait))\n")
    out = _in_a_process_of_its_own(code)
    lines = out.strip().splitlines()
    assert len(lines) == 6 * 3 * 2
    for line in lines:
        name, split, pdl, n_ops, first_wait, first_mem, n_waits = line.split()
        assert int(n_ops) > 100 and int(first_mem) > 0, line  # a real listing with memory accesses
        if pdl == "1":
            assert 0 <= int(first_wait) < int(first_mem), line
        else:
            assert int(n_waits) == 0, line
