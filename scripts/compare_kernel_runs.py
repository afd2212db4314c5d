#!/usr/bin/env python
"""Two runs of scripts/bench_kernels.py side by side, pair by pair (no GPU).

For every estimator/shape pair in both runs, each as new / old: device time (``device_clean_us``, events around
one call after an L2 eviction: the table's "device" and the roofline target's numerator), ``do_bench``
(``device_us``: ``triton.testing.do_bench``, whose L2 flush the timed call writes back), CUDA-graph time per call
(``graph_us``: back-to-back calls with no host in between) and full call (``full_call_us``); then the one-element
torch op timed beside the full call (``host_tiny_torch_op_us``: the host's state then, which bounds the full call
from below) and whether the plan changed. Then each run's count of the issue's targets met, as its own JSON records
them, and the median, smallest and largest device-time ratio. Compare runs of one GPU model only: the ratios mix
machine with code otherwise (the runs' GPU names are printed first); two machine starts of one model with the same
kernels differed by 0.91-1.04x in device time (docs/benchmarks.md, fifty-third session).

Usage: python scripts/compare_kernel_runs.py OLD.json NEW.json [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import statistics


TIMINGS = {"device": "device_clean_us", "do_bench": "device_us", "graph": "graph_us", "full_call": "full_call_us"}
"""What each compared timing is called here, and its key in bench_kernels.py's JSON."""


def target_counts(results: dict) -> dict:
    """{target: [met, timed]} over the pairs' ``targets`` dicts (a pair lists only the targets timed for it)."""
    counts: dict = {}
    for v in results.values():
        for name, ok in v["targets"].items():
            met_timed = counts.setdefault(name, [0, 0])
            met_timed[0] += bool(ok)
            met_timed[1] += 1
    return counts


def compare(old: dict, new: dict) -> dict:
    """Per-pair ratios (new / old) of device time, do_bench, graph time and full call for the pairs both runs
    timed (a timing one run lacks gives None), with the host state of each and whether the plan changed; each
    run's target counts; the device ratios' median and range. Raises ValueError when the runs share no pair."""
    common = [k for k in new["results"] if k in old["results"]]
    if not common:
        raise ValueError("the two runs share no estimator/shape pair")
    pairs = {}
    for k in common:
        o, n = old["results"][k], new["results"][k]
        pairs[k] = {"tiny_op_us": [o.get("host_tiny_torch_op_us"), n.get("host_tiny_torch_op_us")],
                    "plan_changed": o.get("plan") != n.get("plan")}
        for name, key in TIMINGS.items():
            both = [o.get(key), n.get(key)]
            pairs[k][f"{name}_us"] = both
            pairs[k][f"{name}_ratio"] = None if None in both else both[1] / both[0]
    ratios = sorted(p["device_ratio"] for p in pairs.values() if p["device_ratio"] is not None)
    if not ratios:
        raise ValueError("the two runs share no pair with a device time (device_clean_us)")
    return {"gpus": [old.get("gpu"), new.get("gpu")], "dates": [old.get("date"), new.get("date")],
            "pairs": pairs,
            "targets": {"old": target_counts(old["results"]), "new": target_counts(new["results"])},
            "device_ratio": {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--out")
    a = ap.parse_args()
    with open(a.old) as f:
        old = json.load(f)
    with open(a.new) as f:
        new = json.load(f)
    c = compare(old, new)
    print(f"old: {c['gpus'][0]} {c['dates'][0]}\nnew: {c['gpus'][1]} {c['dates'][1]}")
    print(f"{'pair (us old / new, ratio)':30s}" + "".join(f" {name:>21s}" for name in TIMINGS)
          + f" {'tiny op':>13s}  plan")

    def us(x):
        return "-" if x is None else f"{x:.1f}"

    def ratio(x):
        return "-" if x is None else f"{x:.3f}"

    for k, p in c["pairs"].items():
        cells = "".join(f" {us(p[f'{n}_us'][0]):>6s}/{us(p[f'{n}_us'][1]):<6s} {ratio(p[f'{n}_ratio']):>6s}"
                        for n in TIMINGS)
        print(f"{k:30s}{cells} {us(p['tiny_op_us'][0]):>6s}/{us(p['tiny_op_us'][1]):<6s}"
              f"  {'changed' if p['plan_changed'] else ''}")
    r = c["device_ratio"]
    print(f"device time new/old: median {r['median']:.3f}, {r['min']:.3f}-{r['max']:.3f}")
    for name in sorted(set(c["targets"]["old"]) | set(c["targets"]["new"])):
        o, n = c["targets"]["old"].get(name, [0, 0]), c["targets"]["new"].get(name, [0, 0])
        print(f"{name}: old {o[0]}/{o[1]}, new {n[0]}/{n[1]}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(c, f, indent=1)


if __name__ == "__main__":
    main()
