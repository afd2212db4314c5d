#!/usr/bin/env python
"""Benchmark the seven credit-assignment kernels on a CUDA GPU.

For every estimator and (N, T) shape it measures, in one run:
  * full call   : what a training step pays per call, host overhead included: CUDA events around a
                  batch of back-to-back Python calls (rotating input sets), divided by the batch size
                  (median over batches), so max(host time, device time) per call; timed in 3 rounds
                  (--full-call-rounds), the first beside the pair's other timings and the others after all
                  shapes, and reported as their median (all rounds are kept, each with a one-element torch
                  op's host time after it: the host's state then). Headline figure with
                  preallocated outputs (``out=``); also without ``out=`` (two allocations), the host time
                  alone, and one call timed from an idle GPU together with that method's floor (two
                  events with nothing between them: about 10 us on the H200 machine, so the idle-GPU
                  figure can never go below it).
  * device time : CUDA events around one call after L2 is evicted by *reading* a buffer 4x its size
                  (median; "device clean"), triton.testing.do_bench (median; it evicts L2 by *writing* zeros
                  to a 256 MB buffer, so the timed call also pays for writing those dirty lines back: a
                  streaming kernel of 16384x128 GAE's bytes took 15.0 us that way against 11.9 us after a
                  read, benchmarks/results/tile-scan-nvidia-h200-2026-11-30-b.json), and CUDA-graph replay.
                  Beside them, a device-to-device copy of the same bytes timed the clean way: the floor a
                  call of this size can reach on this GPU, launch and ramp-up included.
  * baselines   : a CleanRL-style Python loop over T (torch ops, float32), torch.compile of that same
                  loop (a last phase, after every kernel number is saved: compiling the unrolled loops
                  takes minutes, so worker processes compile them in parallel, then time them one at a
                  time with nothing else running; beyond COMPILE_CHUNK_T steps the loop is compiled for
                  chunks of that many steps and run chunk by chunk), and the memory roofline (bytes moved /
                  device-to-device copy bandwidth measured here with a 1 GiB copy).
Before timing, each estimator is checked on the GPU against the float64 reference.
Input buffers are rotated (enough copies to exceed ~2x L2) for the full-call timings so that small
shapes are not served from L2; do_bench flushes L2 itself.

Writes benchmarks/results/kernels-<gpu-slug>.json (or --out) and regenerates docs/benchmarks.md.
A failure in one estimator/baseline is recorded in the JSON and the run continues.
Usage: python scripts/bench_kernels.py [--quick] [--out PATH] [--no-compile] [--md PATH]
       python scripts/bench_kernels.py --render RESULTS.json   (table only, no GPU)
       python scripts/bench_kernels.py --quick --compile-into RESULTS.json   (finish a run cut short)
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

SHAPES = [(4096, 16), (4096, 128), (16384, 32), (32768, 16), (16384, 128), (512, 2048), (65536, 128)]
GAMMA, LAM = 0.99, 0.95
MD_DEFAULT = os.path.join(ROOT, "docs", "benchmarks.md")
WARM_S = 0.5  # seconds of back-to-back calls before each estimator's timings
# Seconds of back-to-back calls of every estimator, in turn, between the correctness phase and the first timing.
# Without it the first pair timed (GAE at 4096x16) had the highest host time of the run on 63d3127 (12.4 us
# against 8.1-9.0 us for the same call at the other shapes).
WARM_PROCESS_S = 3.0
# Limits for one torch.compile baseline's worker process (compile_baselines): its compile (1-5 min seen on the H200
# host for a T >= 128 loop) and its timing (seconds).
COMPILE_LIMIT_S = 1800
TIMING_LIMIT_S = 600
_DIED = "the worker process exited without a result (killed, or out of memory?)"


# ----------------------------------------------------------------------------- inputs

def make_inputs(N, T, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    f = dict(device=dev, dtype=torch.float32)
    return dict(
        rewards=torch.randn(T, N, generator=g, **f), values=torch.randn(T, N, generator=g, **f),
        q_values=torch.randn(T, N, generator=g, **f),
        behaviour_log_probs=-torch.rand(T, N, generator=g, **f), target_log_probs=-torch.rand(T, N, generator=g, **f),
        terminated=torch.rand(T, N, generator=g, device=dev) < 0.02,
        truncated=torch.rand(T, N, generator=g, device=dev) < 0.01,
        bootstrap_value=torch.randn(N, generator=g, **f), initial=torch.randn(N, generator=g, **f),
    )


# per estimator: (fast call, float64 reference, python loop, bytes moved per element-row)
def n_input_sets(N, T, l2):
    """How many input sets of make_inputs(N, T) to rotate through so that together they exceed 2x L2 (at most 32;
    about 24 bytes per element)."""
    return max(1, min(32, math.ceil(2 * l2 / (N * T * 4 * 6))))


def plan_of(name, N, T):
    """The launch plan (T_BLOCK, BLOCK_N, num_warps, SEG_L, SPLIT, PRELOAD, MAXNREG) that kernels picks for a contiguous
    [T, N]."""
    from kernels import _triton_ops as O
    kernel = dict(gae=O.K.gae_kernel, vtrace=O.K.vtrace_kernel, lambda_returns=O.K.lambda_returns_kernel,
                  discounted_returns=O.K.discounted_kernel, retrace=O.K.retrace_kernel).get(name, O.K.forward_kernel)
    return list(O._tile(T, N, True, kernel))


def fast_calls(K):
    return {
        "gae": lambda d, out=None: K.compute_gae(d["rewards"], d["values"], d["terminated"], d["truncated"],
                                                 gamma=GAMMA, lambda_=LAM, bootstrap_value=d["bootstrap_value"],
                                                 out=out),
        "vtrace": lambda d, out=None: K.compute_vtrace(
            d["rewards"], d["values"], d["terminated"], d["truncated"], behaviour_log_probs=d["behaviour_log_probs"],
            target_log_probs=d["target_log_probs"], gamma=GAMMA, bootstrap_value=d["bootstrap_value"], out=out),
        "lambda_returns": lambda d, out=None: K.compute_lambda_returns(
            d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAM,
            bootstrap_value=d["bootstrap_value"], out=out),
        "discounted_returns": lambda d, out=None: K.compute_discounted_returns(
            d["rewards"], d["terminated"], d["truncated"], gamma=GAMMA, bootstrap_value=d["bootstrap_value"], out=out),
        "retrace": lambda d, out=None: K.compute_retrace(
            d["rewards"], d["q_values"], d["values"], d["terminated"], d["truncated"],
            behaviour_log_probs=d["behaviour_log_probs"], target_log_probs=d["target_log_probs"], gamma=GAMMA,
            lambda_=LAM, bootstrap_value=d["bootstrap_value"], out=out),
        "eligibility_traces": lambda d, out=None: K.compute_eligibility_traces(
            d["rewards"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAM, initial=d["initial"], out=out),
        "episodic_prefix_sum": lambda d, out=None: K.compute_episodic_prefix_sum(
            d["rewards"], d["terminated"], d["truncated"], initial=d["initial"], out=out),
    }


def ref_calls(R):
    return {
        "gae": lambda d: R.gae(d["rewards"], d["values"], d["terminated"], d["truncated"], gamma=GAMMA, lambda_=LAM,
                               bootstrap_value=d["bootstrap_value"]),
        "vtrace": lambda d: R.vtrace(d["rewards"], d["values"], d["terminated"], d["truncated"],
                                     behaviour_log_probs=d["behaviour_log_probs"],
                                     target_log_probs=d["target_log_probs"], gamma=GAMMA,
                                     bootstrap_value=d["bootstrap_value"]),
        "lambda_returns": lambda d: R.lambda_returns(d["rewards"], d["values"], d["terminated"], d["truncated"],
                                                     gamma=GAMMA, lambda_=LAM, bootstrap_value=d["bootstrap_value"]),
        "discounted_returns": lambda d: R.discounted_returns(d["rewards"], d["terminated"], d["truncated"],
                                                             gamma=GAMMA, bootstrap_value=d["bootstrap_value"]),
        "retrace": lambda d: R.retrace(d["rewards"], d["q_values"], d["values"], d["terminated"], d["truncated"],
                                       behaviour_log_probs=d["behaviour_log_probs"],
                                       target_log_probs=d["target_log_probs"], gamma=GAMMA, lambda_=LAM,
                                       bootstrap_value=d["bootstrap_value"]),
        "eligibility_traces": lambda d: R.eligibility_traces(d["rewards"], d["terminated"], d["truncated"],
                                                             gamma=GAMMA, lambda_=LAM, initial=d["initial"]),
        "episodic_prefix_sum": lambda d: R.episodic_prefix_sum(d["rewards"], d["terminated"], d["truncated"],
                                                               initial=d["initial"]),
    }


# CleanRL-style loops over T in float32 torch ops (also the torch.compile baseline). The keyword arguments after the
# inputs carry the recurrence in from the rows beyond the window (None: the window is the whole rollout), so that
# the same loop runs on chunks of a long rollout (chunked_loop).
def loop_gae(r, v, te, tr, bv, last=None):
    T = r.shape[0]
    adv = torch.zeros_like(r)
    last = torch.zeros_like(r[0]) if last is None else last
    done = (te | tr).float()
    nonterm = 1.0 - te.float()
    for t in reversed(range(T)):
        nv = bv if t == T - 1 else v[t + 1]
        delta = r[t] + GAMMA * nv * nonterm[t] - v[t]
        last = delta + GAMMA * LAM * (1.0 - done[t]) * last
        adv[t] = last
    return adv, adv + v


def loop_vtrace(r, v, te, tr, bv, blp, tlp, acc=None, vs_next=None):
    T = r.shape[0]
    rho = torch.exp(torch.clamp(tlp - blp, max=0.0))
    done = (te | tr).float()
    nonterm = 1.0 - te.float()
    vs = torch.zeros_like(r)
    acc = torch.zeros_like(r[0]) if acc is None else acc
    for t in reversed(range(T)):
        nv = bv if t == T - 1 else v[t + 1]
        delta = rho[t] * (r[t] + GAMMA * nonterm[t] * nv - v[t])
        acc = delta + GAMMA * (1.0 - done[t]) * rho[t] * acc
        vs[t] = v[t] + acc
    vnext = torch.cat([vs[1:], (bv if vs_next is None else vs_next)[None]], 0)
    vn = torch.cat([v[1:], bv[None]], 0)
    w = torch.where((te | tr), vn, vnext)
    return vs, rho * (r + GAMMA * nonterm * w - v)


def loop_lambda(r, v, te, tr, bv, G=None):
    T = r.shape[0]
    out = torch.zeros_like(r)
    last_lam = G is not None  # rows beyond the window: the last row mixes in their return
    G = torch.zeros_like(r[0]) if G is None else G
    done = (te | tr).float()
    nonterm = 1.0 - te.float()
    for t in reversed(range(T)):
        nv = bv if t == T - 1 else v[t + 1]
        lam = 0.0 if t == T - 1 and not last_lam else LAM * (1.0 - done[t])
        G = r[t] + GAMMA * nonterm[t] * ((1.0 - lam) * nv + lam * G)
        out[t] = G
    return out


def loop_discounted(r, te, tr, bv, G=None, keep_last=None):
    """G, keep_last: the return beyond the window and its factor at the last row (None: bv, not cut)."""
    T = r.shape[0]
    out = torch.zeros_like(r)
    G = bv if G is None else G
    done = (te | tr).float()
    nonterm = 1.0 - te.float()
    for t in reversed(range(T)):
        if t < T - 1:
            C = G * (1.0 - done[t])
        else:
            C = G if keep_last is None else G * keep_last
        G = r[t] + GAMMA * nonterm[t] * C
        out[t] = G
    return out


def loop_retrace(r, q, v, te, tr, bv, blp, tlp, after=None):
    """after: (values, q_values, behaviour and target log-probs, Q_ret) of the row just beyond the window."""
    T = r.shape[0]
    c = LAM * torch.exp(torch.clamp(tlp - blp, max=0.0))
    out = torch.zeros_like(r)
    G = torch.zeros_like(r[0])
    done = (te | tr).float()
    nonterm = 1.0 - te.float()
    for t in reversed(range(T)):
        if t == T - 1 and after is None:
            G = r[t] + GAMMA * nonterm[t] * bv
        elif t == T - 1:
            v1, q1, blp1, tlp1, G1 = after
            c1 = LAM * torch.exp(torch.clamp(tlp1 - blp1, max=0.0))
            G = r[t] + GAMMA * nonterm[t] * (v1 + (1.0 - done[t]) * c1 * (G1 - q1))
        else:
            G = r[t] + GAMMA * nonterm[t] * (v[t + 1] + (1.0 - done[t]) * c[t + 1] * (G - q[t + 1]))
        out[t] = G
    return out


def loop_forward(x, te, tr, ini, f, done_before=None):
    """done_before: done at the row just before the window (None: the window starts the rollout)."""
    out = torch.zeros_like(x)
    e = ini
    done = (te | tr).float()
    for t in range(x.shape[0]):
        if t == 0:
            e = x[t] + (f if done_before is None else f * (1.0 - done_before)) * e
        else:
            e = x[t] + f * (1.0 - done[t - 1]) * e
        out[t] = e
    return out


def _done_row(d, t):
    return (d["terminated"][t] | d["truncated"][t]).float()


def _rows(d, sl):
    return {k: (x[sl] if x.dim() == 2 else x) for k, x in d.items()}


def _gae_call(f, d, t=None, nxt=None):
    if "full" not in d:
        return f(d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"])
    bv, last = _beyond(d, t, nxt, lambda o: o[0][0])
    return f(d["rewards"], d["values"], d["terminated"], d["truncated"], bv, last=last)


def _vtrace_call(f, d, t=None, nxt=None):
    args = (d["rewards"], d["values"], d["terminated"], d["truncated"])
    logp = (d["behaviour_log_probs"], d["target_log_probs"])
    if "full" not in d:
        return f(*args, d["bootstrap_value"], *logp)
    bv, vs_next = _beyond(d, t, nxt, lambda o: o[0][0])
    vs_next = bv.clone() if nxt is None else vs_next  # vs beyond the window is V+ there (a copy: dynamo guards
    # on which arguments alias, so an alias would compile this chunk's graph a second time)
    return f(*args, bv, *logp, acc=vs_next - bv, vs_next=vs_next)


def _lambda_call(f, d, t=None, nxt=None):
    if "full" not in d:
        return f(d["rewards"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"])
    bv, G = _beyond(d, t, nxt, lambda o: o[0])
    # at the window's end the last row mixes bv with itself: (1-lam)*bv + lam*bv
    return f(d["rewards"], d["values"], d["terminated"], d["truncated"], bv, G=bv.clone() if nxt is None else G)


def _discounted_call(f, d, t=None, nxt=None):
    if "full" not in d:
        return f(d["rewards"], d["terminated"], d["truncated"], d["bootstrap_value"])
    bv = d["bootstrap_value"]
    if nxt is None:  # the window's end: bv, not cut by a done at T-1
        return f(d["rewards"], d["terminated"], d["truncated"], bv, G=bv, keep_last=torch.ones_like(bv))
    return f(d["rewards"], d["terminated"], d["truncated"], bv, G=nxt[0], keep_last=1.0 - _done_row(d, -1))


def _retrace_call(f, d, t=None, nxt=None):
    args = (d["rewards"], d["q_values"], d["values"], d["terminated"], d["truncated"], d["bootstrap_value"],
            d["behaviour_log_probs"], d["target_log_probs"])
    if "full" not in d:
        return f(*args)
    if nxt is None:  # the window's end: V+ = bv and a zero trace term (Q_ret - q = 0)
        z = [torch.zeros_like(d["bootstrap_value"]) for _ in range(4)]  # distinct: see _vtrace_call
        return f(*args, after=(d["bootstrap_value"], *z))
    full = d["full"]
    return f(*args, after=tuple(full[k][t] for k in ("values", "q_values", "behaviour_log_probs",
                                                     "target_log_probs")) + (nxt[0],))


def _forward_call(factor):
    def call(f, d, t=None, prev=None):
        if "full" not in d:
            return f(d["rewards"], d["terminated"], d["truncated"], d["initial"], factor)
        if prev is None:  # the window's start: initial, never cut
            return f(d["rewards"], d["terminated"], d["truncated"], d["initial"], factor,
                     done_before=torch.zeros_like(d["initial"]))
        return f(d["rewards"], d["terminated"], d["truncated"], prev[-1], factor,
                 done_before=_done_row(d["full"], t - 1))
    return call


def _beyond(d, t, nxt, carry_of):
    """(V+ at the chunk's last row, the carry from the chunk after it): bootstrap_value and zeros at the window's
    end, else values[t] and carry_of(that chunk's outputs)."""
    if nxt is None:
        return d["bootstrap_value"], torch.zeros_like(d["bootstrap_value"])
    return d["full"]["values"][t], carry_of(nxt)


# name -> call(loop, d, t, outs): the loop on d's rows. For a chunk of a longer window (d["full"], chunked_loop), t is
# the row just beyond the chunk and outs the outputs of the chunk from there (backward recurrences), or t the chunk's
# first row and outs the outputs of the chunk before it (forward ones); every chunk passes the same kinds of
# arguments, so that one compiled graph serves them all.
LOOP_CALLS = {"gae": _gae_call, "vtrace": _vtrace_call, "lambda_returns": _lambda_call,
              "discounted_returns": _discounted_call, "retrace": _retrace_call,
              "eligibility_traces": _forward_call(GAMMA * LAM), "episodic_prefix_sum": _forward_call(1.0)}
_LOOP_FNS = {"gae": loop_gae, "vtrace": loop_vtrace, "lambda_returns": loop_lambda,
             "discounted_returns": loop_discounted, "retrace": loop_retrace, "eligibility_traces": loop_forward,
             "episodic_prefix_sum": loop_forward}
_FORWARD = ("eligibility_traces", "episodic_prefix_sum")
LOOPS = {name: (lambda d, name=name: LOOP_CALLS[name](_LOOP_FNS[name], d)) for name in LOOP_CALLS}

# torch.compile unrolls the loop over T: Inductor took 77 s for GAE's 128 steps and 100 s for 256 on a 2-core CPU
# (scripts/time_loop_compile.py, benchmarks/results/compile-time-unrolled-gae-cpu-2026-12-01.txt), and
# minutes per estimator on the H200 host at T = 128, so horizons beyond COMPILE_CHUNK_T are compiled as chunks of
# that many steps (one compiled chunk function, run over the chunks in the recurrence's order with the carry passed
# in between: what one would do with a long rollout).
COMPILE_CHUNK_T = 128


def chunked_loop(name, fn, d, chunk=COMPILE_CHUNK_T):
    """The loop `fn` (LOOP_CALLS[name]'s form, e.g. a torch.compile of _LOOP_FNS[name]) over chunks of `chunk` rows
    of d, carrying the recurrence across; the same outputs as the loop over the whole window."""
    T = d["rewards"].shape[0]
    bounds = [(t0, min(t0 + chunk, T)) for t0 in range(0, T, chunk)]
    outs = [None] * len(bounds)
    order = range(len(bounds)) if name in _FORWARD else reversed(range(len(bounds)))
    prev = None
    for i in order:
        t0, t1 = bounds[i]
        sub = dict(_rows(d, slice(t0, t1)), full=d)
        o = LOOP_CALLS[name](fn, sub, t0 if name in _FORWARD else t1, prev)
        prev = o
        outs[i] = o
    if isinstance(outs[0], tuple):
        return tuple(torch.cat([o[j] for o in outs], 0) for j in range(len(outs[0])))
    return torch.cat(outs, 0)


# bytes moved per (t, n) element: float32 inputs + bool flags + float32 outputs (per-sequence inputs ignored)
BYTES = {"gae": 4 * 2 + 2 + 4 * 2, "vtrace": 4 * 4 + 2 + 4 * 2, "lambda_returns": 4 * 2 + 2 + 4,
         "discounted_returns": 4 + 2 + 4, "retrace": 4 * 5 + 2 + 4, "eligibility_traces": 4 + 2 + 4,
         "episodic_prefix_sum": 4 + 2 + 4}


# ----------------------------------------------------------------------------- timing helpers

def median(xs):
    return statistics.median(xs) if xs else None


def time_back_to_back(fn, sets, reps, outs=None, inner=50):
    """Per-call time of `inner` back-to-back calls between two events (median over batches).

    ``outs[i]`` (if given) is passed as ``out=`` with ``sets[i]``."""
    xs = []
    for _ in range(max(3, reps // inner)):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if outs is None:
            for i in range(inner):
                fn(sets[i % len(sets)])
        else:
            for i in range(inner):
                fn(sets[i % len(sets)], out=outs[i % len(sets)])
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) * 1e3 / inner)
    return median(xs)


def idle_event_floor(reps=200):
    """Two events recorded with nothing between them on an idle GPU (the floor of time_full_call)."""
    xs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) * 1e3)
    return median(xs)


