#!/usr/bin/env python
"""Which earlier work leaves the host-bound full calls slower? (CUDA GPU; writes JSON.)

scripts/bench_kernels.py times every full call in three rounds, the later two after all seven shapes, and in 7 of
8 runs the later rounds were the slower ones (2-3 us at 4096x16). This probe times one host-bound measure, the
benchmark's own full-call round (`full_call_round`: WARM_S s of calls, then back-to-back batches with out=) of GAE
and discounted returns at 4096x16, before and after each of these, in turn, in one process:

  sustained-calls   30 s of back-to-back GAE calls at 4096x16 (host load alone)
  gpu-bound         the benchmark's device timings of all seven estimators at 65536x128 (do_bench, L2-evicted
                    events, a copy of the same bytes)
  graph-captures    a CUDA graph of 20 calls captured and replayed, per estimator, at 4096x16 and 65536x128
  loop-baseline     the CleanRL-style Python loop of GAE at 512x2048, as the benchmark times it
  gc-freeze         gc.collect() then gc.freeze()
  idle              10 s asleep
  new-buffers       fresh input sets and out= buffers (as repeat_full_calls makes them)

Each "before" measure shows the drift over time alone; after minus before is the step's own effect. Each measure
also records the host's state: a one-element torch op's host time, the CPU the process ran on and its clock (from
/proc/cpuinfo), involuntary context switches and the number of objects the garbage collector tracks.

With --series S it instead runs S seconds of short cycles: a quick measure (the one-element op's host time and
GAE's per-call time over 10 back-to-back batches of 50 calls, about 10 ms), one of five activities of about a
second, the quick measure again: "spin" (a Python busy loop, no CUDA), "sleep" (idle), "gc" (a busy loop, then
gc.collect()), "gpu" (back-to-back GAE calls at 65536x128: GPU-bound) and "launch" (back-to-back GAE calls at
4096x16: host-bound). A cause of the slow state would show as an activity after which the measure is slow more
often than before it.

With --companion S it asks whether the slow state belongs to this process or to the host: for S seconds it
takes, every 50 ms, the one-element op's host time, GAE's per-call time (5 batches of 50 calls) and the time of a
pure-Python loop, while a second process that never imports torch times the same loop every 20 ms. If the other
process's loop slows down at the moments GAE does, the state is the host's.

Usage: python scripts/probe_round_drift.py --out RESULTS.json
       python scripts/probe_round_drift.py --series 150 --out RESULTS.json
       python scripts/probe_round_drift.py --companion 150 --out RESULTS.json
       (H200, 2026-12-02: benchmarks/results/round-drift-probe-nvidia-h200-2026-12-02-{a,b}.json, two runs in one
       device call with a two-shape benchmark run between them, round-drift-series-...json and
       round-drift-companion-...json, console output in the matching ...-log.txt files; read in
       docs/benchmarks-history.md, twenty-first session)
"""
import argparse
import datetime
import gc
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

import bench_kernels as B  # noqa: E402
import kernels as K  # noqa: E402

SHAPE = (4096, 16)
TIMED = ("gae", "discounted_returns")
REPS = 1000
REPEATS = 3
SLOW_GAE_US = 10.5  # GAE at 4096x16 took 8-10 us per call in the fast state and 11.5-15 in the slow one


def cpu_state():
    """The CPU this process last ran on, its clock and the mean clock of all CPUs (MHz), from /proc."""
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    mhz = {}
    with open("/proc/cpuinfo") as f:
        proc = None
        for line in f:
            if line.startswith("processor"):
                proc = int(line.split(":")[1])
            elif line.startswith("cpu MHz") and proc is not None:
                mhz[proc] = float(line.split(":")[1])
    return dict(cpu=cpu, cpu_mhz=mhz.get(cpu), mean_mhz=statistics.mean(mhz.values()) if mhz else None)


class Probe:
    def __init__(self, dev):
        self.dev = dev
        self.fast = B.fast_calls(K)
        self.tiny = torch.zeros(1, device=dev)
        self.make_buffers()

    def make_buffers(self):
        nsets = B.n_input_sets(*SHAPE, B.l2_bytes())
        self.sets = [B.make_inputs(*SHAPE, self.dev, seed=10 + i) for i in range(nsets)]
        self.outs = {}
        for name in TIMED:
            o = [self.fast[name](d) for d in self.sets]
            self.outs[name] = [tuple(x) if isinstance(x, tuple) else x for x in o]
        torch.cuda.synchronize()

    def measure(self):
        """REPEATS x the benchmark's full-call round of each TIMED estimator, with the host's state around it."""
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        out = dict(at_s=round(time.perf_counter() - T0, 2), **cpu_state(), gc_tracked=len(gc.get_objects()),
                   gc_counts=list(gc.get_count()))
        for name in TIMED:
            out[name] = [B.full_call_round(self.fast[name], self.sets, self.outs[name], REPS) for _ in range(REPEATS)]
        out["tiny_op_host_us"] = B.tiny_op_host_us(self.tiny, REPS)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        out["involuntary_switches"] = ru1.ru_nivcsw - ru0.ru_nivcsw
        out["cpu_after"] = cpu_state()["cpu"]
        return out


