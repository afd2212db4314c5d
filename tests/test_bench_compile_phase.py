"""The torch.compile phase of scripts/bench_kernels.py (compile_baselines), run on the CPU by
tests/compile_phase_dry_run.py: which baselines are compiled, in which batches, and that no baseline is timed
while another process of its batch is still compiling or timing."""

import json
import os
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_compile_phase_times_each_baseline_alone_after_its_batch_compiled(tmp_path):
    out, log = tmp_path / "res.json", tmp_path / "log.jsonl"
    env = dict(os.environ, COMPILE_PHASE_LOG=str(log))
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "compile_phase_dry_run.py"), str(out)], env=env,
                   check=True, capture_output=True, text=True, timeout=600)
    res = json.loads(out.read_text())
    r = res["results"]

    # timed by an earlier call: left as it was
    assert r["gae/8x6"]["compile_us"] == 123.0 and "compile_time_s" not in r["gae/8x6"]
    # a worker that dies without a message is an error of its own pair only
    assert "compile_us" not in r["vtrace/8x6"]
    assert "exited without a result" in r["vtrace/8x6"]["compile_error"]
    # one that dies while it waits for its turn to time
    assert "compile_us" not in r["vtrace/4x20"] and r["vtrace/4x20"]["compile_time_s"] > 0
    assert "exited without a result" in r["vtrace/4x20"]["compile_error"]
    # a worker that hangs is terminated after the limit
    assert "compile_us" not in r["retrace/8x6"] and r["retrace/8x6"]["compile_time_s"] > 0
    assert r["retrace/8x6"]["compile_error"] == "the worker process sent no result within 3 s"
    assert [e["where"] for e in res["errors"]] == ["compile timing vtrace/4x20", "compile vtrace/8x6",
                                                   "compile timing retrace/8x6"]
    for key in ("gae/4x20", "retrace/4x20"):
        assert r[key]["compile_us"] > 0 and r[key]["compile_time_s"] > 0, key
        assert r[key]["speedup_vs_compile"] == r[key]["compile_us"] / 10.0
        assert r[key]["targets"]["ge_10x_vs_compile"] == (r[key]["compile_us"] >= 100.0)
        assert r[key].get("compile_chunk_t") == (8 if key.endswith("x20") else None), key
    assert len(res["compile_batches_s"]) == 2  # five baselines, three workers at once

    events = defaultdict(dict)
    for line in log.read_text().splitlines():
        key, what, when = json.loads(line)
        events[key][what] = when
    # longer windows first (up to the chunk of 8 steps): the three T = 20 baselines (vtrace's died after compiling),
    # then the T = 6 ones (vtrace's died before its first message, retrace's hung once told to time)
    first = ["gae/4x20", "retrace/4x20"]
    assert set(events) == set(first) | {"vtrace/4x20", "retrace/8x6"}
    assert all(set(events[k]) == {"compiled", "go", "timed"} for k in first), events
    assert set(events["vtrace/4x20"]) == {"compiled"}
    first_compiled = max(events[k]["compiled"] for k in first + ["vtrace/4x20"])
    assert set(events["retrace/8x6"]) == {"compiled", "go"}
    # every worker of the batch compiled before any was told to time
    assert first_compiled < min(events[k]["go"] for k in first)
    # one timing at a time, in the batch's order
    assert sorted(first, key=lambda k: events[k]["go"]) == first
    assert all(events[a]["timed"] <= events[b]["go"] for a, b in zip(first, first[1:]))
    # the second batch starts after the first has been timed
    assert max(events[k]["timed"] for k in first) < events["retrace/8x6"]["compiled"]