def time_full_call(fn, sets, reps):
    """Events around one call (GPU idle before it) and host wall-clock with sync; rotate input sets."""
    ev, wall = [], []
    for i in range(reps):
        d = sets[i % len(sets)]
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        fn(d)
        e.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
        ev.append(s.elapsed_time(e) * 1e3)
    return median(ev), median(wall)


def time_host_only(fn, d, reps):
    """Host cost of the call alone (CPU time to return; the GPU runs asynchronously)."""
    xs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(d)
        xs.append((time.perf_counter() - t0) * 1e6)
        if len(xs) % 64 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return median(xs)


def time_graph(fn, d, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(d)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    inner = 20
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn(d)
    g.replay()
    torch.cuda.synchronize()
    xs = []
    for _ in range(max(5, reps // 20)):
        s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record()
        g.replay()
        e0.record()
        torch.cuda.synchronize()
        xs.append(s0.elapsed_time(e0) * 1e3 / inner)
    return median(xs)


def l2_bytes():
    """The current GPU's L2 size in bytes (50 MiB if PyTorch does not say)."""
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)


def run_info(**extra):
    """GPU, versions and UTC date for a results JSON, plus `extra`."""
    import triton
    return dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                python=platform.python_version(),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **extra)


def time_clean_l2(fn, reps, l2):
    """Median of CUDA events around one call, each after a read of 4x L2 evicts the inputs without leaving
    dirty lines behind (do_bench's zero-fill eviction would have the call write them back)."""
    buf = torch.ones(max(1, 4 * l2 // 4), device="cuda")
    fn()
    pairs = []
    for _ in range(reps):
        buf.sum()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    del buf
    return median([s.elapsed_time(e) * 1e3 for s, e in pairs])


def copy_same_bytes_us(nbytes, reps, l2):
    """A device-to-device copy moving nbytes in all (nbytes/2 read, nbytes/2 written), timed like
    time_clean_l2."""
    n = max(1, nbytes // 8)
    a, b = torch.ones(n, device="cuda"), torch.empty(n, device="cuda")
    return time_clean_l2(lambda: b.copy_(a), reps, l2)


def measure_copy_bw():
    n = 1 << 28  # 1 GiB of float32
    a = torch.empty(n, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    xs = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e) / 1e3)
    del a, b
    return 2 * n * 4 / median(xs)  # bytes/s (read + write)


def _compile_worker(job, conn):
    """Worker process of compile_baselines: compile one baseline, report, wait for the go, time it, report.

    job = (name, N, T, nsets, reps). Messages sent: ("compiled", seconds) or ("error", text), then, once the
    main process sends "go", ("timed", us) or ("error", text)."""
    name, N, T, nsets, reps = job
    try:
        sets = [make_inputs(N, T, torch.device("cuda"), seed=10 + i) for i in range(nsets)]
        comp = compiled_loop(name, T)
        t0 = time.perf_counter()
        comp(sets[0])
        torch.cuda.synchronize()
        conn.send(("compiled", time.perf_counter() - t0))
    except Exception:  # noqa: BLE001  (recorded by the main process)
        conn.send(("error", traceback.format_exc()[-3000:]))
        return
    try:
        if conn.recv() != "go":
            return
    except EOFError:  # the main process ended the batch
        return
    try:
        t_warm = time.perf_counter() + WARM_S  # as the kernels' full calls get (full_call_round)
        while time.perf_counter() < t_warm:
            for d in sets:
                comp(d)
            torch.cuda.synchronize()
        conn.send(("timed", time_back_to_back(comp, sets, reps, inner=10)))
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()[-3000:]))


def compiled_loop(name, T):
    """torch.compile of the CleanRL loop for a window of T rows: of the whole loop, or beyond COMPILE_CHUNK_T rows of
    its chunk function, run by chunked_loop."""
    if T <= COMPILE_CHUNK_T:
        return torch.compile(LOOPS[name], dynamic=False)
    comp = torch.compile(_LOOP_FNS[name], dynamic=False)
    return lambda d: chunked_loop(name, comp, d)


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="fewer reps (3-4 min on the H200 machine with --no-compile)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/kernels-<gpu>.json)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--md", default=MD_DEFAULT)
    ap.add_argument("--only", default=None, help="comma-separated estimator names")
    ap.add_argument("--render", default=None, help="rewrite --md from a saved results JSON and exit (no GPU)")
    ap.add_argument("--compile-into", default=None, metavar="RESULTS_JSON",
                    help="only the torch.compile phase, for the shapes a saved run lacks (one whose device call "
                         "ran out of time); updates that JSON and --md")
    ap.add_argument("--shapes", default=None, metavar="NxT,...",
                    help="time only these of the issue's shapes (correctness too), e.g. 512x2048; default all")
    ap.add_argument("--full-call-rounds", type=int, default=3, metavar="R",
                    help="time every full call in R rounds (the first with the pair's other timings, the rest after "
                         "all shapes) and report their median (default 3)")
    ap.add_argument("--compile-shapes", default=None, metavar="NxT,...",
                    help="limit the torch.compile phase to these shapes, e.g. 16384x128,65536x128")
    args = ap.parse_args()
    if args.full_call_rounds < 1:
        ap.error(f"--full-call-rounds must be at least 1, got {args.full_call_rounds}")
    shapes = SHAPES
    if args.shapes:
        shapes = [s for s in SHAPES if f"{s[0]}x{s[1]}" in args.shapes.split(",")]
        unknown = set(args.shapes.split(",")) - {f"{N}x{T}" for N, T in SHAPES}
        if unknown:
            ap.error(f"--shapes: {sorted(unknown)} are not among the issue's shapes {[f'{N}x{T}' for N, T in SHAPES]}")
    if args.only and set(args.only.split(",")) - set(BYTES):
        ap.error(f"--only: {sorted(set(args.only.split(',')) - set(BYTES))} are not estimators; they are "
                 f"{', '.join(BYTES)}")
    for flag, value in (("--shapes", args.shapes), ("--only", args.only)):
        if value and not args.render and not args.compile_into and (args.out is None or args.md == MD_DEFAULT):
            ap.error(f"{flag} needs --out and --md, so that a partial run does not replace the full run's results "
                     f"and table")
    if args.render:
        with open(args.render) as f:
            write_markdown(json.load(f), args.md, args.render)
        return
    if not torch.cuda.is_available():
        sys.exit("bench_kernels.py needs a CUDA GPU")

    import triton
    import triton.testing
    import kernels as K
    from kernels import reference as R

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    gpu = props.name
    reps = 200 if args.quick else 1000
    loop_reps = 3 if args.quick else 10
    l2 = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    args.out = args.out or os.path.join(ROOT, "benchmarks", "results", f"kernels-{slug(gpu)}.json")
    res = dict(gpu=gpu, date=datetime.datetime.now(datetime.timezone.utc).isoformat(), torch=torch.__version__,
               triton=triton.__version__, python=platform.python_version(), cuda=torch.version.cuda,
               quick=args.quick, reps=reps, l2_bytes=l2, shapes=shapes, results={}, errors=[])
    bw = measure_copy_bw()
    res["copy_bandwidth_bytes_per_s"] = bw
    res["idle_event_floor_us"] = idle_event_floor()
    print(f"{gpu}: copy bandwidth {bw / 1e12:.2f} TB/s, L2 {l2 / 2**20:.0f} MiB", flush=True)

    fast = fast_calls(K)
    refs = ref_calls(R)
    names = list(fast) if not args.only else args.only.split(",")
    compile_shapes = list(shapes)
    if args.compile_into:
        with open(args.compile_into) as f:
            res = json.load(f)
        args.out = args.compile_into
        compile_shapes = [tuple(s) for s in res.get("shapes", SHAPES)]
        missing = [(N, T) for (N, T) in compile_shapes
                   if any("compile_us" not in res["results"].get(f"{n}/{N}x{T}", {"compile_us": None}) for n in names)]
        if args.compile_shapes:
            missing = [s for s in missing if f"{s[0]}x{s[1]}" in args.compile_shapes.split(",")]
        print(f"compile baselines for {missing}", flush=True)
        compile_baselines(res, args, names, missing, l2, res["reps"])
        print(f"updated {args.out} and {args.md}; {len(res['errors'])} errors")
        return

    # correctness: float32 at every shape vs float64 reference, plus float64 kernels at two shapes
    correctness = {}
    for name in names:
        for (N, T) in shapes:
            key = f"{name}/{N}x{T}"
            try:
                d = make_inputs(N, T, dev, seed=1)
                got = fast[name](d)
                got = got if isinstance(got, tuple) else (got,)
                exp = refs[name](d)
                exp = exp if isinstance(exp, tuple) else (exp,)
                err = max(((g.double() - e).abs() / (1 + e.abs())).max().item() for g, e in zip(got, exp))
                entry = dict(max_rel_err=err, ok=err < 1e-4)
                if (N, T) in ((4096, 16), (512, 2048)):
                    d64 = {k: (v.double() if v.is_floating_point() else v) for k, v in d.items()}
                    g64 = fast[name](d64)
                    g64 = g64 if isinstance(g64, tuple) else (g64,)
                    e64 = refs[name](d64)
                    e64 = e64 if isinstance(e64, tuple) else (e64,)
                    err64 = max(((g - e).abs() / (1 + e.abs())).max().item() for g, e in zip(g64, e64))
                    entry.update(max_rel_err_f64=err64, ok=entry["ok"] and err64 < 1e-10)
                correctness[key] = entry
                if not entry["ok"]:
                    print(f"CORRECTNESS FAIL {key}: {entry}", flush=True)
            except Exception as e:  # noqa: BLE001
                correctness[key] = dict(ok=False, error=repr(e))
                res["errors"].append(dict(where=f"correctness {key}", error=traceback.format_exc()))
                print(f"CORRECTNESS ERROR {key}: {e!r}", flush=True)
    res["correctness"] = correctness
    print(f"correctness: {sum(v['ok'] for v in correctness.values())}/{len(correctness)} ok", flush=True)

    warm_process(fast, names, dev, shapes[0])
    tiny = torch.zeros(1, device=dev)
    for (N, T) in shapes:
        elem = N * T
        nsets = n_input_sets(N, T, l2)
        sets = [make_inputs(N, T, dev, seed=10 + i) for i in range(nsets)]
        for name in names:
            key = f"{name}/{N}x{T}"
            r = dict(N=N, T=T, bytes=BYTES[name] * elem, input_sets=nsets, plan=plan_of(name, N, T))
            r["roofline_us"] = r["bytes"] / bw * 1e6
            fn = fast[name]
            try:
                for _ in range(100):  # warm: the first shape timed otherwise pays for a cold interpreter and caches
                    fn(sets[0])
                torch.cuda.synchronize()
                outs_per_set = []
                for d in sets:
                    o = fn(d)
                    outs_per_set.append(tuple(o) if isinstance(o, tuple) else o)
                outs = outs_per_set[0]
                r["full_call_rounds_us"] = [full_call_round(fn, sets, outs_per_set, reps)]
                r["full_call_rounds_tiny_op_us"] = [tiny_op_host_us(tiny, reps)]
                r["full_call_us"] = r["full_call_rounds_us"][0]
                r["full_call_alloc_us"] = time_back_to_back(fn, sets, reps)
                r["host_us"] = time_host_only(lambda d: fn(d, out=outs), sets[0], reps)
                # the host's state at this moment: a one-element torch op's host time, right after the call's
                r["host_tiny_torch_op_us"] = tiny_op_host_us(tiny, reps)
                r["idle_gpu_call_us"], r["idle_gpu_call_wall_sync_us"] = time_full_call(
                    lambda d: fn(d, out=outs), sets[:1], reps)
                r["device_us"] = triton.testing.do_bench(lambda: fn(sets[0], out=outs), warmup=25,
                                                         rep=50 if args.quick else 200, return_mode="median") * 1e3
                r["device_clean_us"] = time_clean_l2(lambda: fn(sets[0], out=outs), 100 if args.quick else 300, l2)
                r["device_vs_roofline"] = r["device_clean_us"] / r["roofline_us"]
                r["device_do_bench_vs_roofline"] = r["device_us"] / r["roofline_us"]
                r["copy_same_bytes_us"] = copy_same_bytes_us(r["bytes"], 100 if args.quick else 300, l2)
            except Exception as e:  # noqa: BLE001
                r["error"] = repr(e)
                res["errors"].append(dict(where=f"kernel {key}", error=traceback.format_exc()))
            try:
                r["graph_us"] = time_graph(lambda d: fn(d, out=outs), sets[0], reps)
            except Exception as e:  # noqa: BLE001
                r["graph_error"] = repr(e)
            try:
                loop = LOOPS[name]
                loop(sets[0])
                torch.cuda.synchronize()
                r["loop_us"] = time_back_to_back(loop, sets, loop_reps, inner=1)
            except Exception as e:  # noqa: BLE001
                r["loop_error"] = repr(e)
                res["errors"].append(dict(where=f"loop {key}", error=traceback.format_exc()))
            r["targets"] = targets(r)
            res["results"][key] = r
            print(f"{key:32s} full {r.get('full_call_us', float('nan')):8.1f}us  dev {r.get('device_clean_us', float('nan')):8.1f}us"
                  f"  do_bench {r.get('device_us', float('nan')):8.1f}us  copy {r.get('copy_same_bytes_us', float('nan')):6.1f}us"
                  f"  roof {r['roofline_us']:6.1f}us  graph {r.get('graph_us', float('nan')):7.1f}us"
                  f"  loop {r.get('loop_us', float('nan')) / 1e3:7.2f}ms  compile {r.get('compile_us', float('nan')):8.1f}us",
                  flush=True)
        del sets
        torch.cuda.empty_cache()
        save(res, args)  # after every shape, so an interrupted run still leaves its numbers

    for _ in range(args.full_call_rounds - 1):
        # as before the first round: the GPU-bound shapes just timed leave the host slow for a while (in two runs
        # the first shape's second round was the slowest of its three for most estimators)
        warm_process(fast, names, dev, shapes[0])
        repeat_full_calls(res, fast, names, dev, reps, l2)
        save(res, args)

    if args.compile_shapes:
        compile_shapes = [s for s in compile_shapes if f"{s[0]}x{s[1]}" in args.compile_shapes.split(",")]
    if not args.no_compile:
        compile_baselines(res, args, names, compile_shapes, l2, reps)
    print(f"wrote {args.out} and {args.md}; {len(res['errors'])} errors")