def sustained_calls(p):
    fn, outs = p.fast["gae"], p.outs["gae"]
    t_end = time.perf_counter() + 30
    while time.perf_counter() < t_end:
        for i, d in enumerate(p.sets):
            fn(d, out=outs[i])
        torch.cuda.synchronize()


def gpu_bound(p):
    l2 = B.l2_bytes()
    d = B.make_inputs(65536, 128, p.dev, seed=10)
    for name, fn in p.fast.items():
        o = fn(d)
        o = tuple(o) if isinstance(o, tuple) else o
        triton.testing.do_bench(lambda: fn(d, out=o), warmup=25, rep=200, return_mode="median")
        B.time_clean_l2(lambda: fn(d, out=o), 300, l2)
        B.copy_same_bytes_us(B.BYTES[name] * 65536 * 128, 300, l2)
    torch.cuda.empty_cache()


def graph_captures(p):
    for shape in (SHAPE, (65536, 128)):
        d = B.make_inputs(*shape, p.dev, seed=10)
        for name, fn in p.fast.items():
            o = fn(d)
            o = tuple(o) if isinstance(o, tuple) else o
            B.time_graph(lambda x: fn(x, out=o), d, REPS)
    torch.cuda.empty_cache()


def loop_baseline(p):
    sets = [B.make_inputs(512, 2048, p.dev, seed=10 + i) for i in range(3)]
    B.LOOPS["gae"](sets[0])
    torch.cuda.synchronize()
    B.time_back_to_back(B.LOOPS["gae"], sets, 10, inner=1)
    del sets
    torch.cuda.empty_cache()


def gc_freeze(p):
    gc.collect()
    gc.freeze()


def idle(p):
    torch.cuda.synchronize()
    time.sleep(10)


def new_buffers(p):
    p.make_buffers()


STEPS = [("sustained-calls", sustained_calls), ("gpu-bound", gpu_bound), ("graph-captures", graph_captures),
         ("loop-baseline", loop_baseline), ("gc-freeze", gc_freeze), ("idle", idle), ("new-buffers", new_buffers)]


def quick_measure(p):
    fn, outs = p.fast["gae"], p.outs["gae"]
    gae = B.time_back_to_back(fn, p.sets, 500, outs=outs)
    return dict(at_s=round(time.perf_counter() - T0, 3), tiny_op_host_us=B.tiny_op_host_us(p.tiny, 500),
                gae_us=gae)


def _busy(seconds, work):
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        work()
    torch.cuda.synchronize()


def series(p, seconds):
    """Cycles of quick measure, activity, quick measure for `seconds` (see the module docstring)."""
    fn, outs = p.fast["gae"], p.outs["gae"]
    big = B.make_inputs(65536, 128, p.dev, seed=10)
    big_out = tuple(fn(big))
    activities = {
        "spin": lambda: _busy(1.0, lambda: sum(range(1000))),
        "sleep": lambda: time.sleep(1.0),
        "gc": lambda: (_busy(1.0, lambda: sum(range(1000))), gc.collect()),
        "gpu": lambda: _busy(1.0, lambda: [fn(big, out=big_out) for _ in range(20)]),
        "launch": lambda: _busy(1.0, lambda: [fn(d, out=outs[i]) for i, d in enumerate(p.sets)]),
    }
    cycles = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for tag, work in activities.items():
            before = quick_measure(p)
            work()
            cycles.append(dict(activity=tag, before=before, after=quick_measure(p)))
    return cycles


def py_work():
    d = {}
    for i in range(2000):
        d[i & 63] = d.get(i & 63, 0) + i
    return d


def py_work_us():
    """The middle of three timings of py_work, in microseconds."""
    xs = []
    for _ in range(3):
        t0 = time.perf_counter()
        py_work()
        xs.append((time.perf_counter() - t0) * 1e6)
    return sorted(xs)[1]


