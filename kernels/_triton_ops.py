"""Thin launch wrappers for the Triton kernels.

Each op reads only tensor metadata (shapes, strides, dtypes, devices, data pointers) and launches
one program per BLOCK_N environments (split plans: per chunk of T_BLOCK rows of them, linked through a
workspace, see _links). No host syncs and no value checks, so the ops are CUDA-graph capturable.

Per-call cost is kept to a few microseconds because the full call, not the kernel, dominates at
typical rollout sizes:

* a *plan* is cached per metadata signature (shape, strides, dtype, device and 16-byte alignment
  of every tensor, which optional inputs are present, whether ``out=`` is given). A new
  signature is validated (:mod:`kernels._validation`, ``ValueError``) and planned once: [T, N]
  strides, tile shape, constexprs, the int64-offset flag and the compiled kernel. A repeated
  signature costs a dict lookup; the metadata key itself is what guarantees that it passed
  validation before.
* a repeat of a recent call skips even the key. Per pattern of argument types (which inputs are None,
  the form of ``out``, the scalars' types) a launch function is generated (:func:`_pattern_launch`): one
  unrolled line per tensor, so that a call costs its checks and the launch and no loops. Its recent plans
  each keep a ``TensorGuards`` (PyTorch's own C++ check of type, dtype, device, sizes, strides,
  requires_grad and dispatch keys, the one TorchDynamo guards compiled graphs with), which checks all
  tensors in a fraction of the time of reading their metadata from Python. Only plans whose pointers were
  all 16-byte aligned are remembered, and the call checks that its pointers are too; only plain float and
  int scalars take this path, and no call that passes one tensor in two places (TensorGuards rejects
  that). At most 8 patterns per estimator get a function; further ones stay on the key path. The API
  function calls the newest function directly (:class:`_Patterns`), which hands a call it cannot serve on.
  TensorGuards is a private PyTorch class: it is used only if, at import, it rejects other sizes, strides
  and dtypes, and if it ever fails, the key path is all that runs.
* scalar arguments are validated and split into float32 hi/lo pairs once per distinct value (plain
  floats and ints only: a bool equals 1.0 or 0 and must still be rejected).
* the launch calls Triton's compiled launcher directly (data pointers as ints, no launch-hook
  objects) instead of ``kernel[grid](...)``, whose argument binding costs tens of microseconds.
  The first call of a plan goes through ``kernel[grid]`` (compiling it), and so does any call
  made while Triton launch hooks are registered (e.g. a profiler), so that they still fire.

The documented copies: a ``[T, *B]`` input or ``out=`` buffer whose trailing dims cannot be
addressed with a single batch stride (e.g. a permuted ``[T, B1, B2]`` view) is reshaped to
``[T, N]`` (``Tensor.reshape``, which copies only in that case), and a lazily negated view
(``Tensor.is_neg()``, e.g. the imaginary part of a conjugate) is resolved first as an input, or
written through a copy as an output, since the kernels read and write raw memory.
"""
from __future__ import annotations

import contextlib
import itertools
import linecache
import os
import struct
import threading
import warnings
from typing import Callable, NamedTuple

import torch

from . import _validation as V
from ._outputs import GAEOutput, VTraceOutput, writing_into
from ._validation import log_clip

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

from . import _triton_kernels as K  # noqa: E402  (decorated according to TRITON_INTERPRET)

try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # private API: without it every call takes the metadata key path
    _TensorGuards = None


def _guards(tensors):
    """A TensorGuards that accepts only tensors with exactly these dtypes, devices, sizes, strides and requires_grad."""
    return _TensorGuards(*tensors, dynamic_dims_sizes=[list(x.shape) for x in tensors],
                         dynamic_dims_strides=[list(x.stride()) for x in tensors])


def _guards_behave() -> bool:
    """Whether this PyTorch's TensorGuards checks what the plan cache relies on (it is a private class)."""
    try:
        x = torch.zeros(2, 3)
        g = _guards([x])
        return (g.check(x) and not g.check(torch.zeros(3, 2)) and not g.check(torch.zeros(3, 2).t())
                and not g.check(torch.zeros(2, 3, dtype=torch.float64)) and not g.check(torch.zeros(2, 4)[:, :3])
                and not g.check(torch.zeros(2, 3, requires_grad=True)))
    except Exception:  # noqa: BLE001
        return False


if _TensorGuards is not None and not _guards_behave():
    _TensorGuards = None

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton import knobs as _knobs  # noqa: E402

# The direct launch calls Triton's generated C launcher with Triton 3.6's argument list (_fast_launcher), an
# internal that another version may order differently without rejecting the call, so only 3.6 launches that way.
_LAUNCHER_CHECKED = triton.__version__.split(".")[:2] == ["3", "6"]

# Tile sizing (see _tile). Tests lower max_time_block to force the chunked path on tiny inputs and set
# interp_seg = (warps, SEG_L[, PRELOAD]) to run the segment plan under the interpreter; scripts/tune_kernels.py
# sets "force" = (T_BLOCK, BLOCK_N, num_warps[, SEG_L[, SPLIT[, PRELOAD[, MAXNREG]]]]). Call clear_plans() after
# changing anything here. Under the interpreter (CPU tensors) a launch costs per operation, not per element, so its
# plans take up to interp_block_n environments per program, in tiles of up to interp_max_tile elements. "pdl": plans
# on GPUs that support it use programmatic dependent launch (_pdl); False turns it off for plans built afterwards.
config = {"max_tile": 8192, "max_time_block": 2048, "interp_block_n": 1024, "interp_max_tile": 2 ** 18,
          "interp_seg": None, "force": None, "pdl": True}

_TL = {torch.float32: tl.float32, torch.float64: tl.float64}
_F64 = torch.float64
_RUNTIME = _knobs.runtime
_ENTER, _EXIT = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook  # Triton's own (empty) hook chains


def _hooks_idle() -> bool:
    """No Triton launch hook is set (neither added to its HookChain nor assigned in its place)."""
    enter, exit_ = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
    if enter is _ENTER and exit_ is _EXIT:
        return not (enter.calls or exit_.calls)
    return all(h is None or (isinstance(h, _knobs.HookChain) and not h.calls) for h in (enter, exit_))