def full_call_round(fn, sets, outs_per_set, reps):
    """One round of the full-call timing (time_back_to_back with out=), after WARM_S seconds of the same calls:
    on the H200 host the first shapes timed after the GPU-bound correctness phase ran 30-50% slower than the
    same calls later in the run."""
    t_warm = time.perf_counter() + WARM_S
    while time.perf_counter() < t_warm:
        for i in range(len(sets)):
            fn(sets[i], out=outs_per_set[i])
        torch.cuda.synchronize()
    return time_back_to_back(fn, sets, reps, outs=outs_per_set)


def tiny_op_host_us(tiny, reps):
    """Host time of a one-element torch op (median): the host's state at this moment. Taken after every full-call
    round: the H200 machines' CPU cores switch within seconds between two speeds (host-bound calls about 1.5x
    slower in the slow one), and nothing the process was seen to do moves them (scripts/probe_round_drift.py).
    One reading, so an indicator: it can miss a switch during the round."""
    return time_host_only(lambda t: t.add_(1.0), tiny, reps)


def repeat_full_calls(res, fast, names, dev, reps, l2):
    """One more full-call round of every pair already timed, shape by shape in the run's order; full_call_us
    becomes the median of the pair's rounds. A full call below 512x2048 is host-bound, and a host disturbed
    for a few seconds (seen on freshly started H200 machines) otherwise decides a pair from one ~2 ms window."""
    tiny = torch.zeros(1, device=dev)
    for (N, T) in SHAPES:
        keys = [f"{name}/{N}x{T}" for name in names]
        keys = [k for k in keys if "full_call_rounds_us" in res["results"].get(k, {})]
        if not keys:
            continue
        nsets = res["results"][keys[0]]["input_sets"]
        sets = [make_inputs(N, T, dev, seed=10 + i) for i in range(nsets)]
        for key in keys:
            r = res["results"][key]
            fn = fast[key.split("/")[0]]
            try:
                outs_per_set = []
                for d in sets:
                    o = fn(d)
                    outs_per_set.append(tuple(o) if isinstance(o, tuple) else o)
                r["full_call_rounds_us"].append(full_call_round(fn, sets, outs_per_set, reps))
                r["full_call_rounds_tiny_op_us"].append(tiny_op_host_us(tiny, reps))
            except Exception as e:  # noqa: BLE001
                r["full_call_round_error"] = repr(e)
                res["errors"].append(dict(where=f"full-call round {key}", error=traceback.format_exc()))
                continue
            r["full_call_us"] = median(r["full_call_rounds_us"])
            r["targets"] = targets(r)
            print(f"{key:32s} full-call rounds {' '.join(f'{x:.1f}' for x in r['full_call_rounds_us'])} us", flush=True)
        del sets
        torch.cuda.empty_cache()