# the companion process runs the same two functions (their source), without torch
_COMPANION = "import json, sys, time\n" + inspect.getsource(py_work) + inspect.getsource(py_work_us) + """
t_end = time.time() + float(sys.argv[1])
rows = []
while time.time() < t_end:
    rows.append((time.time(), py_work_us()))
    time.sleep(0.02)
json.dump(rows, sys.stdout)
"""


def companion(p, seconds):
    """Samples of this process (op, GAE, Python loop) and of a torch-free companion process (its Python loop)."""
    fn, outs = p.fast["gae"], p.outs["gae"]
    proc = subprocess.Popen([sys.executable, "-c", _COMPANION, str(seconds)], stdout=subprocess.PIPE, text=True)
    rows = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        rows.append(dict(t=time.time(), tiny_op_host_us=B.tiny_op_host_us(p.tiny, 200),
                         gae_us=B.time_back_to_back(fn, p.sets, 250, outs=outs), py_us=py_work_us()))
        time.sleep(0.05)
    other = json.loads(proc.communicate(timeout=seconds + 60)[0])
    return rows, other


def report_companion(rows, other):
    """Medians of this process's samples with GAE fast and slow, beside the companion's loop nearest in time."""
    times = [t for t, _ in other]
    for state, sel in (("fast", [r for r in rows if r["gae_us"] < SLOW_GAE_US]),
                       ("slow", [r for r in rows if r["gae_us"] >= SLOW_GAE_US])):
        if not sel:
            continue
        near = [other[min(range(len(times)), key=lambda k: abs(times[k] - r["t"]))][1] for r in sel]
        print(f"GAE {state}: {len(sel)} samples, GAE {statistics.median(r['gae_us'] for r in sel):.2f} us, op "
              f"{statistics.median(r['tiny_op_host_us'] for r in sel):.2f} us, own Python loop "
              f"{statistics.median(r['py_us'] for r in sel):.1f} us, companion's {statistics.median(near):.1f} us",
              flush=True)


def main():
    global T0
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--series", type=float, default=None, metavar="S")
    ap.add_argument("--companion", type=float, default=None, metavar="S")
    args = ap.parse_args()
    T0 = time.perf_counter()
    dev = torch.device("cuda")
    p = Probe(dev)
    if args.companion is not None:
        B.warm_process(p.fast, list(p.fast), dev, SHAPE)
        rows, other = companion(p, args.companion)
        res = dict(B.run_info(), mode="companion", seconds=args.companion, rows=rows, companion=other)
        with open(args.out, "w") as f:
            json.dump(res, f)
        report_companion(rows, other)
        print(f"wrote {args.out}", flush=True)
        return
    if args.series is not None:
        B.warm_process(p.fast, list(p.fast), dev, SHAPE)
        res = dict(B.run_info(), mode="series", seconds=args.series, cycles=series(p, args.series))
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        for c in res["cycles"]:
            before, after = c["before"], c["after"]
            print(f"{before['at_s']:7.1f}s {c['activity']:7s} tiny {before['tiny_op_host_us']:5.2f} -> "
                  f"{after['tiny_op_host_us']:5.2f}  gae {before['gae_us']:5.2f} -> {after['gae_us']:5.2f}")
        print(f"wrote {args.out}", flush=True)
        return
    B.warm_process(p.fast, list(p.fast), dev, SHAPE)
    res = dict(B.run_info(), shape=list(SHAPE), reps=REPS, repeats=REPEATS, warm_s=B.WARM_S,
               idle_event_floor_us=B.idle_event_floor(), steps=[])
    res["fresh"] = p.measure()
    print("fresh", json.dumps(res["fresh"]), flush=True)
    for tag, step in STEPS:
        before = p.measure()
        t0 = time.perf_counter()
        step(p)
        took = time.perf_counter() - t0
        after = p.measure()
        res["steps"].append(dict(step=tag, took_s=round(took, 2), before=before, after=after))
        print(f"{tag:16s} took {took:5.1f}s  " + "  ".join(
            f"{n} {statistics.median(before[n]):5.2f} -> {statistics.median(after[n]):5.2f}" for n in TIMED)
            + f"  tiny {before['tiny_op_host_us']:5.2f} -> {after['tiny_op_host_us']:5.2f}"
            f"  cpu {before['cpu']}@{before['cpu_mhz']} -> {after['cpu']}@{after['cpu_mhz']}"
            f"  invol {before['involuntary_switches']} -> {after['involuntary_switches']}", flush=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    res["idle_event_floor_end_us"] = B.idle_event_floor()
    res["date_end"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.out}", flush=True)


T0 = 0.0

if __name__ == "__main__":
    main()
