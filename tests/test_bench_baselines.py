"""The baselines of scripts/bench_kernels.py compute what the kernels compute: a CleanRL-style loop that solved
another recurrence would make every speed-up against it meaningless. Each loop (float32) against the float64
reference, and the chunked form that the torch.compile baseline runs beyond COMPILE_CHUNK_T steps against the
loop over the whole window."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import bench_kernels as B  # noqa: E402
from kernels import reference as R  # noqa: E402

NAMES = list(B.LOOPS)


def _inputs(N, T, seed):
    d = B.make_inputs(N, T, torch.device("cpu"), seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    # more episode ends than the benchmark's 2% / 1%, so that short windows have dones inside every chunk
    d["terminated"] = torch.rand(T, N, generator=g) < 0.15
    d["truncated"] = torch.rand(T, N, generator=g) < 0.1
    return d


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("name", NAMES)
def test_each_baseline_loop_matches_the_float64_reference(name):
    refs = B.ref_calls(R)
    for N, T, seed in [(7, 1, 0), (5, 13, 1), (3, 40, 2)]:
        d = _inputs(N, T, seed)
        got, want = _tuple(B.LOOPS[name](d)), _tuple(refs[name](d))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("chunk", [1, 4, 13, 64])
def test_chunked_baseline_equals_the_loop_over_the_whole_window(name, chunk):
    d = _inputs(6, 29, 3)  # 29 rows: chunks of 4 leave a last chunk of one row
    whole = _tuple(B.LOOPS[name](d))
    chunked = _tuple(B.chunked_loop(name, B._LOOP_FNS[name], d, chunk=chunk))
    for c, w in zip(chunked, whole):
        torch.testing.assert_close(c, w, rtol=1e-6, atol=1e-6)
    assert len(chunked) == len(whole)


def test_long_windows_are_compiled_in_chunks():
    assert B.COMPILE_CHUNK_T < 2048 <= max(T for _, T in B.SHAPES)


@pytest.mark.parametrize("name", NAMES)
def test_every_chunk_runs_the_same_compiled_graph(name):
    """The compile baseline compiles the chunk function once: the chunk at the window's edge passes the same kinds of
    arguments as the others (dynamo's eager backend: the graphs it traces, no Inductor)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    d = _inputs(4, 12, 5)
    comp = torch.compile(B._LOOP_FNS[name], backend="eager", dynamic=False)
    got = _tuple(B.chunked_loop(name, comp, d, chunk=4))
    assert counters["stats"]["unique_graphs"] == 1
    for g, w in zip(got, _tuple(B.LOOPS[name](d))):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_copy_time_fit_recovers_a_known_line():
    """scripts/fit_copy_time.py: copies timed as 4 us + bytes at 5 TB/s give back 4 us and 5e6 bytes per us,
    ignoring the copies below --min-mb; fewer than two copies above it is a ValueError."""
    import fit_copy_time as F
    results = {f"c{i}": {"bytes": b, "copy_same_bytes_us": 4.0 + b / 5e6} for i, b in enumerate((3e7, 6e7, 2e8))}
    results["small"] = {"bytes": 1e6, "copy_same_bytes_us": 9.0}  # below the cut: would bend the line
    fixed_us, bytes_per_us = F.fit(results, 2e7)
    assert fixed_us == pytest.approx(4.0, abs=1e-9)
    assert bytes_per_us == pytest.approx(5e6, rel=1e-9)
    with pytest.raises(ValueError, match="min-mb"):
        F.fit(results, 1e8)


def test_compare_kernel_runs_ratios_and_target_counts():
    """scripts/compare_kernel_runs.py: ratios new / old for the pairs both runs timed (a pair only one run has is
    left out), device time being device_clean_us (the table's) and do_bench device_us, a timing one run lacks
    None; plan changes, each run's targets met out of those it timed; no common pair is a ValueError."""
    import compare_kernel_runs as C

    def pair(device, full, plan, **targets):
        return {"device_clean_us": device, "device_us": 2 * device, "full_call_us": full,
                "host_tiny_torch_op_us": 7.0, "plan": plan, "targets": targets}

    old = {"gpu": "g", "results": {"gae/4x2": pair(10.0, 8.0, [1], full_call_lt_10us=True),
                                   "vtrace/4x2": pair(20.0, 12.0, [2], full_call_lt_10us=False, ge_10x_vs_compile=True),
                                   "gae/8x2": pair(5.0, 5.0, [1], full_call_lt_10us=True)}}
    new = {"gpu": "g", "results": {"gae/4x2": pair(11.0, 6.0, [1], full_call_lt_10us=True),
                                   "vtrace/4x2": pair(15.0, 9.0, [3], full_call_lt_10us=True)}}
    c = C.compare(old, new)
    assert set(c["pairs"]) == {"gae/4x2", "vtrace/4x2"}
    assert c["pairs"]["gae/4x2"]["device_ratio"] == pytest.approx(1.1)
    assert c["pairs"]["vtrace/4x2"]["full_call_ratio"] == pytest.approx(0.75)
    assert c["pairs"]["gae/4x2"]["device_us"] == [10.0, 11.0]
    assert c["pairs"]["gae/4x2"]["do_bench_us"] == [20.0, 22.0]
    assert c["pairs"]["gae/4x2"]["graph_ratio"] is None
    assert [c["pairs"][k]["plan_changed"] for k in ("gae/4x2", "vtrace/4x2")] == [False, True]
    assert c["device_ratio"] == pytest.approx({"median": 0.925, "min": 0.75, "max": 1.1})
    assert c["targets"]["old"] == {"full_call_lt_10us": [2, 3], "ge_10x_vs_compile": [1, 1]}
    assert c["targets"]["new"] == {"full_call_lt_10us": [2, 2]}
    with pytest.raises(ValueError, match="no estimator/shape pair"):
        C.compare(old, {"results": {"retrace/1x1": pair(1.0, 1.0, [0])}})
    with pytest.raises(ValueError, match="device_clean_us"):
        C.compare({"results": {"gae/4x2": {"full_call_us": 1.0, "targets": {}}}},
                  {"results": {"gae/4x2": {"full_call_us": 1.0, "targets": {}}}})


@pytest.mark.parametrize("argv, message", [
    (["--only", "gae"], "--only needs --out and --md"),
    (["--shapes", "512x2048"], "--shapes needs --out and --md"),
    (["--only", "gea", "--out", "x.json", "--md", "x.md"], "--only: ['gea'] are not estimators"),
])
def test_a_partial_benchmark_run_cannot_replace_the_headline(argv, message, tmp_path):
    """A run of some estimators or shapes written to the default JSON and table would replace the full run's."""
    import subprocess

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "bench_kernels.py")
    proc = subprocess.run([sys.executable, script, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-1000:]


def test_ptx_comparison_counts_a_variant_in_one_file_apart_from_one_that_differs(tmp_path, capsys):
    import json

    import ptx_opcodes

    before = {"gae/a": {"add.f32": 3}, "gae/b": {"add.f32": 1}}
    after = {"gae/a": {"add.f32": 4}, "gae/b": {"add.f32": 1}, "gae/c": {"add.f32": 1}}
    paths = []
    for name, counts in (("before.json", before), ("after.json", after)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(counts))
    assert ptx_opcodes.compare(*paths) == 2
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["gae/a {'add.f32': (3, 4)}",
                       "1 of the 2 variants in both files differ in their opcode counts or hashes",
                       f"1 variants only in {paths[1]}: gae/c"]