# indirections so that scripts/profile_host_overhead.py can time the host path on a CPU-only box
_cur_device = getattr(torch._C, "_cuda_getDevice", None)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


_HEAVY = (K.vtrace_kernel, K.retrace_kernel)  # 6-8 loads per row (GAE: 4-5): 4-row chunks in one warp


_PRELOAD = (K.lambda_returns_kernel,)  # its segment plans load all rows first (_tile)
_SPLIT_PRELOAD = (K.retrace_kernel,)  # the same in split plans
# one output and at most 4 loads per row (under 100 registers in 8 warps): split chunks of 128 rows in 8 warps
_SPLIT_NARROW = (K.discounted_kernel, K.forward_kernel, K.lambda_returns_kernel)
_MAX_SPLIT_T = 256 * 128  # split plans have at most 256 chunks: every program loads all chunks' maps at once
# from 16384 environments with T > 64: short chunks walked with the next chunk's rows loaded ahead (PRELOAD 2)
_PREFETCH_PLANS = {K.gae_kernel: (16, 32, 4, 4), K.vtrace_kernel: (16, 32, 4, 4), K.retrace_kernel: (16, 32, 4, 4),
                   K.lambda_returns_kernel: (32, 32, 4, 8), K.discounted_kernel: (32, 32, 4, 8),
                   K.forward_kernel: (32, 32, 4, 8)}


