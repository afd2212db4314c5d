#!/usr/bin/env python
"""How much of the roofline target a copy itself meets, from a bench_kernels.py JSON (no GPU).

The benchmark times a device-to-device copy of each pair's bytes the way it times the kernels' device time
(events around one call after an L2 eviction: ``copy_same_bytes_us``, as ``device_clean_us``, the table's
**device**), and its roofline divides the bytes by a
copy bandwidth measured on a large copy (``copy_bandwidth_bytes_per_s``). A least-squares line through the
copies of at least ``--min-mb`` MB, ``copy_us = fixed_us + bytes / streaming_bandwidth``, separates the fixed
cost of one cold call from the streaming rate. Under the target ``device <= 1.5 x bytes / copy_bandwidth``, a
kernel as fast as that copy then passes only when it moves at least
``fixed_us / (1.5 / copy_bandwidth - 1 / streaming_bandwidth)`` bytes: the break-even size printed last, with
every pair's copy against its target.

Usage: python scripts/fit_copy_time.py [benchmarks/results/kernels-nvidia-h200.json] [--min-mb 20] [--out F.json]
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def fit(results: dict, min_bytes: float):
    """(fixed_us, streaming bytes per us) of the least-squares line through the copies of >= min_bytes."""
    pts = [(v["bytes"], v["copy_same_bytes_us"]) for v in results.values()
           if v["bytes"] >= min_bytes and v.get("copy_same_bytes_us") is not None]
    if len(pts) < 2:
        raise ValueError(f"--min-mb leaves {len(pts)} copies; the fit needs at least 2")
    x, y = np.array(pts, dtype=float).T
    fixed_us, us_per_byte = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)[0]
    return float(fixed_us), float(1.0 / us_per_byte)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", default="benchmarks/results/kernels-nvidia-h200.json")
    ap.add_argument("--min-mb", type=float, default=20.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    with open(a.path) as f:
        d = json.load(f)
    bw_per_us = d["copy_bandwidth_bytes_per_s"] / 1e6
    fixed_us, stream_per_us = fit(d["results"], a.min_mb * 1e6)  # pairs without a timed copy are left out
    break_even = fixed_us / (1.5 / bw_per_us - 1.0 / stream_per_us)
    pairs = {}
    timed = {k: v for k, v in d["results"].items() if v.get("copy_same_bytes_us") is not None}
    for key, v in sorted(timed.items(), key=lambda kv: kv[1]["bytes"]):
        roof = v["bytes"] / bw_per_us
        pairs[key] = dict(bytes=v["bytes"], copy_us=v["copy_same_bytes_us"], roofline_us=roof,
                          copy_vs_roofline=v["copy_same_bytes_us"] / roof, device_us=v.get("device_clean_us"),
                          device_vs_copy=(v["device_clean_us"] / v["copy_same_bytes_us"])
                          if v.get("device_clean_us") else None)
        print(f"{key:32s} {v['bytes'] / 1e6:7.1f} MB  copy {v['copy_same_bytes_us']:5.1f} us = "
              f"{v['copy_same_bytes_us'] / roof:4.2f}x roofline; device {pairs[key]['device_vs_copy'] or 0:4.2f}x copy")
    print(f"fit over copies >= {a.min_mb:g} MB: {fixed_us:.2f} us fixed + bytes / {stream_per_us / 1e6:.2f} TB/s "
          f"(measured copy bandwidth {bw_per_us / 1e6:.2f} TB/s); a copy meets 1.5x the roofline from "
          f"{break_even / 1e6:.1f} MB")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(source=a.path, gpu=d.get("gpu"), date=d.get("date"), min_mb=a.min_mb,
                           fixed_us=fixed_us, streaming_bytes_per_s=stream_per_us * 1e6,
                           copy_bandwidth_bytes_per_s=d["copy_bandwidth_bytes_per_s"],
                           break_even_bytes_for_1p5x=break_even, pairs=pairs), f, indent=1)


if __name__ == "__main__":
    main()