def warm_process(fast, names, dev, shape):
    """WARM_PROCESS_S seconds of host-bound calls (out= given, the run's first shape), every estimator in turn; an
    estimator that fails here is left out (its own timings record the error)."""
    d = make_inputs(*shape, dev, seed=9)
    outs = {}
    for name in names:
        try:
            o = fast[name](d)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            continue
        outs[name] = tuple(o) if isinstance(o, tuple) else o
    t_end = time.perf_counter() + WARM_PROCESS_S
    while outs and time.perf_counter() < t_end:
        for name, out in outs.items():
            for _ in range(20):
                fast[name](d, out=out)
        torch.cuda.synchronize()


def targets(r):
    tgt = {}
    elem = r["N"] * r["T"]
    if r.get("full_call_us") is not None and elem < 2 ** 21:
        tgt["full_call_lt_10us"] = r["full_call_us"] < 10
    if r.get("device_vs_roofline") is not None and elem >= 2 ** 21:
        tgt["device_within_1p5x_roofline"] = r["device_vs_roofline"] <= 1.5
    if r.get("speedup_vs_compile") is not None:
        tgt["ge_10x_vs_compile"] = r["speedup_vs_compile"] >= 10
    return tgt


def compile_baselines(res, args, names, shapes, l2, reps, workers=None):
    """torch.compile of the CleanRL loops, after every kernel number is saved.

    Compiling the unrolled loops is slow (minutes in all), so worker processes compile them in parallel, one
    baseline each, `workers` at once (default: as many as the CPU has cores but one). Each worker then waits;
    once every worker of the batch has compiled, the workers time their baselines one after the other, the
    others idle, and exit. Nothing compiles beside a timing: at the small shapes a compiled loop's time is the
    host time of its hundreds of launches, which compiling processes beside it would inflate (runs before the
    nineteenth session timed each baseline beside the workers still compiling the others). A worker times its
    own compiled loop, so nothing is compiled twice.
    """
    import multiprocessing as mp
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    ctx = mp.get_context("spawn")
    # pairs that have no compile_us yet (--compile-into finishes a phase cut short without redoing what it timed),
    # longest windows first: a batch takes as long as its slowest compile (a T >= 128 loop took 1-5 min on the
    # H200 host, a T <= 32 one 5-25 s), so the slow ones share batches instead of each holding up a batch of fast
    # ones
    jobs = [(name, N, T) for (N, T) in shapes for name in names
            if "compile_us" not in res["results"].get(f"{name}/{N}x{T}", {})]
    jobs.sort(key=lambda job: -min(job[2], COMPILE_CHUNK_T))
    width = max(1, min(len(jobs), workers or (os.cpu_count() or 2) - 1))
    t0 = time.perf_counter()
    res["compile_batches_s"] = []
    for b in range(0, len(jobs), width):
        t_batch = time.perf_counter()
        procs = []
        try:
            for name, N, T in jobs[b:b + width]:
                nsets = n_input_sets(N, T, l2)
                here, there = ctx.Pipe()
                p = ctx.Process(target=_compile_worker, args=((name, N, T, nsets, max(200, reps // 5)), there))
                p.start()
                there.close()
                procs.append((name, N, T, p, here))
            _time_batch(res, args, procs, t_batch + COMPILE_LIMIT_S)
        finally:  # nothing outlives its batch, whatever ended it (an error here, Ctrl-C)
            for *_, conn in procs:
                conn.close()  # a worker still waiting for its go gets EOFError and exits
            for *_, p, _conn in procs:
                _end(p, 5)
        res["compile_batches_s"].append(time.perf_counter() - t_batch)
    res["compile_phase_s"] = time.perf_counter() - t0
    save(res, args)


def _time_batch(res, args, procs, compile_deadline):
    """compile_baselines for one batch of started _compile_worker processes `procs`, (name, N, T, process, pipe):
    waits until every one has compiled (or failed, or the compile deadline, perf_counter seconds, has passed),
    then has each time its baseline in turn. Saves the results after every baseline."""
    compiled = []
    for name, N, T, p, conn in procs:
        r = res["results"][f"{name}/{N}x{T}"]
        msg = _receive(conn, p, compile_deadline - time.perf_counter())
        if msg[0] == "compiled":
            r["compile_time_s"] = msg[1]  # beside the batch's other compiles
            if T > COMPILE_CHUNK_T:
                r["compile_chunk_t"] = COMPILE_CHUNK_T
            compiled.append((name, N, T, p, conn))
        else:
            _compile_failed(res, r, f"compile {name}/{N}x{T}", msg[1])
    for name, N, T, p, conn in compiled:
        key = f"{name}/{N}x{T}"
        r = res["results"][key]
        try:
            conn.send("go")
        except OSError:  # it died while it waited (BrokenPipeError)
            msg = ("error", _DIED)
        else:
            msg = _receive(conn, p, TIMING_LIMIT_S)
        _end(p, 60)  # before the next one times: a process's exit costs CPU time too
        if msg[0] == "timed":
            r["compile_us"] = msg[1]
            r.pop("compile_error", None)  # of an earlier call that this one completes
            if r.get("full_call_us"):
                r["speedup_vs_compile"] = r["compile_us"] / r["full_call_us"]
        else:
            _compile_failed(res, r, f"compile timing {key}", msg[1])
        r["targets"] = targets(r)
        print(f"{key:32s} compile {r.get('compile_us', float('nan')):8.1f}us "
              f"(x{r.get('speedup_vs_compile', float('nan')):.0f} vs full call; compiled in "
              f"{r.get('compile_time_s', float('nan')):.0f} s)", flush=True)
        save(res, args)  # after every estimator: a call cut short by its time limit keeps what it timed


def _end(p, limit_s):
    """Join the worker process p, terminating it if it has not exited within limit_s seconds."""
    p.join(limit_s)
    if p.is_alive():
        p.terminate()
        p.join()


def _receive(conn, p, limit_s):
    """The next message from the _compile_worker `p`, or ("error", ...) if it died without one or sent none within
    limit_s seconds (it is then terminated)."""
    try:
        if conn.poll(max(0.0, limit_s)):
            return conn.recv()
    except EOFError:
        return ("error", _DIED)
    p.terminate()
    return ("error", f"the worker process sent no result within {limit_s:.0f} s")


def _compile_failed(res, r, where, text):
    r["compile_error"] = text.strip().splitlines()[-1][:500] if text.strip() else text
    res["errors"].append(dict(where=where, error=text))
    print(f"{where}: {r['compile_error']}", flush=True)


def save(res, args):
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    write_markdown(res, args.md, args.out)


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


BEGIN, END = "<!-- bench_kernels:begin -->", "<!-- bench_kernels:end -->"


def rounds_cell(r):
    """The pair's full-call rounds, each with the one-element op's host time after it in brackets (runs before
    the twenty-first session have no such time)."""
    tiny = r.get("full_call_rounds_tiny_op_us", [])
    return " / ".join(fmt(x) + (f" ({fmt(tiny[i])})" if i < len(tiny) else "")
                      for i, x in enumerate(r.get("full_call_rounds_us", []))) or "-"


def write_markdown(res, path, json_path):
    """Replace the section between BEGIN and END in `path` (appended if absent) with this run's table."""
    lines = [
        BEGIN, "## Kernels: `scripts/bench_kernels.py`", "",
        f"Generated by `scripts/bench_kernels.py` on **{res['gpu']}** ({res['date'][:10]}; torch {res['torch']}, "
        f"triton {res['triton']}, Python {res['python']}{', quick mode' if res['quick'] else ''}). "
        f"Raw numbers: `{os.path.relpath(json_path, os.path.dirname(os.path.abspath(path)))}`.", "",
        f"Copy bandwidth (measured): {res['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s. "
        "**full call** = per-call time of back-to-back Python calls with preallocated outputs (`out=`), CUDA "
        "events around batches of calls over rotating input sets (more than 2x L2), median: what a training "
        "step pays, host overhead included; the median of the **rounds** (the first timed with the pair's other "
        "numbers, the others after all shapes), where a run has them, each with the host time of a one-element torch op "
        "taken right after it in brackets (the host's state in that round). **alloc** = the same without `out=`. **host** = CPU time of one "
        "call; **tiny op** = the host time of a one-element torch op measured right after it (the host's state at "
        "that moment: a full call cannot take less host time). **idle GPU** = events around a single call with the GPU idle before it; its floor on this "
        f"machine (two events, nothing between) is {fmt(res.get('idle_event_floor_us'))} us. **device** = "
        "events around one call after a read of 4x L2 evicted its inputs, median; **do_bench** = "
        "`triton.testing.do_bench` median (it evicts L2 by writing zeros, which the timed call then writes "
        "back); **graph** = per call inside a CUDA graph; **roofline** = bytes moved / copy bandwidth; "
        "**copy** = a device-to-device copy of the same bytes, timed like **device**; device/roofline uses "
        "**device**; **loop** = CleanRL-style Python loop over T; **compile** = "
        "`torch.compile` of that loop, timed back-to-back like the full call. float32 values, bool flags.", "",
        "| estimator | N x T | full call (us) | rounds (us) | alloc (us) | host (us) | tiny op (us) | idle GPU (us) | device (us) "
        "| do_bench (us) | graph (us) | roofline (us) | copy (us) | device/roofline | loop (ms) | compile (us) "
        "| x vs compile | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in res["results"].items():
        name = key.split("/")[0]
        tg = r.get("targets", {})
        tgs = " ".join(("ok" if v else "MISS") + ":" + k for k, v in tg.items()) or "-"
        if "error" in r:
            tgs = "ERROR " + r["error"][:60]
        lines.append(
            f"| {name} | {r['N']}x{r['T']} | {fmt(r.get('full_call_us'))} | "
            f"{rounds_cell(r)} | {fmt(r.get('full_call_alloc_us'))} | "
            f"{fmt(r.get('host_us'))} | {fmt(r.get('host_tiny_torch_op_us'))} | {fmt(r.get('idle_gpu_call_us'))} | "
            f"{fmt(r.get('device_clean_us'))} | {fmt(r.get('device_us'))} | "
            f"{fmt(r.get('graph_us'))} | {fmt(r['roofline_us'])} | {fmt(r.get('copy_same_bytes_us'))} | "
            f"{fmt(r.get('device_vs_roofline'), 2)} | {fmt(None if r.get('loop_us') is None else r['loop_us'] / 1e3, 2)} | "
            f"{fmt(r.get('compile_us'))} | {fmt(r.get('speedup_vs_compile'))} | {tgs} |")
    bad = [k for k, v in res.get("correctness", {}).items() if not v.get("ok")]
    lines += ["", f"Correctness vs float64 reference on the GPU: "
              f"{len(res.get('correctness', {})) - len(bad)}/{len(res.get('correctness', {}))} ok"
              + (f"; failing: {', '.join(bad)}" if bad else "") + ".", END]
    section = "\n".join(lines)
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