def _tile(T: int, N: int, is_cuda: bool, kernel):
    """(T_BLOCK, BLOCK_N, num_warps, SEG_L, SPLIT, PRELOAD, MAXNREG) for a [T, N] problem.

    SEG_L > 0 selects the segment plan (kernels/_triton_kernels.py): T_BLOCK // SEG_L warps, each walking
    SEG_L consecutive rows of one environment per lane inside its threads, 32 environments per program.
    SPLIT makes every chunk of T_BLOCK rows of a block of environments a program of its own, linked to the
    others through a workspace (_lookback) instead of a loop over the chunks. PRELOAD 1 makes the segment plan
    load all rows of a segment, in ascending time, before it builds their terms (_seg_chunk); PRELOAD 2 also
    loads the next chunk's rows before it solves this one (_solve). MAXNREG caps the
    registers per thread (Triton's ``maxnreg``; 0 leaves it to the compiler, as every plan does: no cap beat
    the uncapped plans beyond the noise, and caps that made ptxas spill cost up to 3.3x).

    The rules, each the fastest that held across estimators in H200 sweeps (scripts/tune_kernels.py); the
    measurements behind them are in docs/kernels.md, Decisions, "Plans":

    * fewer than 4096 environments, at least 2^17 elements and 1024 <= T <= 32768: split, 32 environments
      per block, chunks of 256 rows in segments of 16 (16 warps): one program per block of environments
      would leave most of the GPU idle. Lambda-returns, discounted returns and the forward estimators (one
      output, 2-4 loads per row) take chunks of 128 rows in 8 warps; Retrace preloads (PRELOAD). GAE, V-trace
      and Retrace need 190-230 registers in 8 warps, so one program fits an SM, and took 1.4-3.6x as long.
    * from 4096 environments and 2^17 elements: segments of 4 rows up to T = 32, of 8 beyond, with up to 16
      warps (chunks of 128 rows); from 16384 environments with T > 64, short chunks walked with the next chunk's
      rows loaded before this one is solved (PRELOAD 2): 16 rows in 4 warps for GAE, V-trace and Retrace, 32 rows
      in 4 warps for the others (0.85-0.96x the device time of the 64-row chunks in 8 warps at 16384x128 for the
      five backward estimators, 0.60-0.78x at 16384x256; the forward ones the same at 16384x128, 0.65-0.66x at
      16384x256). The tile scan at these sizes is bound by its shared-memory traffic.
    * from 32768 environments with T >= 64: one warp per 32 environments walking the horizon in chunks of 8
      rows (V-trace and Retrace, with 6-8 loads per row: 4 rows; discounted returns from 65536 environments:
      4 rows, 0.95x the device time at 65536x128 but 1.16x at 32768x128), a tile that stays inside the threads.
    * PRELOAD 1 for lambda-returns in the other segment plans; for the others it was slower there.
    * otherwise (fewer elements, or fewer environments with T < 1024 or T > 32768) the tile scan: the whole
      horizon in one tile when it fits, 16 environments per program (4 below 2048, for more programs),
      8 warps once the tile holds >= 2048 elements.
    * CPU tensors (Triton's interpreter): the tile scan with the whole horizon in one tile up to max_time_block
      rows, and as many environments per program as config's interp_block_n and interp_max_tile allow.
    """
    if config["force"] is not None:
        f = tuple(config["force"])
        if not 3 <= len(f) <= 7:
            raise ValueError(f'config["force"] takes 3 to 7 plan fields (T_BLOCK, BLOCK_N, num_warps[, SEG_L[, '
                             f'SPLIT[, PRELOAD[, MAXNREG]]]]), got {f}')
        return f + (0, False, False, 0)[len(f) - 3:]
    max_tb = config["max_time_block"]
    tp = _next_pow2(T)
    if not is_cuda:
        if config["interp_seg"] is not None:
            w, seg_l, *preload = config["interp_seg"]
            bn = min(config["interp_block_n"], _next_pow2(N))
            return w * seg_l, bn, w, seg_l, False, int(preload[0]) if preload else 0, 0
        tb = min(tp, max_tb)
        return tb, min(config["interp_block_n"], _next_pow2(N), max(16, config["interp_max_tile"] // tb)), 1, 0, \
            False, False, 0
    preload = kernel in _PRELOAD
    if N >= 32768 and T >= 64:
        four_rows = kernel in _HEAVY or (N >= 65536 and kernel is K.discounted_kernel)
        return (4, 32, 1, 0, False, False, 0) if four_rows else (8, 32, 1, 0, False, False, 0)
    if N < 4096 and N * T >= 2 ** 17 and 1024 <= T <= _MAX_SPLIT_T:
        if kernel in _SPLIT_NARROW:
            return 128, 32, 8, 16, True, False, 0
        return 256, 32, 16, 16, True, kernel in _SPLIT_PRELOAD, 0
    if N >= 4096 and N * T >= 2 ** 17:
        if N >= 16384 and T > 64:
            return _PREFETCH_PLANS[kernel] + (False, 2, 0)
        seg_l = 4 if tp <= 32 else 8
        w = min(16, max(1, tp // seg_l))
        return w * seg_l, 32, w, seg_l, False, preload, 0
    bn = 16 if N >= 2048 else 4
    bn = min(bn, max(4, _next_pow2(N)))
    tb = min(tp, max(16, config["max_tile"] // bn), max_tb)
    nw = 8 if tb * bn >= 2048 else 4
    return tb, bn, nw, 0, False, False, 0


def _split(x: float):
    """x as an fp32 (hi, lo) pair so that float64 kernels see it (almost) exactly."""
    hi = struct.unpack("f", struct.pack("f", x))[0] if abs(x) < 3e38 else x
    lo = x - hi if x == x and abs(x) != float("inf") else 0.0
    return hi, lo


def _nstride(shape, stride):
    """The single stride addressing dims `shape` flattened, 0 if they hold <= 1 element, None if none does."""
    s_n = None
    expected = None
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] == 1:
            continue
        if s_n is None:
            s_n = stride[d]
        elif stride[d] != expected:
            return None
        expected = stride[d] * shape[d]
    return 0 if s_n is None else s_n


def _check_device(dev: torch.device):
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"backend='triton' runs on CUDA tensors, or on CPU tensors through Triton's interpreter; "
                         f"the tensors are on {dev.type}: use backend='torch'")


_TWIN = []  # [(module, swaps)] once built: see _interpreted_launch
_MISSING = object()
_TWIN_LOCK = threading.RLock()


def _interpreted_launch(kernel, grid, args, kwargs):
    """Launch `kernel` through Triton's interpreter: every launch on CPU tensors, and every launch when
    kernels/_triton_kernels.py was imported under TRITON_INTERPRET=1.

    Triton decides at decoration time whether a JIT function compiles or is interpreted. Where the kernel module
    was imported without TRITON_INTERPRET (its kernels compile for GPUs), it is loaded a second time, under its
    own name, with Triton's interpret knob on for the duration: the same source, so the CPU path runs the code the
    GPU compiles (with _INTERPRETED true). Where triton itself was imported without it, triton.language's own JIT
    helpers (tl.sum, tl.zeros, ...) compile too: for the duration of a launch they are swapped for interpreted
    twins and put back after. The interpreter patches triton.language during a launch in the same way, so these
    launches hold one lock, which compiles for CUDA take too once helpers are swapped (_jit_launch). The
    interpreter's scan, one combine call per element, is swapped for one per row for the duration too
    (kernels/_interpreter_scan.py: the same values, bit for bit)."""
    import numpy
    import triton.language as tl
    from triton.runtime import interpreter as _interpreter

    from ._interpreter_scan import scan_by_rows
    with _TWIN_LOCK:
        if not _TWIN:
            import importlib.util

            import triton
            from triton.runtime.interpreter import InterpretedFunction
            from triton.runtime.jit import JITFunction
            with contextlib.suppress(ImportError):  # the interpreter imports it lazily; its import needs the helpers
                import triton.experimental.gluon  # noqa: F401
            mod = K
            if not _INTERPRET:
                spec = importlib.util.spec_from_file_location(__package__ + "._triton_kernels_interpreted",
                                                              K.__file__)
                mod = importlib.util.module_from_spec(spec)
                with triton.knobs.runtime.scope():
                    triton.knobs.runtime.interpret = True
                    spec.loader.exec_module(mod)
            twins = {}  # one twin per helper: the interpreter compares combine functions by identity
            swaps = [(m, name, fn, twins.setdefault(id(fn), InterpretedFunction(fn.fn)))
                     for m in (tl, tl.standard) for name, fn in vars(m).items() if isinstance(fn, JITFunction)]
            _TWIN.append((mod, swaps))
        mod, swaps = _TWIN[0]
        launch = getattr(mod, kernel.__name__)[grid]
        # With swapped helpers: the interpreter restores what a launch patches in the kernel's namespaces, but not
        # what the helpers' own calls patch in triton.language.core, so every attribute these namespaces had is put
        # back after. Attributes added meanwhile stay: the interpreter adds the globals its rewritten helpers use
        # (e.g. interpreter_semantic in triton.language.standard) once and caches those helpers.
        spaces = (tl, tl.core, tl.math, tl.standard, tl.tensor, tl.dtype, tl.core.tensor_descriptor_base)
        saved = [(space, dict(vars(space))) for space in spaces] if swaps else []
        for m, name, _, twin in swaps:
            setattr(m, name, twin)
        scan_ops = getattr(_interpreter, "ScanOps", None)
        tritons_scan = getattr(scan_ops, "generic_scan", None)
        if tritons_scan is not None:
            scan_ops.generic_scan = scan_by_rows
        try:
            # The interpreter computes in NumPy, which warns where inf or NaN arise (e.g. the documented non-finite
            # final observation that a done cuts off); a GPU computes the same values silently.
            with numpy.errstate(all="ignore"):
                return launch(*args, **kwargs)
        finally:
            if tritons_scan is not None:
                scan_ops.generic_scan = tritons_scan
            for space, before in saved:
                now = vars(space)
                for name, value in before.items():
                    if now.get(name, _MISSING) is not value:
                        setattr(space, name, value)


class _Spec(NamedTuple):
    """One estimator: its kernel and how its arguments map onto the kernel's."""
    kernel: object
    n_out: int
    seq: frozenset          # indices of the [*B] inputs (one stride); the others are [T, *B]
    flags: frozenset        # indices of the flag inputs (never decide the compute dtype)
    has: tuple              # (constexpr name, input index): the constexpr says the input is present
    tensors: Callable       # tensor checks (ValueError), see kernels._validation
    scalars: Callable       # scalar checks -> floats
    kargs: Callable         # checked floats -> the kernel's float arguments
    plans: dict             # metadata key -> _Plan
    scal: dict              # raw scalar tuple -> kernel float arguments
    hot: _Patterns          # argument-type patterns with a generated launch function
    n_in: int               # number of tensor inputs
    wrap: type              # the outputs' named tuple class (GAEOutput, VTraceOutput), None for one output


class _Patterns:
    """One estimator's argument-type patterns that have a generated launch function (:func:`_pattern_launch`),
    and the entry point its API function calls.

    ``entry`` is the newest launch function; each one hands a call it does not serve to the function generated
    before it, and the oldest to ``key_path`` (the op that finds or builds the plan, :func:`_fallback`), so that a
    repeated call costs one Python frame here. With no launch function, ``entry`` is ``key_path``.
    ``by_types`` maps a pattern (input types, ``type(out)``, the types of ``out``'s parts, scalar types) to its
    function; ``launches`` holds the same functions, newest first, as a tuple replaced whole on every change so
    that a thread iterating it never sees it change size."""
    __slots__ = ("key_path", "entry", "by_types", "launches")

    def __init__(self, key_path):
        self.key_path = key_path
        self.clear()

    def fresh(self):
        """Empty patterns with the same key path (for a copy of a spec with caches of its own)."""
        return _Patterns(self.key_path)

    def add(self, types, launch):
        self.by_types[types] = launch
        self.launches = (launch, *self.launches)
        self.entry = launch

    def clear(self):
        self.by_types = {}
        self.launches = ()
        self.entry = self.key_path


class _Plan:
    __slots__ = ("shape", "dtype", "device", "index", "T", "N", "grid", "ints", "consts", "cvals", "options",
                 "empty", "via_copy", "direct", "tail", "split", "links", "captured", "ct", "out_lo", "out_hi")


def clear_plans():
    for s in _SPECS:
        s.plans.clear()
        s.scal.clear()
        s.hot.clear()


def _build(spec: _Spec, ins, out) -> _Plan:
    """Validate a new metadata signature and derive everything a launch needs."""
    out = spec.tensors(*ins, out)
    x0 = ins[0]
    dev = x0.device
    _check_device(dev)
    shape = x0.shape
    p = _Plan()
    p.shape, p.dtype, p.device, p.index = shape, x0.dtype, dev, dev.index
    T = shape[0]
    N = x0.numel() // T if T else 0
    p.T, p.N = T, N
    p.empty = T == 0 or N == 0
    p.direct = None  # (launcher, its fixed arguments) once compiled: one attribute, so threads see both or none
    p.tail = (None, ())
    strides = []
    flat = True
    for i, x in enumerate(ins):
        if i in spec.seq:
            s = 0 if x is None else _nstride(x.shape, x.stride())
            strides.append(s)
        else:
            s = 0 if x is None else _nstride(x.shape[1:], x.stride()[1:])
            strides += [0 if x is None else x.stride(0), s]
        flat = flat and s is not None
    outs = () if out is None else (out if spec.n_out > 1 else (out,))
    if len(outs) == 2:  # two outputs whose pointers p0, p1 have out_lo < p0 - p1 < out_hi may share memory
        p.out_lo, p.out_hi = -_span_bytes(outs[0]), _span_bytes(outs[1])
    negated = any(x is not None and x.is_neg() for x in (*ins, *outs))
    for o in outs:
        s = _nstride(o.shape[1:], o.stride()[1:])
        strides += [o.stride(0), s]
        flat = flat and s is not None
    if not outs:  # fresh contiguous outputs
        strides += [N, 1] * spec.n_out
    p.via_copy = not flat or negated
    if p.empty or p.via_copy:
        return p
    ct = _F64 if any(x is not None and i not in spec.flags and x.dtype == _F64
                     for i, x in enumerate(ins)) else torch.float32
    big = (T + N) * max(max(abs(s) for s in strides), 1) >= 2 ** 31  # int64 offsets needed
    tb, bn, nw, seg_l, split, preload, maxnreg = _tile(T, N, dev.type == "cuda", spec.kernel)
    n_chunks = (T + tb - 1) // tb
    split = split and n_chunks > 1
    consts = {name: ins[i] is not None for name, i in spec.has}
    consts.update(CT=_TL[ct], BIG=big, T_BLOCK=tb, BLOCK_N=bn, N_CHUNKS=n_chunks, SEG_L=seg_l,
                  SPLIT=_next_pow2(n_chunks) if split else 0, PRELOAD=int(preload) if seg_l else 0,
                  PDL=nw > 1 and _pdl(dev))  # one-warp plans: see _pdl
    p.grid = (N + bn - 1) // bn * (n_chunks if split else 1)
    p.split = split
    p.links = {}  # stream -> the split plan's workspace for eager launches (_links)
    p.captured = []  # workspaces of launches captured into CUDA graphs
    p.ct = ct
    p.ints = (T, N, *strides)
    p.consts = consts
    p.cvals = tuple(consts[a] for a in spec.kernel.arg_names if a in consts)  # launcher wants them positionally
    p.options = _compile_options(nw, maxnreg, dev, consts["PDL"])
    return p


def _span_bytes(x: torch.Tensor) -> int:
    """Bytes from a tensor's first element to the end of its last."""
    if x.numel() == 0:
        return 0
    lo, hi = V.byte_span(x)
    return hi - lo


def _pdl(dev: torch.device) -> bool:
    """Whether plans on `dev` use programmatic dependent launch (config["pdl"]): compiled kernels on an NVIDIA GPU
    of compute capability 9.0 or later, where griddepcontrol exists. Such a launch may be dispatched before the
    kernel ahead of it in the stream has finished, which hides the gap between back-to-back kernels; every
    program waits for that kernel before its first load (kernels._triton_kernels._after_previous_grid).
    Back to back on the H200 (scripts/ab_kernels.py --host) it took 0.92-0.99x the time per call at 16384x128 and
    0.89-0.99x at 4096x128 for all seven, but 1.06-1.28x for GAE, lambda-returns and the forward estimators in
    the one-warp plans of 65536x128, so _build leaves those plans without it."""
    if not config["pdl"] or _INTERPRET or dev.type != "cuda" or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(dev)[0] >= 9


def _compile_options(num_warps: int, maxnreg: int, dev: torch.device, pdl: bool = False) -> dict:
    """Triton's launch options for a plan: its warps, its register cap where one applies, and launch_pdl with
    PDL (options of NVIDIA's backend; the interpreter and AMD's compiler have none)."""
    opts = dict(num_warps=num_warps)
    if maxnreg and dev.type == "cuda" and torch.version.hip is None:
        opts["maxnreg"] = maxnreg
    if pdl:
        opts["launch_pdl"] = True
    return opts


def _alloc(p: _Plan, n: int):
    return tuple(torch.empty(p.shape, dtype=p.dtype, device=p.device) for _ in range(n))


def _jit_launch(spec: _Spec, p: _Plan, ins, outs, fl):
    """Launch through Triton's JIT front end (compiles on first use); returns the CompiledKernel."""
    args = [ins[0] if x is None else x for x in ins]  # absent inputs: any pointer, never read
    args += outs
    if p.split:
        args += _links(p, _raw_stream(p.index) if p.device.type == "cuda" else None)
    else:
        args += (ins[0], ins[0])  # no workspace: any pointer, never read
    if _INTERPRET or p.device.type != "cuda":
        return _interpreted_launch(spec.kernel, (p.grid,), (*args, *p.ints, *fl), {**p.consts, **p.options})
    # once interpreted launches swap triton.language's helpers, a compile must not see them swapped
    with _TWIN_LOCK if _TWIN and _TWIN[0][1] else contextlib.nullcontext():
        if p.index != _cur_device():
            with torch.cuda.device(p.index):
                return spec.kernel[(p.grid,)](*args, *p.ints, *fl, **p.consts, **p.options)
        return spec.kernel[(p.grid,)](*args, *p.ints, *fl, **p.consts, **p.options)


def _links(p: _Plan, stream):
    """The workspace of a split plan for one launch: (LINK_I, LINK_F) for kernels._triton_kernels._lookback.

    LINK_I (int64): one flag per (environment block, chunk) tile, every block's flags starting a 128-byte
    line (kernels._triton_kernels._flag_stride), each raised once per launch; LINK_F (int64): each tile's chunk
    map, as words that carry the launch's epoch (kernels._triton_kernels._words: one per float32 value, two per
    float64 one, so 2 or 4 words per (A, B)). The epochs in the flags assume that the launches sharing a workspace run one after
    the other, so eager launches share one per stream (zeroed once, never reset), and a launch captured
    into a CUDA graph gets one of its own, zero-filled inside the graph: every replay then starts from
    epoch 1, and graphs captured on one stream (torch.cuda.graph's default) can be replayed in any order,
    or concurrently on different streams. The plan keeps captured workspaces for its own lifetime, because
    the graph's memory pool would hand a released one out again (a few KB per capture)."""
    if stream is not None and _capturing():
        ws = _new_links(p)
        p.captured.append(ws)
        return ws
    ws = p.links.get(stream)
    if ws is None:
        ws = p.links[stream] = _new_links(p)
    return ws


def _new_links(p: _Plan):
    n_chunks = p.consts["N_CHUNKS"]
    flag_stride = (n_chunks + 15) // 16 * 16  # kernels._triton_kernels._flag_stride
    return (torch.zeros(p.grid // n_chunks * flag_stride, dtype=torch.int64, device=p.device),
            torch.zeros((4 if p.ct == torch.float64 else 2) * n_chunks * p.N, dtype=torch.int64, device=p.device))


def _fast_launcher(ck):
    """(callable, fixed args) launching the compiled kernel `ck` as fn(grid, 1, 1, stream, *fixed, *args)."""
    run = ck.run  # CudaLauncher; loads the module on first access
    if run.global_scratch_size == 0 and run.profile_scratch_size == 0:
        # Triton's generated C launcher itself: skips CudaLauncher.__call__'s scratch set-up.
        return run.launch, (ck.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                            ck.packed_metadata, None, None, None)
    return run, (ck.function, ck.packed_metadata, None, None, None)


def _may_launch_directly(p: _Plan) -> bool:
    """Whether `p` gets a direct launcher after its first launch: compiled kernels on a CUDA device, with the
    Triton version whose launcher arguments _fast_launcher was written for (others launch by kernel[grid])."""
    return _LAUNCHER_CHECKED and not _INTERPRET and p.device.type == "cuda"


def _slow(spec: _Spec, p: _Plan, ins, out, fl):
    """Everything but the cached direct launch: empty problems, the documented copies, the JIT path."""
    outs = _alloc(p, spec.n_out) if out is None else (out if spec.n_out > 1 else (out,))
    if p.empty:  # before the copies: their reshape to [N] cannot recover a [*B] input's N from an empty [T, *B]
        pass
    elif p.via_copy:
        T, N = p.T, p.N
        flat = tuple(None if x is None else (x.reshape(N) if i in spec.seq else x.reshape(T, N)).resolve_neg()
                     for i, x in enumerate(ins))
        res = _call(spec, flat, None, fl)[0]
        res = res if spec.n_out > 1 else (res,)
        if out is None:
            outs = tuple(r.view(p.shape) for r in res)
        else:
            with writing_into(outs):
                for o, r in zip(outs, res):
                    o.copy_(r.view(p.shape))
    else:
        ck = _jit_launch(spec, p, ins, outs, fl)
        if p.direct is None and _may_launch_directly(p):
            p.direct = _fast_launcher(ck)
    return outs if spec.n_out > 1 else outs[0]


_RECENT = 8  # plans remembered per type pattern (more alternating shapes rebuild guards)
_MAX_PATTERNS = 8  # type patterns with a launch function per estimator; further ones take the key path
_MAX_PLANS = 4096  # per estimator; the table starts over beyond it
_DATA_PTR = torch.Tensor.data_ptr
_PLAIN_SCALARS = frozenset((float, int))
_new_tuple = tuple.__new__  # builds the output named tuple in a third of the time its __new__ takes
_GENERATED = itertools.count()  # numbers the generated launch functions' file names
_GENERATING = threading.Lock()


def _fallback(spec: _Spec, ins, out, raw):
    """A call that no launch function of `spec` served (the key paths at the end): :func:`_run`, the outputs
    as the API function returns them."""
    res = _run(spec, ins, out, raw)
    return _new_tuple(spec.wrap, res) if spec.n_out > 1 else res


def _run(spec: _Spec, ins, out, raw):
    """The key path (:func:`_call`), then the plan is remembered for the call's type pattern: with aligned
    pointers, a direct launcher and plain float/int scalars."""
    fl = _scalars(spec, raw)
    res, p, aligned = _call(spec, ins, out, fl)
    if aligned and p.direct is not None and _TensorGuards is not None and _PLAIN_SCALARS.issuperset(map(type, raw)):
        parts = () if out is None else tuple(out) if spec.n_out > 1 else (out,)  # _call checked its form
        _remember(spec, (tuple(map(type, ins)), type(out), tuple(map(type, parts)), tuple(map(type, raw))),
                  [x for x in ins + parts if x is not None], p)
    return res


def _remember(spec: _Spec, types, present, p: _Plan) -> None:
    """Let the launch function of type pattern `types` serve plan `p` for tensors like `present` (the
    non-None inputs, then the outputs given), whose pointers were all 16-byte aligned.

    Not remembered: a call passing one tensor in two places (TensorGuards rejects a tensor it sees twice, so
    such a call, e.g. on-policy V-trace with one log-prob tensor, stays on the key path), and a new pattern
    once the estimator has _MAX_PATTERNS of them (it stays on the key path too: starting over would make
    a program cycling through more patterns generate a function on every call)."""
    global _TensorGuards
    if len(set(map(id, present))) < len(present):
        return
    hot = spec.hot
    launch = hot.by_types.get(types)
    if launch is None and len(hot.by_types) >= _MAX_PATTERNS:
        return
    if launch is not None and any(g.check(*present) for g, _ in launch.entries):
        return  # already served; this call missed for another reason (e.g. a launch hook was set)
    try:
        guards = _guards(present)
        if not guards.check(*present):
            raise RuntimeError("TensorGuards rejects the tensors it was built from")
    except Exception:  # noqa: BLE001  (a PyTorch without this private class's behaviour: key path only)
        _TensorGuards = None
        for sp in _SPECS:
            sp.hot.clear()
        return
    if launch is None:
        with _GENERATING:  # each new function must chain to the entry it replaces, also with threads
            launch = hot.by_types.get(types)
            if launch is None:
                hot.add(types, _pattern_launch(spec, types, (guards, p)))  # published with its first plan
                return
    entries = launch.entries
    entries.insert(0, (guards, p))
    del entries[_RECENT:]


def _promote(entries, *tensors):
    """The plan of the first entry behind the front one whose guards accept `tensors`, moved to the front; None
    if none does. A call that alternates between shapes so pays one failed check, not one per plan remembered
    after its own (up to _RECENT - 1; behind six others the stubbed call took 1.28-1.45x the time on the CPU box,
    benchmarks/results/host-wrapper-cpu-plan-order-behind6-vs-de72448-2026-12-02.json)."""
    for entry in entries[1:]:
        if entry[0].check(*tensors):
            try:
                entries.remove(entry)
            except ValueError:  # another thread's _remember dropped it meanwhile
                pass
            else:
                entries.insert(0, entry)
            return entry[1]
    return None


def _pattern_launch(spec: _Spec, types, first):
    """A launch function for one type pattern of `spec`'s arguments, generated so that a repeated call
    does no more than its checks and the launch.

    It takes the op's arguments ``(*inputs, out, *scalars)`` and returns the outputs. It launches only if:
    the same inputs are None, ``out`` has the same form, the scalars have the same types, no Triton launch
    hook is set, a remembered plan's TensorGuards accepts the tensors and every data pointer is 16-byte
    aligned (the plans were compiled for that); otherwise it hands the call to ``spec.hot.entry`` as it was
    when the function was generated (the previous pattern's function, or the key path). A new scalar value
    is validated on the way (``ValueError``); a plan on a device other than the current one is launched
    under that device. Its plans are ``.entries``, a list of ``(TensorGuards, _Plan)`` that starts with `first`
    and is never empty, the plan used last first: a call served by another entry moves it to the front
    (:func:`_promote`), so that a program alternating between a few shapes pays one failed check per call.
    Generated code because what a call pays here is per argument: one unrolled line per tensor instead of
    loops, maps and index lists."""
    in_types, out_type, _, raw_types = types
    n_in, n_out, n_raw = spec.n_in, spec.n_out, len(raw_types)
    ins = [f"a{i}" for i in range(n_in)]
    present = [a for a, t in zip(ins, in_types) if t is not type(None)]
    outs = [f"o{j}" for j in range(n_out)]
    raws = [f"s{k}" for k in range(n_raw)]
    every = ", ".join(ins + ["out"] + raws)
    allocate = out_type is type(None)
    checks = [f"{a} is None" for a, t in zip(ins, in_types) if t is type(None)]
    if allocate:
        checks.append("out is None")
    elif n_out > 1:
        checks += ["type(out) is OUT", f"len(out) == {n_out}"]
    checks += [f"type({r}) is S{k}" for k, r in enumerate(raws)]
    # _hooks_idle() inlined for the usual state (Triton's own empty hook chains), called otherwise
    checks.append("(_RUNTIME.launch_enter_hook is _ENTER and _RUNTIME.launch_exit_hook is _EXIT"
                  " and not (_ENTER.calls or _EXIT.calls) or _hooks_idle())")
    given = [] if allocate else outs
    lines = [f"def launch({every}):",
             f"    if not ({' and '.join(checks)}):",
             f"        return miss({every})"]
    if not allocate:
        lines.append(f"    {', '.join(outs)} = out")
    checked = ", ".join(present + given)
    lines += ["    guards, plan = entries[0]",
              f"    if not guards.check({checked}):",
              f"        plan = promote(entries, {checked})",
              "        if plan is None:",
              f"            return miss({every})"]
    ptrs = {a: f"p_{a}" for a in present + given}
    lines += [f"    {ptrs[a]} = {a}.data_ptr()" for a in present + given]
    # outputs whose byte ranges overlap go to the key path, which checks them element by element (and raises)
    same_out = " or plan.out_lo < p_o0 - p_o1 < plan.out_hi" if not allocate and n_out == 2 else ""
    lines += [f"    if ({' | '.join(ptrs.values())}) & 15{same_out}:",
              f"        return miss({every})",
              f"    raw = ({', '.join(raws)}{',' if n_raw == 1 else ''})",
              "    fl = scal.get(raw)",
              "    if fl is None:",
              "        fl = _scalars(spec, raw)",
              "    index = plan.index",
              "    if index != _cur_device():",
              "        with torch.cuda.device(index):",
              f"            return launch({every})",
              "    direct = plan.direct",
              "    if direct is None:  # direct launches were just turned off (another thread's launcher failed)",
              f"        return key_path({every})",
              "    stream = _raw_stream(index)"]
    if allocate:
        lines += [f"    {o} = torch.empty(plan.shape, dtype=plan.dtype, device=plan.device)" for o in outs]
        lines += [f"    p_{o} = {o}.data_ptr()" for o in outs]
        ptrs.update({o: f"p_{o}" for o in outs})
    args = [ptrs.get(a, "0") for a in ins + outs]  # an absent input's pointer is never read (HAS_* is false)
    lines += ["    tail = plan.tail",
              "    if tail[0] is not fl:",
              "        tail = plan.tail = (fl, (*plan.ints, *fl, *plan.cvals))",
              "    link_i = link_f = 0",
              "    if plan.split:",
              "        link_i, link_f = map(_DATA_PTR, _links(plan, stream))",
              "    fn, fixed = direct",
              "    try:",
              f"        fn(plan.grid, 1, 1, stream, *fixed, {', '.join(args)}, link_i, link_f, *tail[1])",
              "    except TypeError as err:",
              "        _disable_direct_launch(err, stacklevel=4)  # as the entry: the API function, then the user",
              f"        return key_path({every})",
              f"    return {'_new_tuple(WRAP, (' + ', '.join(outs) + '))' if n_out > 1 else outs[0]}"]
    consts = {"miss": spec.hot.entry, "key_path": spec.hot.key_path, "promote": _promote, "OUT": out_type,
              "WRAP": spec.wrap,
              **{f"S{k}": t for k, t in enumerate(raw_types)}}
    src = "\n".join([f"def make(spec, scal, entries, {', '.join(consts)}):"] + ["    " + ln for ln in lines]
                    + ["    return launch"])
    filename = f"<kernels._triton_ops launch function {next(_GENERATED)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # tracebacks show the source
    namespace = {}
    exec(compile(src, filename, "exec"), globals(), namespace)  # noqa: S102
    entries = [first]
    launch = namespace["make"](spec, spec.scal, entries, **consts)
    launch.entries = entries
    launch.source = src
    return launch


def _scalars(spec: _Spec, raw):
    """The kernel's float arguments for the scalars `raw`, validated once per value.

    Only plain floats and ints are cached: ``True == 1.0`` (same hash), so a bool would otherwise
    find the entry of a valid 1.0 and skip the check that rejects it."""
    if _PLAIN_SCALARS.issuperset(map(type, raw)):
        fl = spec.scal.get(raw)
        if fl is not None:
            return fl
        fl = spec.kargs(*spec.scalars(*raw))
        if len(spec.scal) > 1024:
            spec.scal.clear()
        spec.scal[raw] = fl
        return fl
    return spec.kargs(*spec.scalars(*raw))


def _call(spec: _Spec, ins, out, fl):
    """The key path: find or build the plan for this metadata, launch it. Returns (result, plan, aligned)."""
    try:
        if out is None:
            ts = ins
        elif spec.n_out == 1:
            ts = ins + (out,)
        elif isinstance(out, (tuple, list)) and len(out) == spec.n_out:
            ts = ins + tuple(out)
        else:
            raise TypeError
        # One flat tuple: hashing nested per-tensor tuples costs more than reading the metadata.
        # get_device() (an int) hashes and compares far faster than a torch.device; it is -1 for CPU and
        # meta alike, hence is_meta. is_neg: a lazily negated view must take the copy path.
        key = []
        ptrs = []
        bits = 0
        for x in ts:
            if x is None:
                key.append(None)
                ptrs.append(0)  # never dereferenced: the HAS_* constexpr is false
            else:
                ptr = x.data_ptr()
                key += (x.shape, x.stride(), x.dtype, x.get_device(), x.is_meta, x.is_neg(), ptr & 15)
                ptrs.append(ptr)
                bits |= ptr
        if out is not None:  # an out= buffer that requires grad must reach the checks (TensorGuards tells them apart)
            key += [x.requires_grad for x in ts[spec.n_in:]]
        key = tuple(key)
        p = spec.plans.get(key)
    # not tensors, a malformed out=, a tensor without strided storage (data_ptr raises): the checks name the argument
    except (AttributeError, TypeError, RuntimeError):
        spec.tensors(*ins, out)
        raise
    if p is None:
        p = _build(spec, ins, out)
        if len(spec.plans) >= _MAX_PLANS:  # e.g. a horizon that changes every call
            spec.plans.clear()
        spec.plans[key] = p
    elif spec.n_out == 2 and out is not None and p.out_lo < ptrs[-2] - ptrs[-1] < p.out_hi:
        spec.tensors(*ins, out)  # two outputs in overlapping byte ranges: the checks raise if they share an element
    if p.direct is None or not _hooks_idle():
        res = _slow(spec, p, ins, out, fl)
    else:
        res = _run_plan(spec, p, ptrs, out, fl, ins)
    return res, p, not bits & 15


def _run_plan(spec: _Spec, p: _Plan, ptrs, out, fl, ins):
    """Launch a plan that has a direct launcher (outputs allocated here when `out` is None)."""
    if out is None:
        outs = _alloc(p, spec.n_out)
        ptrs += map(_DATA_PTR, outs)
    else:
        outs = out if spec.n_out > 1 else (out,)
    tail = p.tail  # (scalars, the arguments after the pointers): one attribute, so threads never mix two
    if tail[0] is not fl:
        tail = p.tail = (fl, (*p.ints, *fl, *p.cvals))
    try:
        fn, mid = p.direct
        idx = p.index
        with torch.cuda.device(idx) if idx != _cur_device() else contextlib.nullcontext():
            stream = _raw_stream(idx)
            # without a split the workspace pointers are 0, never read
            ptrs += map(_DATA_PTR, _links(p, stream)) if p.split else (0, 0)
            fn(p.grid, 1, 1, stream, *mid, *ptrs, *tail[1])
    except TypeError as err:
        # The generated launcher's argument list is a Triton internal (checked for 3.6); on a version
        # that parses it differently nothing has launched yet, so use the public launch path instead.
        _disable_direct_launch(err, stacklevel=8)  # _call, _run, _fallback, key path, API function, caller
        return _slow(spec, p, ins, out, fl)
    return outs if spec.n_out > 1 else outs[0]


def _disable_direct_launch(err: Exception, stacklevel: int) -> None:
    """Turn direct launches off for good, warning at the user's call (`stacklevel` frames up)."""
    warnings.warn(f"kernels: Triton's launcher rejected the direct launch ({err}); falling back to "
                  f"kernel[grid] launches, which cost more host time per call", RuntimeWarning, stacklevel=stacklevel)
    global _fast_launcher
    _fast_launcher = lambda ck: None  # noqa: E731  (plans built from now on stay on kernel[grid])
    for spec in _SPECS:
        spec.hot.clear()
        for plan in spec.plans.values():
            plan.direct = None


def _spec(kernel, n_in, n_out, seq, flags, has, tensors, scalars, kargs, key_path, wrap=None):
    return _Spec(kernel, n_out, frozenset(seq), frozenset(flags), tuple(has), tensors, scalars, kargs, {}, {},
                 _Patterns(key_path), n_in, wrap)


# The key paths: an estimator's op when no launch function serves the call (_Patterns). Arguments: the inputs in
# kernel pointer order, out, the scalars; the API functions call ``spec.hot.entry`` with the same arguments.
def _gae_key_path(rewards, values, terminated, truncated, bootstrap_value, next_values, out, gamma, lambda_):
    return _fallback(_GAE, (rewards, values, terminated, truncated, bootstrap_value, next_values), out,
                     (gamma, lambda_))


def _vtrace_key_path(rewards, values, terminated, truncated, bootstrap_value, next_values, behaviour_log_probs,
                     target_log_probs, out, gamma, lambda_, rho_clip, c_clip, pg_rho_clip):
    return _fallback(_VTRACE, (rewards, values, terminated, truncated, bootstrap_value, next_values,
                               behaviour_log_probs, target_log_probs), out,
                     (gamma, lambda_, rho_clip, c_clip, pg_rho_clip))


def _lambda_returns_key_path(rewards, values, terminated, truncated, bootstrap_value, next_values, out, gamma,
                             lambda_):
    return _fallback(_LAMBDA, (rewards, values, terminated, truncated, bootstrap_value, next_values), out,
                     (gamma, lambda_))


def _discounted_returns_key_path(rewards, terminated, truncated, bootstrap_value, next_values, out, gamma):
    return _fallback(_DISCOUNTED, (rewards, terminated, truncated, bootstrap_value, next_values), out, (gamma,))


def _retrace_key_path(rewards, q_values, values, terminated, truncated, bootstrap_value, next_values,
                      behaviour_log_probs, target_log_probs, out, gamma, lambda_, c_clip):
    return _fallback(_RETRACE, (rewards, q_values, values, terminated, truncated, bootstrap_value, next_values,
                                behaviour_log_probs, target_log_probs), out, (gamma, lambda_, c_clip))


def _eligibility_traces_key_path(x, terminated, truncated, initial, out, gamma, lambda_):
    return _fallback(_ELIG, (x, terminated, truncated, initial), out, (gamma, lambda_))


def _episodic_prefix_sum_key_path(x, terminated, truncated, initial, out):
    return _fallback(_PREFIX, (x, terminated, truncated, initial), out, ())


# Input order = the kernel's pointer order (and stride order). Flags: terminated, truncated.
_GAE = _spec(K.gae_kernel, 6, 2, (4,), (2, 3), (("HAS_TR", 3), ("HAS_NV", 5)), V.tensors_gae,
             V.scalars_gamma_lambda, lambda g, lam: (*_split(g), *_split(g * lam)), _gae_key_path, GAEOutput)
_VTRACE = _spec(K.vtrace_kernel, 8, 2, (4,), (2, 3), (("HAS_TR", 3), ("HAS_NV", 5)), V.tensors_vtrace,
                V.scalars_vtrace,
                lambda g, lam, rc, cc, pc: (*_split(g), *_split(lam), *_split(log_clip(rc)),
                                            *_split(log_clip(cc)), *_split(log_clip(pc))),
                _vtrace_key_path, VTraceOutput)
_LAMBDA = _spec(K.lambda_returns_kernel, 6, 1, (4,), (2, 3), (("HAS_TR", 3), ("HAS_NV", 5)),
                V.tensors_lambda_returns, V.scalars_gamma_lambda,
                lambda g, lam: (*_split(g), *_split(lam)), _lambda_returns_key_path)
_DISCOUNTED = _spec(K.discounted_kernel, 5, 1, (3,), (1, 2), (("HAS_TR", 2), ("HAS_BV", 3), ("HAS_NV", 4)),
                    V.tensors_discounted_returns, V.scalars_gamma, lambda g: _split(g), _discounted_returns_key_path)
_RETRACE = _spec(K.retrace_kernel, 9, 1, (5,), (3, 4), (("HAS_TR", 4), ("HAS_NV", 6)), V.tensors_retrace,
                 V.scalars_retrace, lambda g, lam, cc: (*_split(g), *_split(lam), *_split(log_clip(cc))),
                 _retrace_key_path)
_ELIG = _spec(K.forward_kernel, 4, 1, (3,), (1, 2), (("HAS_TR", 2), ("HAS_INIT", 3)), V.tensors_forward,
              V.scalars_gamma_lambda, lambda g, lam: _split(g * lam), _eligibility_traces_key_path)
_PREFIX = _spec(K.forward_kernel, 4, 1, (3,), (1, 2), (("HAS_TR", 2), ("HAS_INIT", 3)), V.tensors_forward,
                lambda: (), lambda: _split(1.0), _episodic_prefix_sum_key_path)
_SPECS = (_GAE, _VTRACE, _LAMBDA, _DISCOUNTED, _RETRACE, _ELIG, _PREFIX)
