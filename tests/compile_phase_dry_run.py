"""CPU dry run of scripts/bench_kernels.py's torch.compile phase (compile_baselines), for
tests/test_bench_compile_phase.py: the worker processes, their batches and the order of compiling and timing.

The patches below are made at import, so the spawned worker processes, which import this file again as their main
module, run with them too: CPU tensors, Dynamo's eager backend, chunks of 8 steps, a timer that times one call, and
a log of every message a worker sends or receives (to the file named by $COMPILE_PHASE_LOG). vtrace at T = 6 exits
without a message, as a worker killed for memory would, and vtrace at T = 20 right after it has compiled; retrace at
T = 6 hangs once told to time (limit: 3 s).

Usage: COMPILE_PHASE_LOG=F python tests/compile_phase_dry_run.py OUT.json
"""
import json
import os
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import bench_kernels as B  # noqa: E402

B.COMPILE_CHUNK_T = 8
B.WARM_S = 0.05
B.TIMING_LIMIT_S = 3
torch.cuda.synchronize = lambda *a, **k: None
_make_inputs = B.make_inputs
B.make_inputs = lambda N, T, dev, seed=0: _make_inputs(N, T, torch.device("cpu"), seed)


def _one_call_us(fn, sets, reps, outs=None, inner=50):
    t0 = time.perf_counter()
    fn(sets[0])
    return (time.perf_counter() - t0) * 1e6


def _compiled_loop(name, T):
    if T <= B.COMPILE_CHUNK_T:
        return torch.compile(B.LOOPS[name], backend="eager", dynamic=False)
    comp = torch.compile(B._LOOP_FNS[name], backend="eager", dynamic=False)
    return lambda d: B.chunked_loop(name, comp, d, chunk=B.COMPILE_CHUNK_T)


B.time_back_to_back = _one_call_us
B.compiled_loop = _compiled_loop
_worker = B._compile_worker


def _log(job, what):
    with open(os.environ["COMPILE_PHASE_LOG"], "a") as f:
        f.write(json.dumps([f"{job[0]}/{job[1]}x{job[2]}", what, time.time()]) + "\n")


class _LoggedConn:
    def __init__(self, job, conn):
        self.job, self.conn = job, conn

    def send(self, msg):
        _log(self.job, msg[0])
        self.conn.send(msg)

    def recv(self):
        msg = self.conn.recv()
        _log(self.job, msg)
        return msg


class _HangingConn(_LoggedConn):
    def recv(self):
        msg = super().recv()
        time.sleep(600)
        return msg


class _DyingConn(_LoggedConn):
    def send(self, msg):
        super().send(msg)
        os._exit(3)


def _logged_worker(job, conn):
    if job[0] == "vtrace" and job[2] == 6:
        os._exit(3)
    kind = {("retrace", 6): _HangingConn, ("vtrace", 20): _DyingConn}.get((job[0], job[2]), _LoggedConn)
    _worker(job, kind(job, conn))


B._compile_worker = _logged_worker


def main():
    names, shapes = ["gae", "vtrace", "retrace"], [(8, 6), (4, 20)]
    res = dict(results={f"{n}/{N}x{T}": dict(N=N, T=T, full_call_us=10.0) for n in names for N, T in shapes}, errors=[])
    res["results"]["gae/8x6"]["compile_us"] = 123.0  # timed by an earlier call: not compiled again
    B.write_markdown = lambda *a, **k: None
    args = types.SimpleNamespace(out=sys.argv[1], md=None)
    B.compile_baselines(res, args, names, shapes, 1 << 20, 200, workers=3)


if __name__ == "__main__":
    main()
