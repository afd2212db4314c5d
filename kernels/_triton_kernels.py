"""Triton JIT code only: one combine operator (and its exclusive-scan variant, _combine_with_tail), one chunk
solver, one kernel per estimator.

Every estimator is a first-order linear recurrence ``y[t] = a[t] + b[t] * y[t+-1]``.
An element (a, b) is the affine map ``y -> a + b*y``; composing maps is associative,
so ``tl.associative_scan`` over the time axis of a ``[T_BLOCK, BLOCK_N]`` tile
solves the recurrence for BLOCK_N sequences at once. A program owns BLOCK_N
environments (contiguous along N, so loads/stores coalesce) and walks time in
chunks of T_BLOCK rows, and the running carry (y at the chunk edge) links
consecutive chunks. With T <= T_BLOCK the loop runs once. Coefficients are built
in registers from the raw inputs; nothing intermediate touches global memory.

``_solve`` walks the chunks for every estimator and solves each in one of two ways,
chosen by the constexpr SEG_L:

* SEG_L == 0, tile scan: one ``tl.associative_scan`` over the [T_BLOCK, BLOCK_N]
  tile. In a tall tile Triton spreads the time axis over threads and warps, so
  the scan goes through shuffles and shared memory; the plans use it for few
  environments (long tiles), and as [8, 32] tiles in one warp, which stay inside
  the threads, at 32768+ environments ([4, 32] for V-trace and Retrace, and for
  discounted returns from 65536 environments). Such small chunks (at most 256
  elements) are double-buffered: a warp loads chunk i+1 before it solves chunk
  i, instead of waiting one memory latency per chunk (docs/kernels.md, Tile
  scan).
* SEG_L > 0, segments: warp w owns the SEG_L consecutive rows
  ``t0 + w*SEG_L + j`` of the chunk (SEG_W = T_BLOCK // SEG_L warps), one
  environment per lane. Every row j is a [SEG_W, BLOCK_N] tensor, so walking j
  is sequential inside each thread. Pass 1 composes each segment's map in
  registers, one scan across the SEG_W segments links them (``_seg_scan``), and
  pass 2 walks the segment again from the values kept in registers, writing the
  outputs. The only shared-memory traffic is that one short scan; on the H200
  the tile scan was bound by it (scripts/profile_tile_scan.py). With the
  constexpr PRELOAD, pass 1 loads all SEG_L rows first, in ascending time; PRELOAD 2 loads the next
  chunk's rows before this chunk is solved.

With the constexpr SPLIT > 0 (few environments, long horizons), every chunk of every
environment block is a program of its own instead of a step of the loop: it
publishes its chunk's composed map in a workspace, composes the maps of the chunks
the recurrence visits before its own into the carry (``_lookback``), and finishes
its chunk. Program ids follow the order in which the recurrence visits the chunks
(``_program_tile``), so a program only ever waits for programs dispatched before it
that publish without waiting.

An estimator hands ``_solve`` three JIT functions: ``raw = LOAD(args, offs_t, BIG, F0, F1, F2)``,
its input rows as loaded (no conversion, so that loading the next chunk never waits on this one);
its per-row terms ``(a, b, keep) = TERMS(args, raw, offs_t, CT, F0, F1, F2)``, where ``keep`` is what
its outputs need besides y and F0-F2 are its boolean constexprs (HAS_TR, HAS_NV,
...) passed one by one, because a constexpr packed into a tuple is no longer one;
and ``EMIT(outs, BIG, offs_t, m, y, y_next, keep)``, which writes a row block given
y and the y that the recurrence consumed at those rows (y[t+1] backward, y[t-1]
forward; the tile scan computes it only where the estimator needs it, NEED_NEXT,
and passes None otherwise). EMIT returns None, or an output it computed from y in another order than the
reference's (GAE's advantages as returns - values, V-trace's pg_advantages with pg_rho distributed), which the
scans then check as they check y (a compile-time choice: the others pay nothing). Optionally a fourth, CHAIN,
with which the segment plans that load a segment's rows first take a row's input from the row after it instead
of loading it again (``_seg_rows``).

Scalars that must be exact in float64 (gamma, lambda, log clips) arrive as a
float32 hi/lo pair (Triton passes Python floats as fp32) and are rebuilt in CT.

A done makes b[t] = 0, and 0 * inf = NaN: a non-finite y[t+-1] on the far side would still come
across. The scans multiply all the same, so an inf or NaN in a program's inputs makes y at its last
row visited non-finite (the segment plans look at every segment's last row, where a y that overflows
from finite inputs ends up too), and so does an output that EMIT returns; only such a program is solved again,
one row at a time in the reference's order, selecting instead of multiplying wherever b is 0 (``_solve``,
``_rows_solve``, ``_affine`` with CUT). GAE, lambda-returns,
discounted returns and Retrace also keep the final observation of the bootstrap_value form (the row
after a done) out of what they carry (docs/kernels.md), so a broken one stays on the fast path.
"""
import types

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# Triton 3.6's interpreter (CPU tensors) rounds float32 toward zero when it stores bfloat16, where a GPU rounds to
# nearest even; _store_out rounds first under the interpreter only (a constexpr: no GPU instruction). True when this
# module was imported with TRITON_INTERPRET=1, and in the copy kernels._triton_ops._interpreted_launch loads
# otherwise.
_INTERPRETED = tl.constexpr(bool(triton.knobs.runtime.interpret))


@triton.jit
def _after_previous_grid(PDL: tl.constexpr):
    """With PDL (programmatic dependent launch, sm_90 and later; kernels._triton_ops launches such plans with
    Triton's launch_pdl): this grid may be dispatched while the kernel before it in the stream still runs, so
    every program first waits until that kernel has finished and its writes are visible (griddepcontrol.wait),
    then lets the next kernel's programs be dispatched in turn; they wait the same way before touching memory.
    Called before a program's first load. Without PDL: nothing."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _combine(a_prev, b_prev, a_cur, b_cur):
    # compose y -> a_cur + b_cur * (a_prev + b_prev * y)
    return a_cur + b_cur * a_prev, b_cur * b_prev


@triton.jit
def _affine(a, b, y, CUT: tl.constexpr):
    """a + b*y; with CUT, b == 0 gives a whatever y is (0*inf would carry a non-finite y across a done, see
    _solve)."""
    if CUT:
        return tl.where(b == 0, a, a + b * y)
    else:
        return a + b * y


@triton.jit
def _scale(b, y, CUT: tl.constexpr):
    """b*y; with CUT, 0 where b == 0 whatever y is (_affine)."""
    if CUT:
        return tl.where(b == 0, 0.0, b * y)
    else:
        return b * y


@triton.jit
def _scale_map(b, B):
    """b*B for a composed map's coefficient B of y beyond it: 0 where either is 0. A zero anywhere along the rows
    cuts y beyond them off, so an infinite b meeting it gives 0, not inf*0 = NaN (_rows_map)."""
    return tl.where((b == 0) | (B == 0), 0.0, b * B)


@triton.jit
def _offs(offs_t, offs_n, s_t, s_n, BIG: tl.constexpr):
    if BIG:
        return offs_t.to(tl.int64)[:, None] * s_t + offs_n.to(tl.int64)[None, :] * s_n
    else:
        return offs_t[:, None] * s_t + offs_n[None, :] * s_n


@triton.jit
def _raw(ptr, offs_t, offs_n, s_t, s_n, mask, BIG: tl.constexpr):
    return tl.load(ptr + _offs(offs_t, offs_n, s_t, s_n, BIG), mask=mask, other=0)


@triton.jit
def _row(y, offs_t, t):
    # y[t, :] as a [BLOCK_N] vector (t is inside the tile)
    return tl.sum(tl.where((offs_t == t)[:, None], y, 0.0), axis=0)


@triton.jit
def _scalar(hi, lo, CT: tl.constexpr):
    return tl.cast(hi, CT) + tl.cast(lo, CT)


@triton.jit
def _vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV: tl.constexpr, BIG: tl.constexpr):
    """The raw V+ rows: next_values[t], else values[t+1] (0 at T-1, where _vnext puts the bootstrap)."""
    if HAS_NV:
        return _raw(NV, offs_t, offs_n, s_nv_t, s_nv_n, m, BIG)
    else:
        return _raw(V, offs_t + 1, offs_n, s_v_t, s_v_n, ((offs_t + 1) < T)[:, None] & mn[None, :], BIG)


@triton.jit
def _vnext(raw, boot, offs_t, T, HAS_NV: tl.constexpr, CT: tl.constexpr):
    """V+[t] for the rows offs_t from _vnext_raw's rows: next_values[t], else values[t+1] / bootstrap at T-1."""
    vn = raw.to(CT)
    if not HAS_NV:
        vn = tl.where((offs_t == T - 1)[:, None], boot[None, :], vn)
    return vn


@triton.jit
def _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR: tl.constexpr, BIG: tl.constexpr):
    """The raw terminated and truncated rows (without truncated, terminated again: _done ignores it)."""
    te = _raw(TE, offs_t, offs_n, s_te_t, s_te_n, m, BIG)
    if HAS_TR:
        return te, _raw(TR, offs_t, offs_n, s_tr_t, s_tr_n, m, BIG)
    else:
        return te, te


@triton.jit
def _is_set(flag):
    """flag != 0. Triton 3.6's interpreter flushes a bfloat16 subnormal to 0 when it compares one, so there a
    bfloat16 flag's bits are tested instead, the sign bit left out (-0.0 is not set); a GPU compares it as is."""
    if _INTERPRETED:
        if flag.dtype == tl.bfloat16:
            return (flag.to(tl.int16, bitcast=True) & 0x7FFF) != 0
    return flag != 0


@triton.jit
def _done(te, tr, HAS_TR: tl.constexpr):
    """(terminated, done) as booleans from _flags_raw's rows."""
    term = _is_set(te)
    done = term
    if HAS_TR:
        done = done | _is_set(tr)
    return term, done


@triton.jit
def _combine_with_tail(a_prev, b_prev, ta_prev, tb_prev, a_cur, b_cur, ta_cur, tb_cur):
    # (a, b): the composed map of a segment, as in _combine; (ta, tb): the same segment without the row
    # it starts from. Scanned in the recurrence's order, (ta, tb) at row t is the composition of the rows
    # visited before t, i.e. the exclusive scan, which gives y[t+1] (backward) on row t without moving
    # values between rows.
    return a_cur + b_cur * a_prev, b_cur * b_prev, ta_cur + tb_cur * a_prev, tb_cur * b_prev


@triton.jit
def _visit_order(n: tl.constexpr, REVERSE: tl.constexpr):
    """0 .. n-1 in the order the recurrence visits them (descending for a backward one).

    Tiles keep their rows, segments and chunk maps in this order, so every scan runs forwards: Triton 3.6
    lowers a reverse scan along an axis that lies inside each thread with warp shuffles all the same (five per
    value), which put 160 shuffles on the path of a warp walking 128 rows in chunks of 8."""
    if REVERSE:
        return n - 1 - tl.arange(0, n)
    else:
        return tl.arange(0, n)


@triton.jit
def _seg_scan(ca, cb):
    """Scan of the [SEG_W, BLOCK_N] segment maps (ca, cb), held in the recurrence's order (_visit_order) (the tile
    scan uses it for its rows too, where it needs y[t+-1]):
    (A, B), the inclusive compositions, and (TA, TB), the exclusive ones: for segment w, the composition of
    the segments the recurrence visits before it (those after w in time for a backward recurrence). y
    entering segment w is TA + TB * (y beyond the chunk)."""
    return tl.associative_scan((ca, cb, tl.zeros_like(ca), tl.full(ca.shape, 1, ca.dtype)), 0, _combine_with_tail)


@triton.jit
def _program_tile(LINK_I, N, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SPLIT: tl.constexpr,
                  REVERSE: tl.constexpr):
    """(environment block, time chunk, epoch) of this program.

    Without SPLIT, program i owns environment block i and all chunks. With SPLIT, every (block, chunk) tile is
    a program, and the program ids go to the chunks in the order the recurrence visits them: the tiles a tile
    waits for (the chunks visited before its own, same block) have smaller ids. A GPU dispatches the programs
    of a one-dimensional grid in increasing id order (CUB's single-pass scan assigns its tiles by block index
    on the same ground), so those have started before it, and they publish without waiting. The epoch of this
    launch is one more than the tile's own flag (LINK_I): every launch raises every flag of its workspace once,
    and launches sharing a workspace never overlap (kernels._triton_ops._links). No program's loads wait for
    an atomic first, as they would with tiles numbered by a ticket from a counter (docs/kernels.md, Split)."""
    if SPLIT:
        n_eb = tl.cdiv(N, BLOCK_N)
        k = tl.program_id(0)
        if REVERSE:
            c = N_CHUNKS - 1 - k // n_eb
        else:
            c = k // n_eb
        eb = k % n_eb
        return eb, c, tl.load(LINK_I + eb * _flag_stride(N_CHUNKS) + c, cache_modifier=".cg") + 1
    else:
        return tl.program_id(0), 0, 0


@triton.jit
def _program_columns(LINK_I, N, SEQ, s_seq_n, HAS_SEQ: tl.constexpr, CT: tl.constexpr, BLOCK_N: tl.constexpr,
                     N_CHUNKS: tl.constexpr, SPLIT: tl.constexpr, REVERSE: tl.constexpr):
    """(environment block, time chunk, epoch, environment indices, their mask, per-sequence input) of this program:
    its tile (_program_tile) and, where HAS_SEQ, the [BLOCK_N] values of SEQ (bootstrap_value or initial) for
    its environments in CT, zeros otherwise."""
    eb, c, epoch = _program_tile(LINK_I, N, BLOCK_N, N_CHUNKS, SPLIT, REVERSE)
    offs_n = eb * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    seq = tl.zeros([BLOCK_N], CT)
    if HAS_SEQ:
        seq = tl.load(SEQ + offs_n * s_seq_n, mask=mn, other=0).to(CT)
    return eb, c, epoch, offs_n, mn, seq


@triton.jit
def _flag_stride(N_CHUNKS: tl.constexpr):
    """int64 words between two environment blocks' flags in LINK_I: N_CHUNKS rounded up to whole 128-byte lines.

    Each block's flags sit on lines of their own. That was faster for the backward estimators at 512x2048 when
    programs polled each other's flags (docs/kernels.md, Split); since the maps carry their epoch (_words), a flag is
    read only by its own tile's program, and the layout was not timed again."""
    return (N_CHUNKS + 15) // 16 * 16


@triton.jit
def _low32(w):
    """The low 32 bits of int64 words, as int64 in [0, 2**32)."""
    return w - ((w >> 32) << 32)


@triton.jit
def _words(x, tag):
    """x ([BLOCK_N], float32 or float64) as workspace words: int64 words holding tag (the launch's epoch in the high
    32 bits) and 32 bits of x each, so that one single-copy-atomic 64-bit access carries a value and the launch it
    belongs to. float32: (bits,); float64: (high bits, low bits)."""
    if x.dtype == tl.float64:
        bits = x.to(tl.int64, bitcast=True)
        return tag + _low32(bits >> 32), tag + _low32(bits)
    else:
        return (tag + _low32(x.to(tl.int32, bitcast=True).to(tl.int64)),)


@triton.jit
def _from_words(w0, w1, CT: tl.constexpr):
    """The value _words packed (w1: its low bits for float64, unused for float32)."""
    if CT == tl.float64:
        return ((w0 << 32) + _low32(w1)).to(tl.float64, bitcast=True)
    else:
        return _low32(w0).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _stale(w, tag):
    """Whether any of the words w was published by another launch than the one of tag (compared modulo 2**32)."""
    return tl.max(((w >> 32) != (tag >> 32)).to(tl.int32)) > 0


@triton.jit
def _publish(LINK_F, x, slot: tl.constexpr, c, N, offs_n, mn, tag, N_CHUNKS: tl.constexpr):
    """Writes x ([BLOCK_N]) for chunk c as its words (_words) in LINK_F: slot 0 for A, 1 for B, and a float64's low
    bits in slot + 2. One relaxed 64-bit atomic exchange per word: a strong write, which a polling reader sees
    whole."""
    w = _words(x, tag)
    tl.atomic_xchg(LINK_F + (slot * N_CHUNKS + c) * N + offs_n, w[0], mask=mn, sem="relaxed", scope="gpu")
    if x.dtype == tl.float64:
        tl.atomic_xchg(LINK_F + ((slot + 2) * N_CHUNKS + c) * N + offs_n, w[1], mask=mn, sem="relaxed", scope="gpu")


@triton.jit
def _read(LINK_F, slot: tl.constexpr, k, N, offs_n, m, tag, N_CHUNKS: tl.constexpr):
    """The words in slot (_publish) of chunks k (any shape broadcasting with offs_n), masked by m (tag where masked:
    never stale). Volatile loads: strong reads from L2, never an L1 copy."""
    return tl.load(LINK_F + (slot * N_CHUNKS + k) * N + offs_n, mask=m, other=tag, volatile=True)


@triton.jit
def _await_maps(LINK_F, k, N, offs_n, m, tag, N_CHUNKS: tl.constexpr, CT: tl.constexpr, WAIT: tl.constexpr):
    """The maps (A, B) that chunks k published (_publish) in this launch (tag), read until every word carries tag
    (WAIT; without it, read once: maps this program has seen current already); the identity (0, 1) where m is
    False."""
    if CT == tl.float64:
        ah = _read(LINK_F, 0, k, N, offs_n, m, tag, N_CHUNKS)
        bh = _read(LINK_F, 1, k, N, offs_n, m, tag, N_CHUNKS)
        al = _read(LINK_F, 2, k, N, offs_n, m, tag, N_CHUNKS)
        bl = _read(LINK_F, 3, k, N, offs_n, m, tag, N_CHUNKS)
        if WAIT:
            while _stale(ah, tag) | _stale(bh, tag) | _stale(al, tag) | _stale(bl, tag):
                ah = _read(LINK_F, 0, k, N, offs_n, m, tag, N_CHUNKS)
                bh = _read(LINK_F, 1, k, N, offs_n, m, tag, N_CHUNKS)
                al = _read(LINK_F, 2, k, N, offs_n, m, tag, N_CHUNKS)
                bl = _read(LINK_F, 3, k, N, offs_n, m, tag, N_CHUNKS)
        a = _from_words(ah, al, CT)
        b = _from_words(bh, bl, CT)
    else:
        aw = _read(LINK_F, 0, k, N, offs_n, m, tag, N_CHUNKS)
        bw = _read(LINK_F, 1, k, N, offs_n, m, tag, N_CHUNKS)
        if WAIT:
            while _stale(aw, tag) | _stale(bw, tag):
                aw = _read(LINK_F, 0, k, N, offs_n, m, tag, N_CHUNKS)
                bw = _read(LINK_F, 1, k, N, offs_n, m, tag, N_CHUNKS)
        a = _from_words(aw, aw, CT)
        b = _from_words(bw, bw, CT)
    return tl.where(m, a, 0), tl.where(m, b, 1)


@triton.jit
def _lookback(link, A, B, carry, c, N_CHUNKS: tl.constexpr, SPLIT: tl.constexpr, REVERSE: tl.constexpr):
    """y just beyond chunk c (SPLIT: one program per chunk), given its own chunk map (A, B) ([BLOCK_N]).

    Publishes (A, B) in LINK_F (_publish), reads the maps of the chunks the recurrence visits before c until every
    word carries this launch's epoch (_await_maps), and composes them onto `carry` (y beyond the whole window,
    _maps_before). Each word holds its value and the epoch of the launch that wrote it, so a reader that sees the
    epoch sees the value: no barrier, fence or separate flag between publishing and reading. Each tile waits only
    on tiles that publish without waiting (_program_tile), so all make progress, and no tile's map depends on
    another's. The tile's flag in LINK_I is raised to the epoch, for this tile's program in the next launch
    (_program_tile): no other program reads it."""
    LINK_I, LINK_F, eb, epoch, offs_n, mn, N = link
    tag = epoch << 32
    _publish(LINK_F, A, 0, c, N, offs_n, mn, tag, N_CHUNKS)
    _publish(LINK_F, B, 1, c, N, offs_n, mn, tag, N_CHUNKS)
    tl.store(LINK_I + eb * _flag_stride(N_CHUNKS) + c, epoch)
    k = _visit_order(SPLIT, REVERSE)
    if REVERSE:
        before = (k > c) & (k < N_CHUNKS)
    else:
        before = k < c
    m = before[:, None] & mn[None, :]
    a, b = _await_maps(LINK_F, k[:, None], N, offs_n[None, :], m, tag, N_CHUNKS, A.dtype, True)
    return _maps_before(a, b, k, carry, SPLIT, REVERSE)


@triton.jit
def _maps_before(a, b, k, carry, SPLIT: tl.constexpr, REVERSE: tl.constexpr):
    """The maps (a, b) ([SPLIT, BLOCK_N], identity (0, 1) outside the chunks visited before this one) composed onto
    `carry`. Every published map is exact (a chunk whose inputs are not all finite composes its map row by row,
    _split_carry); composing them multiplies, so a map that is legitimately non-finite comes across a zero B as
    NaN. A chunk whose result is not finite is solved again with ROWS, which walks the chunks one at a time
    (_walk_chunks)."""
    A_all, B_all = tl.associative_scan((a, b), 0, _combine)
    if REVERSE:
        return _affine(_row(A_all, k, 0), _row(B_all, k, 0), carry, False)
    else:
        return _affine(_row(A_all, k, SPLIT - 1), _row(B_all, k, SPLIT - 1), carry, False)


@triton.jit
def _row_step(STEP: tl.constexpr, a, b, y, keep):
    """y one row on in the row-by-row solves (_rows_solve, _walk_chunks): a + b*y cut wherever b is 0 (_affine), or
    STEP(a, b, y, keep) where a + b*y adds in another order than the reference (Retrace, whose y is not the
    reference's carry: _retrace_rows_step; lambda-returns: _lambda_rows_step)."""
    if STEP is None:
        return _affine(a, b, y, True)
    else:
        return STEP(a, b, y, keep)


@triton.jit
def _nonfinite(x):
    """Whether any element of x is inf or NaN (x * 0 is NaN exactly there), as one scalar for the program."""
    return tl.sum(x * 0.0) != 0


@triton.jit
def _rows_map(LOAD: tl.constexpr, TERMS: tl.constexpr, args, t_first, n_rows: tl.constexpr, width: tl.constexpr,
              CT: tl.constexpr, BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr,
              REVERSE: tl.constexpr):
    """The composed map (A, B) ([width] each) of the n_rows rows from t_first in the recurrence's order, one row at
    a time, cutting wherever b is 0 (_affine). The fallback of a split chunk whose map is not finite (_solve)."""
    A = tl.zeros([1, width], CT)
    B = tl.full([1, width], 1, CT)
    for i in range(n_rows):
        offs_t = (t_first - i if REVERSE else t_first + i) + tl.arange(0, 1)
        a, b, _keep = TERMS(args, LOAD(args, offs_t, BIG, F0, F1, F2), offs_t, CT, F0, F1, F2)
        A = _affine(a, b, A, True)
        B = _scale_map(b, B)
    return tl.sum(A, axis=0), tl.sum(B, axis=0)


@triton.jit
def _rows_solve(LOAD: tl.constexpr, TERMS: tl.constexpr, EMIT: tl.constexpr, args, outs, carry, t_first,
                n_rows: tl.constexpr, T, mn, CT: tl.constexpr, BIG: tl.constexpr, F0: tl.constexpr,
                F1: tl.constexpr, F2: tl.constexpr, REVERSE: tl.constexpr, STEP: tl.constexpr):
    """Solves and writes the n_rows rows from t_first in the recurrence's order, one row at a time from the carry
    y beyond them, cutting wherever b is 0 (_row_step): the fallback for inputs that are not all finite (_solve)."""
    y = carry[None, :]
    for i in range(n_rows):
        offs_t = (t_first - i if REVERSE else t_first + i) + tl.arange(0, 1)
        a, b, keep = TERMS(args, LOAD(args, offs_t, BIG, F0, F1, F2), offs_t, CT, F0, F1, F2)
        y_next = y
        y = _row_step(STEP, a, b, y, keep)
        EMIT(outs, BIG, offs_t, (offs_t < T)[:, None] & mn[None, :], y, y_next, keep)


@triton.jit
def _walk_chunks(LOAD: tl.constexpr, TERMS: tl.constexpr, args, link, y, c, CT: tl.constexpr, BIG: tl.constexpr,
                 F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, T_BLOCK: tl.constexpr,
                 N_CHUNKS: tl.constexpr, REVERSE: tl.constexpr, EDGES: tl.constexpr, STEP: tl.constexpr):
    """y ([width]) entering chunk c from y beyond the window, one chunk at a time in the recurrence's order: through
    a chunk's published map (A, B) where that gives what its rows give, else through its rows one at a time,
    cutting wherever b is 0 (_row_step): the carry of a split chunk solved row by row (_solve with ROWS).

    A map is used where it is finite, either y is finite or B is not 0, and what it gives from a finite y is finite
    (A + B*y, A where B is 0). Composed maps multiply out: an infinite factor (an infinite trace) times a bracket
    holding terms of both signs is inf - inf = NaN where the rows give +-inf, a B of 0 may be an underflow (a
    product of many traces below 1) rather than a done, which would drop an infinite or NaN y that the rows carry
    on, and the map's order may overflow where the rows' does not. Such chunks walk their rows (every lane of the
    program). A y that is not finite and a B that is not 0 give what the rows give (no partial product of the
    traces is 0), so a NaN carried across chunks does not make every chunk after it walk its rows.

    EDGES: None where TERMS give y in the maps' form. Otherwise the maps hold another form, y + e with e per row,
    and EDGES(args, t0, T_BLOCK, CT, BIG) gives e at the chunk's first row and at the row after its last (GAE's
    advantages against the returns its split plans publish, _gae_edges): the map takes y + e after the chunk and
    gives y + e at its first row. A chunk where either e is not finite walks its rows; so does one where y + e
    overflows (values and advantages both near the range's end) while its rows stay finite.

    The maps are read once, without waiting: this program's first solve of chunk c saw them all current
    (_split_carry). The epoch in `link` is no use here: this second solve's _program_tile read the flag that the
    first had already raised, one ahead."""
    LINK_I, LINK_F, eb, epoch, offs_n, mn, N = link
    for j in range(N_CHUNKS - 1):
        k = N_CHUNKS - 1 - j if REVERSE else j
        if (k > c) if REVERSE else (k < c):
            A, B = _await_maps(LINK_F, k, N, offs_n, mn, 0, N_CHUNKS, CT, False)
            if EDGES is None:
                y_map = _affine(A, B, y, True)
                rows = ((A + B) * 0.0 != 0) | ((B == 0) & (y * 0.0 != 0))
            else:
                e_first, e_after = EDGES(args, k * T_BLOCK, T_BLOCK, CT, BIG)
                y_map = _affine(A, B, y + e_after, True) - e_first
                rows = ((A + B + e_first + e_after) * 0.0 != 0) | ((B == 0) & (y * 0.0 != 0))
            # a non-finite y stays non-finite through a map with B not 0, as through the rows
            rows = rows | ((y_map * 0.0 != 0) & (y * 0.0 == 0))
            if tl.max(rows.to(tl.int32)) > 0:
                yr = y[None, :]
                for i in range(T_BLOCK):
                    offs_t = (k * T_BLOCK + T_BLOCK - 1 - i if REVERSE else k * T_BLOCK + i) + tl.arange(0, 1)
                    a, b, keep = TERMS(args, LOAD(args, offs_t, BIG, F0, F1, F2), offs_t, CT, F0, F1, F2)
                    yr = _row_step(STEP, a, b, yr, keep)
                y = tl.sum(yr, axis=0)
            else:
                y = y_map
    return y


@triton.jit
def _split_carry(LOAD: tl.constexpr, TERMS: tl.constexpr, args, Ae, Be, t0, carry, CT: tl.constexpr,
                 BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, T_BLOCK: tl.constexpr,
                 N_CHUNKS: tl.constexpr, SPLIT: tl.constexpr, REVERSE: tl.constexpr, c, link):
    """(y entering split chunk c, cut) from the chunk's composed map (Ae, Be): publishes the map and composes the
    maps before it (_lookback). A map that is not finite is recomposed row by row first (_rows_map), so that every
    published map is exact. cut is True when that map or y entering the chunk is not finite: the caller then writes
    nothing and hands the chunk to the row-by-row solve (_solve with ROWS)."""
    own = _nonfinite(Ae + Be)
    if own:
        t_first = t0 + T_BLOCK - 1 if REVERSE else t0
        Ae, Be = _rows_map(LOAD, TERMS, args, t_first, T_BLOCK, carry.shape[0], CT, BIG, F0, F1, F2, REVERSE)
    y_in = _lookback(link, Ae, Be, carry, c, N_CHUNKS, SPLIT, REVERSE)
    return y_in, own | _nonfinite(y_in)


@triton.jit
def _tile_chunk(LOAD: tl.constexpr, TERMS: tl.constexpr, EMIT: tl.constexpr, args, outs, raw, t0, carry, T, mn,
                CT: tl.constexpr, BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr,
                T_BLOCK: tl.constexpr, N_CHUNKS: tl.constexpr, REVERSE: tl.constexpr, NEED_NEXT: tl.constexpr,
                SPLIT: tl.constexpr, c, link):
    """The tile scan of the chunk of rows t0.. from its raw rows; returns y at its last row visited (the next
    chunk's carry; with SPLIT, the carry it was given, or NaN where the chunk was cut, _split_carry), plus 0 times
    every output that EMIT returns (NaN in an environment where one is not finite, _solve)."""
    offs_t = t0 + _visit_order(T_BLOCK, REVERSE)
    m = (offs_t < T)[:, None] & mn[None, :]
    a, b, keep = TERMS(args, raw, offs_t, CT, F0, F1, F2)
    if NEED_NEXT:
        A, B, TA, TB = _seg_scan(a, b)
    else:
        A, B = tl.associative_scan((a, b), 0, _combine)
        TA = A
        TB = B
    edge = t0 if REVERSE else t0 + T_BLOCK - 1  # the row visited last
    if SPLIT:
        y_in, cut = _split_carry(LOAD, TERMS, args, _row(A, offs_t, edge), _row(B, offs_t, edge), t0, carry, CT,
                                 BIG, F0, F1, F2, T_BLOCK, N_CHUNKS, SPLIT, REVERSE, c, link)
        z = EMIT(outs, BIG, offs_t, m & (not cut), _affine(A, B, y_in[None, :], False),
                 _affine(TA, TB, y_in[None, :], False), keep)
        carry = tl.where(cut, float("nan"), carry)
        if z is not None:
            carry = carry + tl.sum(z * 0.0, axis=0)
    else:
        y = _affine(A, B, carry[None, :], False)
        if NEED_NEXT:
            z = EMIT(outs, BIG, offs_t, m, y, _affine(TA, TB, carry[None, :], False), keep)
        else:
            z = EMIT(outs, BIG, offs_t, m, y, None, keep)
        if z is None:
            carry = _row(y, offs_t, edge)
        else:
            # _row and the check in one reduction
            carry = tl.sum(tl.where((offs_t == edge)[:, None], y, 0.0) + z * 0.0, axis=0)
    return carry


@triton.jit
def _solve(LOAD: tl.constexpr, TERMS: tl.constexpr, EMIT: tl.constexpr, args, outs, carry, T, mn,
           CT: tl.constexpr, BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr,
           T_BLOCK: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr, REVERSE: tl.constexpr,
           NEED_NEXT: tl.constexpr, SPLIT: tl.constexpr, c, link,
           PRELOAD: tl.constexpr, ROWS: tl.constexpr, EDGES: tl.constexpr, CHAIN: tl.constexpr = None,
           STEP: tl.constexpr = None):
    """Solve y[t] = a[t] + b[t]*y[t-+1] for one program's environments, chunk by chunk; returns whether the
    program must solve its rows again with ROWS (a scalar; with SPLIT, whether chunk c must).

    carry: y just beyond the first chunk visited ([BLOCK_N]: 0 past the end for backward recurrences,
    the initial value before t=0 for forward ones). With SPLIT, the program solves chunk c only and
    gets y beyond it from the other chunks' programs (_lookback). Small chunks of the tile scan
    (at most 256 elements, a few per thread) are double-buffered: the next chunk's rows are loaded before this
    one is solved, so that a warp walking many chunks does not wait one memory latency per chunk (the last
    iteration loads its own chunk again instead of rows outside the window). PRELOAD: see _seg_chunk; PRELOAD 2
    in the segment plan also loads the next chunk's rows before this one is solved (the last iteration's lie
    past T, masked off). CHAIN: see _seg_rows.

    Non-finite inputs: the scans multiply, so an inf or NaN anywhere in a program's inputs makes y at the last
    row it visits non-finite (0 * inf = NaN carries it across every done); the segment plans look at every
    segment's last row instead, which also catches a y that overflows from finite inputs (_seg_chunk). An output
    that EMIT computes in another order than the reference (and returns) is checked with y: the scans' form may
    overflow, or give inf - inf, where the reference's order is finite (GAE's advantages as returns - values near
    the range's end, V-trace's pg_rho * Q + (pg_rho * g) * Y[t+1] for a huge pg_rho). Only then
    is the program solved again with ROWS: one row at a time, cutting wherever b is 0 (_rows_solve), which
    rewrites every output; finite inputs never pay for the selects. A program may hand its ROWS variant other
    LOAD, TERMS and EMIT (Retrace, GAE in the bootstrap_value form and V-trace: the reference's form,
    _retrace_rows_terms, _gae_terms with DELTA, _vtrace_rows_terms and _vtrace_rows_emit; lambda-returns: the
    terms its step needs, _lambda_rows_terms), and then EDGES where
    the maps its split chunks publish hold another form (_walk_chunks; GAE: _gae_edges; else None), and STEP
    where its row step is not a + b*y (_row_step; Retrace: _retrace_rows_step, lambda-returns: _lambda_rows_step).
    Each kernel runs that second solve in a function of its own that is not inlined (e.g. _gae_rows): inlined, it
    changed how ptxas scheduled the scans' loads, and Retrace took 1.09x the time at 16384x128
    (benchmarks/results/ab-nonfinite-*-nvidia-h200-2026-12-01.json); a second copy of the scan code itself doubled
    the registers (GAE at 65536x128: 168 instead of 80, scripts/kernel_resources.py).
    With SPLIT, a chunk whose composed map is not finite recomposes it row by row before publishing it
    (_rows_map). When that map or the carry from the other chunks is not finite, the scans write nothing and the
    program solves chunk c again with ROWS: y entering it through the other chunks (_walk_chunks), then its rows;
    a split segment chunk is also solved again when y at one of its segments' last rows is not finite (the ROWS
    solve then overwrites what its scans wrote, _seg_chunk).
    Keeping that code out of the scans' function matters there too: inlined (with the walk), GAE and V-trace took
    1.02-1.07x the device time at 512x2048 (docs/benchmarks-history.md, twenty-sixth session)."""
    if ROWS:
        # the rows lie in other threads than the scans': order the two writes of an element
        tl.debug_barrier()
        if SPLIT:
            # chunk c only, from y entering it; the scans wrote none of its rows (_split_carry)
            _rows_solve(LOAD, TERMS, EMIT, args, outs,
                        _walk_chunks(LOAD, TERMS, args, link, carry, c, CT, BIG, F0, F1, F2, T_BLOCK, N_CHUNKS,
                                     REVERSE, EDGES, STEP),
                        c * T_BLOCK + T_BLOCK - 1 if REVERSE else c * T_BLOCK, T_BLOCK, T, mn, CT, BIG, F0, F1, F2,
                        REVERSE, STEP)
        else:
            # all the rows the chunks cover (those past T are masked as in the scans)
            _rows_solve(LOAD, TERMS, EMIT, args, outs, carry, N_CHUNKS * T_BLOCK - 1 if REVERSE else 0,
                        N_CHUNKS * T_BLOCK, T, mn, CT, BIG, F0, F1, F2, REVERSE, STEP)
        return False
    if SEG_L == 0 and not SPLIT and N_CHUNKS > 1 and T_BLOCK * carry.shape[0] <= 256:
        last = (N_CHUNKS - 1) * T_BLOCK
        if REVERSE:
            nxt = LOAD(args, last + _visit_order(T_BLOCK, REVERSE), BIG, F0, F1, F2)
        else:
            nxt = LOAD(args, _visit_order(T_BLOCK, REVERSE), BIG, F0, F1, F2)
        for i in range(N_CHUNKS):
            if REVERSE:
                t0 = last - i * T_BLOCK
                t_next = tl.maximum(t0 - T_BLOCK, 0)
            else:
                t0 = i * T_BLOCK
                t_next = tl.minimum(t0 + T_BLOCK, last)
            raw = nxt
            nxt = LOAD(args, t_next + _visit_order(T_BLOCK, REVERSE), BIG, F0, F1, F2)
            carry = _tile_chunk(LOAD, TERMS, EMIT, args, outs, raw, t0, carry, T, mn, CT, BIG, F0, F1, F2, T_BLOCK,
                                N_CHUNKS, REVERSE, NEED_NEXT, SPLIT, c, link)
    elif SEG_L > 0 and PRELOAD == 2 and not SPLIT and N_CHUNKS > 1:
        # the next chunk's rows are loaded before this one is solved; the last iteration's "next" chunk lies beyond
        # the window (t >= T), so its loads are masked off
        wi = _visit_order(T_BLOCK // SEG_L, REVERSE)
        nxt = _seg_rows(LOAD, args, _chunk_t0(0, T_BLOCK, N_CHUNKS, REVERSE), wi, BIG, F0, F1, F2, SEG_L, CHAIN)
        for i in range(N_CHUNKS):
            raws = nxt
            nxt = _seg_rows(LOAD, args, _chunk_t0(i + 1, T_BLOCK, N_CHUNKS, REVERSE), wi, BIG, F0, F1, F2, SEG_L,
                            CHAIN)
            carry = _seg_chunk(LOAD, TERMS, EMIT, args, outs, _chunk_t0(i, T_BLOCK, N_CHUNKS, REVERSE), carry, T,
                               mn, CT, BIG, F0, F1, F2, T_BLOCK, N_CHUNKS, SEG_L, REVERSE, SPLIT, c, link, PRELOAD,
                               raws, CHAIN)
    elif SEG_L > 0 and SPLIT:
        # chunk c only: [SEG_W, BLOCK_N], NaN where it was cut or y at a segment's last row is not finite
        carry = _seg_chunk(LOAD, TERMS, EMIT, args, outs, c * T_BLOCK, carry, T, mn, CT, BIG, F0, F1, F2, T_BLOCK,
                           N_CHUNKS, SEG_L, REVERSE, SPLIT, c, link, PRELOAD, None, CHAIN)
    else:
        for i in range(1 if SPLIT else N_CHUNKS):
            if SPLIT:
                t0 = c * T_BLOCK
            elif REVERSE:
                t0 = (N_CHUNKS - 1 - i) * T_BLOCK
            else:
                t0 = i * T_BLOCK
            if SEG_L == 0:
                raw = LOAD(args, t0 + _visit_order(T_BLOCK, REVERSE), BIG, F0, F1, F2)
                carry = _tile_chunk(LOAD, TERMS, EMIT, args, outs, raw, t0, carry, T, mn, CT, BIG, F0, F1, F2,
                                    T_BLOCK, N_CHUNKS, REVERSE, NEED_NEXT, SPLIT, c, link)
            else:
                carry = _seg_chunk(LOAD, TERMS, EMIT, args, outs, t0, carry, T, mn, CT, BIG, F0, F1, F2, T_BLOCK,
                                   N_CHUNKS, SEG_L, REVERSE, SPLIT, c, link, PRELOAD, None, CHAIN)
    return _nonfinite(carry)


@triton.jit
def _chunk_t0(i, T_BLOCK: tl.constexpr, N_CHUNKS: tl.constexpr, REVERSE: tl.constexpr):
    """First row of the i-th chunk the recurrence visits (descending time for a backward one); from i = N_CHUNKS
    on, N_CHUNKS * T_BLOCK, a row past the window."""
    if REVERSE:
        return tl.where(i >= N_CHUNKS, N_CHUNKS * T_BLOCK, (N_CHUNKS - 1 - i) * T_BLOCK)
    else:
        return tl.minimum(i, N_CHUNKS) * T_BLOCK


def _not_inlined(program, name):
    """A second JIT function of `program`'s code that Triton compiles as a function of its own instead of inlining
    it, for each kernel's row-by-row solve (_solve with ROWS; why not inlined: see there). Triton names compiled
    functions by their qualified name, so the copy gets `name` there; the interpreter finds the function by its
    __name__ in the source it rewrites, so that stays."""
    fn = program.fn
    fn = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    fn.__qualname__ = name
    return triton.jit(noinline=True)(fn)


@triton.jit
def _seg_offs(t0, wi, k: tl.constexpr, SEG_L: tl.constexpr, REVERSE: tl.constexpr):
    """The time index of the k-th row the recurrence visits in every segment of the chunk starting at row t0:
    row j = k of each segment (t0 + wi*SEG_L + j), j = SEG_L-1-k for a backward recurrence."""
    if REVERSE:
        return t0 + wi * SEG_L + (SEG_L - 1 - k)
    else:
        return t0 + wi * SEG_L + k


@triton.jit
def _seg_rows(LOAD: tl.constexpr, args, t0, wi, BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr,
              F2: tl.constexpr, SEG_L: tl.constexpr, CHAIN: tl.constexpr = None):
    """The raw rows of every segment of the chunk starting at row t0, in ascending time: a tuple of SEG_L row
    blocks (row j of all segments: t0 + wi*SEG_L + j).

    CHAIN (an estimator's, or None): ``raw = CHAIN(raw, raw_after, F0, F1, F2)`` takes what a row loads from the
    row after it in the same segment, which this thread has loaded already; the load it replaces is then never
    issued (GAE's values[t+1], _gae_chain)."""
    raws = ()
    for j in tl.static_range(SEG_L):
        raws = raws + (LOAD(args, t0 + wi * SEG_L + j, BIG, F0, F1, F2),)
    if CHAIN is not None:
        chained = ()
        for j in tl.static_range(SEG_L - 1):
            chained = chained + (CHAIN(raws[j], raws[j + 1], F0, F1, F2),)
        raws = chained + (raws[SEG_L - 1],)
    return raws


@triton.jit
def _seg_pick(raws, k: tl.constexpr, SEG_L: tl.constexpr, REVERSE: tl.constexpr):
    """The rows of _seg_rows that the recurrence visits k-th (those at _seg_offs(k))."""
    if REVERSE:
        return raws[SEG_L - 1 - k]
    else:
        return raws[k]


@triton.jit
def _seg_chunk(LOAD: tl.constexpr, TERMS: tl.constexpr, EMIT: tl.constexpr, args, outs, t0, carry, T, mn,
               CT: tl.constexpr, BIG: tl.constexpr, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr,
               T_BLOCK: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr, REVERSE: tl.constexpr,
               SPLIT: tl.constexpr, c, link, PRELOAD: tl.constexpr, raws, CHAIN: tl.constexpr = None):
    """The segment plan on the chunk of rows t0..; returns y at its last row visited (the next chunk's carry), not
    finite (inf or NaN) in every environment where y at any segment's last row is not finite. With SPLIT, the carry it was given (NaN
    where the chunk was cut, as _tile_chunk) plus 0 * y at every segment's last row ([SEG_W, BLOCK_N]; only
    _solve's end check reads it). raws: the chunk's rows as _seg_rows loaded them (PRELOAD 2), or None.

    An output that EMIT returns is added to y times 0 after its row, so one that is not finite reaches the segment's
    last row and the check there: one multiply-add per row, and no register kept for it (accumulating the outputs
    apart instead made GAE's 32x32 plan take 38 registers instead of 32 and 1.03-1.04x the time at 16384x32, H100,
    benchmarks/results/ab-emit-check-first-form-*).

    Pass 2 starts each segment from y composed through the segments before it, so y inside a segment may overflow
    from finite maps and a finite carry (B * y_in, or y near the range's end plus a), and at a done further on
    0 * inf = NaN would carry it into the episode before. Such a value stays non-finite to the segment's last row,
    and the NaN it leaves in the carry sends the program to the row-by-row solve, which cuts at every done
    (_solve). Without SPLIT the check rides in the sum across the segments that takes the carry out (0 * y
    instead of 0 for the other segments), so finite rows pay one multiply per segment and chunk, not a select
    per row. With SPLIT, adding that sum to the carry instead made the split plans of 128-row chunks take
    2.4-3.9x the device time (H100, fifty-fifth session); the check sums the [SEG_W, BLOCK_N] tile itself.

    With PRELOAD, every row of the segment is loaded, in ascending time, before the first row's terms are built;
    otherwise each row is loaded where its terms are built (descending time for a backward recurrence). ptxas
    hoists most loads either way, but the order it keeps differs, and which is faster depends on the estimator
    (kernels._triton_ops._tile says where PRELOAD is used)."""
    wi = _visit_order(T_BLOCK // SEG_L, REVERSE)
    ca = tl.zeros([T_BLOCK // SEG_L, carry.shape[0]], CT)
    cb = tl.full([T_BLOCK // SEG_L, carry.shape[0]], 1, CT)
    As = ()
    Bs = ()
    Ks = ()
    if PRELOAD and raws is None:
        raws = _seg_rows(LOAD, args, t0, wi, BIG, F0, F1, F2, SEG_L, CHAIN)
    for k in tl.static_range(SEG_L):  # As[k], Bs[k], Ks[k]: the terms of the k-th row visited
        offs_t = _seg_offs(t0, wi, k, SEG_L, REVERSE)
        if PRELOAD:
            raw = _seg_pick(raws, k, SEG_L, REVERSE)
        else:
            raw = LOAD(args, offs_t, BIG, F0, F1, F2)
        a, b, keep = TERMS(args, raw, offs_t, CT, F0, F1, F2)
        ca = _affine(a, b, ca, False)
        cb = _scale(b, cb, False)
        As = As + (a,)
        Bs = Bs + (b,)
        Ks = Ks + (keep,)
    A, B, TA, TB = _seg_scan(ca, cb)
    edge = 0 if REVERSE else T_BLOCK // SEG_L - 1  # the segment visited last
    write = mn
    if SPLIT:
        y_in, cut = _split_carry(LOAD, TERMS, args, _row(A, wi, edge), _row(B, wi, edge), t0, carry, CT, BIG, F0,
                                 F1, F2, T_BLOCK, N_CHUNKS, SPLIT, REVERSE, c, link)
        write = mn & (not cut)
        carry = tl.where(cut, float("nan"), carry)
    else:
        y_in = carry
    y = _affine(TA, TB, y_in[None, :], False)
    for k in tl.static_range(SEG_L):
        offs_t = _seg_offs(t0, wi, k, SEG_L, REVERSE)
        y_next = y
        y = _affine(As[k], Bs[k], y, False)
        z = EMIT(outs, BIG, offs_t, (offs_t < T)[:, None] & write[None, :], y, y_next, Ks[k])
        if z is not None:
            y = y + z * 0.0
    if SPLIT:
        carry = carry[None, :] + y * 0.0
    else:
        carry = tl.sum(tl.where((wi == edge)[:, None], y, y * 0.0), axis=0)  # _row, with the check
    return carry


@triton.jit
def _bf16_rne(y):
    """float32 y rounded to the nearest bfloat16 (ties to even), still as float32: add just under half a bfloat16 ulp
    plus the kept part's lowest bit, then clear the 16 bits bfloat16 drops. Infinities and NaNs keep their class."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _store_out(ptr, y, mask):
    """tl.store of an output value. float64 bound for a bfloat16 output goes through float32: Triton 3.6's
    interpreter turns float64 into bfloat16 wrongly (a plain store of 1.5 gives a denormal), through float32 it
    is right; under the interpreter it is then rounded to nearest (_bf16_rne), which the GPU's store does itself.
    Compile-time choices: no instruction for the other dtypes."""
    if ptr.dtype.element_ty == tl.bfloat16:
        if y.dtype == tl.float64:
            y = y.to(tl.float32)
        if _INTERPRETED:
            y = _bf16_rne(y)
    tl.store(ptr, y, mask=mask)


@triton.jit
def _emit_y(outs, BIG: tl.constexpr, offs_t, m, y, y_next, keep):
    """OUT[t] = y[t] (outs = (OUT, s_t, s_n, offs_n))."""
    OUT, s_o_t, s_o_n, offs_n = outs
    _store_out(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, m)


@triton.jit
def _gae_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, _F2: tl.constexpr):
    """Raw rows: rewards, values, terminated, truncated, V+ (_vnext_raw)."""
    R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, \
        s_nv_t, s_nv_n, gamma, gl = args
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG)
    v = _raw(V, offs_t, offs_n, s_v_t, s_v_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    return r, v, te, tr, _vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG)


@triton.jit
def _gae_chain(raw, after, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, _F2: tl.constexpr):
    """A row's V+ from the row after it (_seg_rows' CHAIN): in the bootstrap_value form V+ is values[t+1], which that
    row loaded with the same mask and fill, so the values are the same (_vnext still puts the bootstrap at T-1).
    One load of five fewer per row in the segment plans that load a segment's rows first: at 16384x128 and
    16384x256, 0.955-0.995x and 0.951-0.959x GAE's device time; V-trace, which could do the same, took 1.008-1.025x
    at 16384x256 (docs/kernels.md, Plans)."""
    if HAS_NV:
        return raw
    else:
        r, v, te, tr, vn = raw
        return r, v, te, tr, after[1]


@triton.jit
def _gae_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, DELTA: tl.constexpr):
    """With next_values or DELTA, y = advantages: a = delta = r + gamma*(1-term)*V+ - v, b = gamma*lambda*(1-done).
    Otherwise (the bootstrap_value form), y = returns: a = r + gamma*(1-term)*(1-l)*V+, b = gamma*l,
    l = lambda*(1-done) and 0 at T-1 (in a only: b multiplies the zero carry beyond the window there). Keeps v
    (advantages = returns - v).

    Why two chains: advantages[t+1] holds -values[t+1], which in the bootstrap_value form is the final
    observation's value on the row after a done. Broken or not (inf, NaN), it must not reach row t through a scan,
    and 0 * inf would carry it there; returns[t+1] = r[t+1] + gamma*V+[t+1] + ... does not hold it. The row-by-row
    solve selects wherever b is 0, so it takes DELTA, the reference's form: an infinite values[t+1] inside an
    episode is inf - inf = NaN in advantages[t] there, where the returns chain gives +-inf
    ((gamma - gamma*lambda)*values[t+1]). In a split plan it walks the other chunks through the returns maps they
    publish (_gae_edges)."""
    R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, \
        s_nv_t, s_nv_n, gamma, gl = args
    r, v, te, tr, vn = raw
    r = r.to(CT)
    v = v.to(CT)
    term, done = _done(te, tr, HAS_TR)
    vn = _vnext(vn, boot, offs_t, T, HAS_NV, CT)
    # Masking V+ rather than selecting between r and r + gamma*V+ gives the same values, but ptxas then issues
    # a segment's loads in a few batches instead of one row's at a time (scripts/load_chain.py; faster for GAE
    # only, so the other estimators keep the select: docs/kernels.md, Decisions).
    if HAS_NV or DELTA:
        delta = (r + gamma * tl.where(term, 0.0, vn)) - v
        return delta, gl * (1 - done.to(CT)), v
    else:
        last = (offs_t == T - 1)[:, None]
        return r + tl.where(term, 0.0, vn) * tl.where(done | last, gamma, gamma - gl), tl.where(done, 0.0, gl), v


@triton.jit
def _gae_emit(outs, BIG: tl.constexpr, offs_t, m, y, y_next, v):
    ADV, RET, s_a_t, s_a_n, s_o_t, s_o_n, offs_n = outs
    _store_out(ADV + _offs(offs_t, offs_n, s_a_t, s_a_n, BIG), y, m)
    _store_out(RET + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y + v, m)


@triton.jit
def _gae_emit_returns(outs, BIG: tl.constexpr, offs_t, m, y, y_next, v):
    # y holds the returns. They are written as y + (v - v): y itself where values is finite, and NaN where it is
    # inf or NaN, as the spec's returns = advantages + values give there (the row after a done). The advantages go
    # back to the scans: y - v overflows where y and -v are both near the range's end, and y may overflow where the
    # reference's advantage does not (_solve)
    ADV, RET, s_a_t, s_a_n, s_o_t, s_o_n, offs_n = outs
    adv = y - v
    _store_out(ADV + _offs(offs_t, offs_n, s_a_t, s_a_n, BIG), adv, m)
    _store_out(RET + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y + (v - v), m)
    return adv


@triton.jit
def _gae_edges(args, t0, T_BLOCK: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """values at row t0 and at row t0 + T_BLOCK (0 from T on), [BLOCK_N] each: returns = advantages + values, so a
    split chunk's map of the returns carries advantages across its rows t0.. (_walk_chunks with EDGES)."""
    R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, \
        s_nv_t, s_nv_n, gamma, gl = args
    first = t0 + tl.arange(0, 1)
    after = first + T_BLOCK
    v_first = _raw(V, first, offs_n, s_v_t, s_v_n, (first < T)[:, None] & mn[None, :], BIG)
    v_after = _raw(V, after, offs_n, s_v_t, s_v_n, (after < T)[:, None] & mn[None, :], BIG)
    return tl.sum(v_first.to(CT), axis=0), tl.sum(v_after.to(CT), axis=0)


@triton.jit
def gae_kernel(R, V, TE, TR, BV, NV, ADV, RET, LINK_I, LINK_F, T, N,
               s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
               s_a_t, s_a_n, s_o_t, s_o_n,
               g_hi, g_lo, gl_hi, gl_lo,
               HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
               T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
               SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    _after_previous_grid(PDL)
    if _gae_program(R, V, TE, TR, BV, NV, ADV, RET, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t,
                    s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_a_t, s_a_n, s_o_t, s_o_n, g_hi, g_lo,
                    gl_hi, gl_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD,
                    False):
        _gae_rows(R, V, TE, TR, BV, NV, ADV, RET, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t,
                  s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_a_t, s_a_n, s_o_t, s_o_n, g_hi, g_lo,
                  gl_hi, gl_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD, True)


@triton.jit
def _gae_program(R, V, TE, TR, BV, NV, ADV, RET, LINK_I, LINK_F, T, N,
                 s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                 s_a_t, s_a_n, s_o_t, s_o_n,
                 g_hi, g_lo, gl_hi, gl_lo,
                 HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                 T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                 SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, boot = _program_columns(LINK_I, N, BV, s_bv_n, not HAS_NV, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, True)
    args = (R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
            s_nv_t, s_nv_n, _scalar(g_hi, g_lo, CT), _scalar(gl_hi, gl_lo, CT))
    outs = (ADV, RET, s_a_t, s_a_n, s_o_t, s_o_n, offs_n)
    link = (LINK_I, LINK_F, eb, epoch, offs_n, mn, N)
    if HAS_NV:
        return _solve(_gae_load, _gae_terms, _gae_emit, args, outs, tl.zeros([BLOCK_N], CT), T, mn, CT, BIG, HAS_TR,
                      HAS_NV, True, T_BLOCK, N_CHUNKS, SEG_L, True, False, SPLIT, c, link, PRELOAD, ROWS, None)
    elif ROWS:
        # the reference's advantages form; a split plan's chunks published maps of the returns (_gae_edges)
        return _solve(_gae_load, _gae_terms, _gae_emit, args, outs, tl.zeros([BLOCK_N], CT), T, mn, CT, BIG, HAS_TR,
                      HAS_NV, True, T_BLOCK, N_CHUNKS, SEG_L, True, False, SPLIT, c, link, PRELOAD, ROWS,
                      _gae_edges)
    else:
        return _solve(_gae_load, _gae_terms, _gae_emit_returns, args, outs, tl.zeros([BLOCK_N], CT), T, mn, CT, BIG,
                      HAS_TR, HAS_NV, False, T_BLOCK, N_CHUNKS, SEG_L, True, False, SPLIT, c, link, PRELOAD,
                      ROWS, None, _gae_chain)


_gae_rows = _not_inlined(_gae_program, "_gae_rows")


@triton.jit
def _vtrace_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, _F2: tl.constexpr):
    """Raw rows: rewards, values, terminated, truncated, V+ (_vnext_raw), target and behaviour log-probs, and
    values[t+1] when next_values is given (otherwise V+ is that row)."""
    R, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, \
        s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, rc, cc, pc = args
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG)
    v = _raw(V, offs_t, offs_n, s_v_t, s_v_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG)
    tgt = _raw(TGT, offs_t, offs_n, s_g_t, s_g_n, m, BIG)
    beh = _raw(BEH, offs_t, offs_n, s_b_t, s_b_n, m, BIG)
    if HAS_NV:
        return r, v, te, tr, vn, tgt, beh, _raw(V, offs_t + 1, offs_n, s_v_t, s_v_n,
                                                 ((offs_t + 1) < T)[:, None] & mn[None, :], BIG)
    else:
        return r, v, te, tr, vn, tgt, beh, vn


@triton.jit
def _vtrace_coefs(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr):
    """Y = vs - values: a = rho*delta, b = gamma*(1-cut)*c; and v, pg_rho, cut (done or T-1), g = gamma*(1-term)
    and Q = r + gamma*(1-term)*w0 - v for pg_advantages = pg_rho * (Q + g*Y[t+1]) (no Y[t+1] where cut).

    Y[t+1] holds -rho[t+1] * values[t+1]: in the bootstrap_value form, the final observation's value on
    the row after a done, which must not reach row t even when it is inf or NaN. A non-finite one sends the
    program to the row-by-row solve, which drops y[t+1] wherever b is 0 (_solve)."""
    R, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, \
        s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, rc, cc, pc = args
    r, v, te, tr, vn, tgt, beh, v1 = raw
    r = r.to(CT)
    v = v.to(CT)
    term, done = _done(te, tr, HAS_TR)
    vn = _vnext(vn, boot, offs_t, T, HAS_NV, CT)
    # exp is monotonic, so exp(min(log_rho, log clip)) = min(pi/mu, clip): one exp for the three ratios
    ratio = tl.exp(tgt.to(CT) - beh.to(CT))
    # propagate_nan: a GPU's min returns the other operand for a NaN one, the reference's clamp keeps the NaN
    rho = tl.minimum(ratio, rc, propagate_nan=tl.PropagateNan.ALL)
    c = lam * tl.minimum(ratio, cc, propagate_nan=tl.PropagateNan.ALL)
    delta = tl.where(term, r, r + gamma * vn) - v
    # pg_advantages[t] = pg_rho*(r + gamma*(1-term)*w - v), w = V+[t] where done or t = T-1, else
    # values[t+1] + Y[t+1] (values[t+1] is V+[t] itself unless next_values is given)
    if HAS_NV:
        v1 = v1.to(CT)
    else:
        v1 = vn
    cut = done | (offs_t == T - 1)[:, None]
    pg_rho = tl.minimum(ratio, pc, propagate_nan=tl.PropagateNan.ALL)
    Q = tl.where(term, r, r + gamma * tl.where(cut, vn, v1)) - v
    # b is 0 past the window as past a done, and with gamma or lambda_ 0, even where c is inf (an overflowing or
    # infinite ratio): the reference's gamma*c*(Y[T] = 0) and 0*c are 0 there (reference._traces)
    b = tl.where(cut, 0.0, tl.where((gamma == 0) | (lam == 0), 0.0, gamma * c))
    return rho * delta, b, v, pg_rho, Q, cut, tl.where(term, 0.0, gamma)


@triton.jit
def _vtrace_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                  _F2: tl.constexpr):
    """The scans' form of the tile and segment plans: keeps v, P = pg_rho*Q and coef = pg_rho*g (_vtrace_emit).

    P + coef*Y[t+1] distributes pg_rho over the bracket, which overflows or gives inf - inf where pg_rho is huge
    or infinite (pg_rho_clip inf) and the reference's pg_rho * (Q + g*Y[t+1]) need not. Where pg_rho*pg_rho
    overflows (pg_rho above about 1.8e19 in float32, 1.3e154 in float64), a is made NaN, which sends the program
    to the row-by-row solve: that solves in the reference's order (_vtrace_rows_terms). Kept this way, ptxas
    still issues a segment's loads together; the bracket's form here made a warp wait 8-16 memory latencies
    instead of 3 in the 4096x128 and 16384x128 plans (scripts/load_chain.py)."""
    a, b, v, pg_rho, Q, cut, g = _vtrace_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    # coef NaN marks the rows that must not read Y[t+1] at all (_vtrace_emit). A NaN pg_rho * g elsewhere makes P
    # NaN too, so the mark cannot change a result.
    return a + 0.0 * (pg_rho * pg_rho), b, (v, pg_rho * Q, tl.where(cut, float("nan"), pg_rho * g))


@triton.jit
def _vtrace_emit(outs, BIG: tl.constexpr, offs_t, m, Y, Y1, keep):
    VS, PG, s_vs_t, s_vs_n, s_pg_t, s_pg_n, offs_n, _gamma = outs
    v, P, coef = keep
    _store_out(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), v + Y, m)
    # at a done and at T-1 (coef NaN, _vtrace_terms) w is V+ and Y[t+1] is not read at all: it may be the next
    # episode's inf or NaN. Elsewhere Y[t+1] is multiplied, as the reference does (0 * NaN is NaN there). pg goes
    # back to the scans: distributing pg_rho gives inf - inf where the reference's bracket may be finite (_solve).
    pg = P + tl.where(coef != coef, 0.0, coef * Y1)
    _store_out(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG), pg, m)
    return pg


@triton.jit
def _vtrace_bracket_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                          _F2: tl.constexpr):
    """The split plans' form (a chunk that is not finite is solved again in the reference's order,
    _vtrace_rows_terms): rows that read Y[t+1] (not cut, so g = gamma) keep Q and pg_rho, and
    _vtrace_bracket_emit forms pg_rho * (Q + gamma*Y[t+1]) with the bracket first. Cut rows keep their whole
    pg_advantage and -1 in place of pg_rho (which is >= 0 or NaN, and NaN < 0 is false)."""
    a, b, v, pg_rho, Q, cut, _g = _vtrace_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    return a, b, (v, tl.where(cut, pg_rho * Q, Q), tl.where(cut, -1.0, pg_rho))


@triton.jit
def _vtrace_bracket_emit(outs, BIG: tl.constexpr, offs_t, m, Y, Y1, keep):
    VS, PG, s_vs_t, s_vs_n, s_pg_t, s_pg_n, offs_n, gamma = outs
    v, Q, pg_rho = keep
    _store_out(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), v + Y, m)
    # pg goes back to the scans: Q may overflow where the reference's r + gamma*vs[t+1] - values does not (_solve)
    pg = tl.where(pg_rho < 0, Q, pg_rho * (Q + gamma * Y1))
    _store_out(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG), pg, m)
    return pg


@triton.jit
def _vtrace_rows_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                       _F2: tl.constexpr):
    """The reference's order, for the row-by-row solve only: rows that read Y[t+1] keep r, values[t+1] and
    pg_rho, and _vtrace_rows_emit forms pg_rho * (r + gamma*(values[t+1] + Y[t+1]) - v), the reference's
    r + gamma*vs[t+1] - values. Q (r + gamma*values[t+1] - v, the bracket form's) may overflow where that does not
    (values[t+1] near the range's end with vs[t+1] far from it). Cut rows keep their whole pg_advantage and -1 in
    place of pg_rho, as in _vtrace_bracket_terms."""
    a, b, v, pg_rho, Q, cut, _g = _vtrace_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    r = raw[0].to(CT)
    v1 = raw[7].to(CT)
    return a, b, (v, tl.where(cut, pg_rho * Q, r), v1, tl.where(cut, -1.0, pg_rho))


@triton.jit
def _vtrace_rows_emit(outs, BIG: tl.constexpr, offs_t, m, Y, Y1, keep):
    VS, PG, s_vs_t, s_vs_n, s_pg_t, s_pg_n, offs_n, gamma = outs
    v, x, v1, pg_rho = keep
    _store_out(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), v + Y, m)
    _store_out(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG),
               tl.where(pg_rho < 0, x, pg_rho * (x + gamma * (v1 + Y1) - v)), m)


@triton.jit
def vtrace_kernel(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, LINK_I, LINK_F, T, N,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                  s_b_t, s_b_n, s_g_t, s_g_n, s_vs_t, s_vs_n, s_pg_t, s_pg_n,
                  g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi, lcc_lo, lpc_hi, lpc_lo,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                  T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                  SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    _after_previous_grid(PDL)
    if _vtrace_program(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t,
                       s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t,
                       s_g_n, s_vs_t, s_vs_n, s_pg_t, s_pg_n, g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi,
                       lcc_lo, lpc_hi, lpc_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L,
                       SPLIT, PRELOAD, False):
        _vtrace_rows(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t, s_v_n,
                     s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n,
                     s_vs_t, s_vs_n, s_pg_t, s_pg_n, g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi, lcc_lo,
                     lpc_hi, lpc_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT,
                     PRELOAD, True)


@triton.jit
def _vtrace_program(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, LINK_I, LINK_F, T, N,
                    s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                    s_b_t, s_b_n, s_g_t, s_g_n, s_vs_t, s_vs_n, s_pg_t, s_pg_n,
                    g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi, lcc_lo, lpc_hi, lpc_lo,
                    HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                    T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                    SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, boot = _program_columns(LINK_I, N, BV, s_bv_n, not HAS_NV, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, True)
    gamma = _scalar(g_hi, g_lo, CT)
    args = (R, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n,
            s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma,
            _scalar(l_hi, l_lo, CT), tl.exp(_scalar(lrc_hi, lrc_lo, CT)), tl.exp(_scalar(lcc_hi, lcc_lo, CT)),
            tl.exp(_scalar(lpc_hi, lpc_lo, CT)))
    outs = (VS, PG, s_vs_t, s_vs_n, s_pg_t, s_pg_n, offs_n, gamma)
    link = (LINK_I, LINK_F, eb, epoch, offs_n, mn, N)
    if ROWS:
        return _solve(_vtrace_load, _vtrace_rows_terms, _vtrace_rows_emit, args, outs, tl.zeros([BLOCK_N], CT), T,
                      mn, CT, BIG, HAS_TR, HAS_NV, None, T_BLOCK, N_CHUNKS, SEG_L, True, True, SPLIT, c, link,
                      PRELOAD, ROWS, None)
    elif SPLIT:
        return _solve(_vtrace_load, _vtrace_bracket_terms, _vtrace_bracket_emit, args, outs, tl.zeros([BLOCK_N], CT),
                      T, mn, CT, BIG, HAS_TR, HAS_NV, None, T_BLOCK, N_CHUNKS, SEG_L, True, True, SPLIT, c, link,
                      PRELOAD, ROWS, None)
    else:
        return _solve(_vtrace_load, _vtrace_terms, _vtrace_emit, args, outs, tl.zeros([BLOCK_N], CT), T, mn, CT,
                      BIG, HAS_TR, HAS_NV, None, T_BLOCK, N_CHUNKS, SEG_L, True, True, SPLIT, c, link, PRELOAD,
                      ROWS, None)


_vtrace_rows = _not_inlined(_vtrace_program, "_vtrace_rows")


@triton.jit
def _lambda_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, _F2: tl.constexpr):
    """Raw rows: rewards, terminated, truncated, V+ (_vnext_raw)."""
    R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, \
        s_nv_t, s_nv_n, gamma, lam = args
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    return r, te, tr, _vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG)


@triton.jit
def _lambda_coefs(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr):
    """(r, terminated, w, l, g, gamma) of rows offs_t: w = (1-l)*V+, l = lambda*(1-done) (0 at T-1),
    g = gamma*(1-term)."""
    R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, \
        s_nv_t, s_nv_n, gamma, lam = args
    r, te, tr, vn = raw
    r = r.to(CT)
    term, done = _done(te, tr, HAS_TR)
    vn = _vnext(vn, boot, offs_t, T, HAS_NV, CT)
    l = tl.where(done | (offs_t == T - 1)[:, None], 0.0, lam)
    g = tl.where(term, 0.0, gamma)
    return r, term, (1 - l) * vn, l, g, gamma


@triton.jit
def _lambda_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                  _F2: tl.constexpr):
    """The scans' form: a = r + gamma*(1-term)*(1-l)*V+, b = gamma*(1-term)*l (_lambda_coefs)."""
    r, term, w, l, g, gamma = _lambda_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    return tl.where(term, r, r + gamma * w), g * l, ()


@triton.jit
def _lambda_rows_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                       _F2: tl.constexpr):
    """The row-by-row solve's (_solve with ROWS): _lambda_terms' (a, b), keeping r, terminated, w, the carry's
    factor l (taken as 0 where gamma is 0: the carry's coefficient gamma*l is 0 there) and g for the step
    (_lambda_rows_step)."""
    r, term, w, l, g, gamma = _lambda_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    return tl.where(term, r, r + gamma * w), g * l, (r, term, w, tl.where(gamma == 0, 0.0, l), g)


@triton.jit
def _lambda_rows_step(a, b, y, keep):
    """G[t] = r + gamma*(w + l*G[t+1]) from y = G[t+1], r where terminated, the product 0 where l is 0: the
    reference's order, which forms the mixture (1-l)*V+ + l*G[t+1] first; a + b*y, with a = r + gamma*w, can
    overflow where G[t] does not (_row_step)."""
    r, term, w, l, g = keep
    return tl.where(term, r, r + g * (w + _scale(l, y, True)))


@triton.jit
def lambda_returns_kernel(R, V, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N,
                          s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                          s_o_t, s_o_n, g_hi, g_lo, l_hi, l_lo,
                          HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                          T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                          SEG_L: tl.constexpr, SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    _after_previous_grid(PDL)
    if _lambda_returns_program(R, V, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t, s_v_n,
                               s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_o_t, s_o_n, g_hi,
                               g_lo, l_hi, l_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L,
                               SPLIT, PRELOAD, False):
        _lambda_returns_rows(R, V, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_v_t, s_v_n,
                             s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_o_t, s_o_n, g_hi, g_lo,
                             l_hi, l_lo, HAS_TR, HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT,
                             PRELOAD, True)


@triton.jit
def _lambda_returns_program(R, V, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N,
                            s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                            s_o_t, s_o_n, g_hi, g_lo, l_hi, l_lo,
                            HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                            T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                            SEG_L: tl.constexpr, SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, boot = _program_columns(LINK_I, N, BV, s_bv_n, not HAS_NV, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, True)
    args = (R, V, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
            s_nv_t, s_nv_n, _scalar(g_hi, g_lo, CT), _scalar(l_hi, l_lo, CT))
    return _solve(_lambda_load, _lambda_rows_terms if ROWS else _lambda_terms, _emit_y, args,
                  (OUT, s_o_t, s_o_n, offs_n), tl.zeros([BLOCK_N], CT), T, mn, CT, BIG, HAS_TR, HAS_NV, None, T_BLOCK,
                  N_CHUNKS, SEG_L, True, False, SPLIT, c, (LINK_I, LINK_F, eb, epoch, offs_n, mn, N), PRELOAD, ROWS,
                  None, None, _lambda_rows_step if ROWS else None)


_lambda_returns_rows = _not_inlined(_lambda_returns_program, "_lambda_returns_rows")


@triton.jit
def _discounted_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_BV: tl.constexpr,
                     HAS_NV: tl.constexpr):
    """Raw rows: rewards, terminated, truncated, next_values (rewards again without it; not read then)."""
    R, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, \
        gamma = args
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    if HAS_NV:
        return r, te, tr, _raw(NV, offs_t, offs_n, s_nv_t, s_nv_n, m, BIG)
    else:
        return r, te, tr, r


@triton.jit
def _discounted_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_BV: tl.constexpr,
                      HAS_NV: tl.constexpr):
    """a = r + gamma*(1-term)*[cut]*C, b = gamma*(1-term)*(1-cut), cut = done or t = T-1."""
    R, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, \
        gamma = args
    r, te, tr, nv = raw
    r = r.to(CT)
    term, done = _done(te, tr, HAS_TR)
    last = (offs_t == T - 1)[:, None]
    cut = done | last
    g = tl.where(term, 0.0, gamma)
    a = r
    if HAS_NV:
        a = tl.where(term, r, r + gamma * tl.where(cut, nv.to(CT), 0.0))
    elif HAS_BV:
        a = tl.where(term, r, r + gamma * tl.where(last, boot[None, :], 0.0))
    return a, tl.where(cut, 0.0, g), ()


@triton.jit
def discounted_kernel(R, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N,
                      s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                      s_o_t, s_o_n, g_hi, g_lo,
                      HAS_TR: tl.constexpr, HAS_BV: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr,
                      BIG: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                      SEG_L: tl.constexpr, SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    _after_previous_grid(PDL)
    if _discounted_program(R, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t,
                           s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_o_t, s_o_n, g_hi, g_lo, HAS_TR, HAS_BV, HAS_NV,
                           CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD, False):
        _discounted_rows(R, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t,
                         s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_o_t, s_o_n, g_hi, g_lo, HAS_TR, HAS_BV, HAS_NV, CT,
                         BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD, True)


@triton.jit
def _discounted_program(R, TE, TR, BV, NV, OUT, LINK_I, LINK_F, T, N,
                        s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                        s_o_t, s_o_n, g_hi, g_lo,
                        HAS_TR: tl.constexpr, HAS_BV: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr,
                        BIG: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                        SEG_L: tl.constexpr, SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, boot = _program_columns(LINK_I, N, BV, s_bv_n, HAS_BV, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, True)
    args = (R, TE, TR, NV, boot, offs_n, T, mn, s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
            _scalar(g_hi, g_lo, CT))
    return _solve(_discounted_load, _discounted_terms, _emit_y, args, (OUT, s_o_t, s_o_n, offs_n),
                  tl.zeros([BLOCK_N], CT), T, mn, CT, BIG, HAS_TR, HAS_BV, HAS_NV, T_BLOCK, N_CHUNKS, SEG_L, True,
                  False, SPLIT, c, (LINK_I, LINK_F, eb, epoch, offs_n, mn, N), PRELOAD, ROWS, None)


_discounted_rows = _not_inlined(_discounted_program, "_discounted_rows")


@triton.jit
def _retrace_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, _F2: tl.constexpr):
    """Raw rows: rewards, terminated, truncated, V+ (_vnext_raw), and at t+1: q_values, target and behaviour
    log-probs."""
    R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, \
        s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc = args
    m = (offs_t < T)[:, None] & mn[None, :]
    m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
    r = _raw(R, offs_t, offs_n, s_r_t, s_r_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext_raw(V, NV, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, BIG)
    return (r, te, tr, vn, _raw(Q, offs_t + 1, offs_n, s_q_t, s_q_n, m1, BIG),
            _raw(TGT, offs_t + 1, offs_n, s_g_t, s_g_n, m1, BIG), _raw(BEH, offs_t + 1, offs_n, s_b_t, s_b_n, m1, BIG))


@triton.jit
def _retrace_coefs(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr):
    """(r, terminated, V+, k, g, gamma) of rows offs_t: k = lambda*min(c_clip, pi/mu)[t+1] cut at done and at
    T-1, g = gamma*(1-term)."""
    R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, \
        s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc = args
    r, te, tr, vn, q1, tgt1, beh1 = raw
    r = r.to(CT)
    term, done = _done(te, tr, HAS_TR)
    vn = _vnext(vn, boot, offs_t, T, HAS_NV, CT)
    lr1 = tgt1.to(CT) - beh1.to(CT)
    # k is 0 at a done, at T-1 and with gamma or lambda_ 0, where the reference's coefficient of
    # (Q_ret[t+1] - q[t+1]), gamma*(1-done)*c[t+1], is 0 even for an infinite ratio (reference._traces)
    lam = tl.where(gamma == 0, 0.0, lam)
    k = tl.where(done | (offs_t == T - 1)[:, None], 0.0,
                 tl.where(lam == 0, 0.0, lam * tl.exp(tl.minimum(lr1, lcc, propagate_nan=tl.PropagateNan.ALL))))
    return r, term, vn, k, tl.where(term, 0.0, gamma), gamma


@triton.jit
def _retrace_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                   _F2: tl.constexpr):
    """The scans' form, y = Q_ret: a = r + gamma*(1-term)*(V+ - k*q[t+1]), b = gamma*(1-term)*k (_retrace_coefs)."""
    r, term, vn, k, g, gamma = _retrace_coefs(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    q1 = raw[4]
    # Where k is 0, q[t+1] is selected away, so that an inf or NaN (at a done, the Q of the final observation in
    # the bootstrap_value form) does not enter through 0 * inf. Keep this form: three equivalent ones took
    # 1.38-1.48x the time at 16384x128 (docs/kernels.md, "Zero and infinite factors"). It multiplies q[t+1] by k
    # where the reference multiplies Q_ret[t+1] - q[t+1]: where k*q[t+1] overflows, y is not finite and the
    # program is solved again in the reference's form (_retrace_difference_terms), which the split plans use
    # throughout.
    return tl.where(term, r, r + gamma * (vn - tl.where(k == 0, 0.0, k * q1.to(CT)))), g * k, ()


@triton.jit
def _retrace_rows_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                       _F2: tl.constexpr):
    """_retrace_load's rows and q_values at t."""
    R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, \
        s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc = args
    r, te, tr, vn, q1, tgt1, beh1 = _retrace_load(args, offs_t, BIG, HAS_TR, HAS_NV, _F2)
    m = (offs_t < T)[:, None] & mn[None, :]
    return r, te, tr, vn, q1, tgt1, beh1, _raw(Q, offs_t, offs_n, s_q_t, s_q_n, m, BIG)


@triton.jit
def _retrace_difference_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr):
    """The reference's form, y = D = Q_ret - q_values: (a0, b, q[t]) with a0 = r + gamma*(1-term)*V+ and
    b = gamma*(1-term)*k (_retrace_coefs), so that a = a0 - q[t]. No product of k and q[t+1] to overflow, and an
    infinite trace multiplies the difference as in the reference."""
    r, te, tr, vn, q1, tgt1, beh1, q0 = raw
    r, term, vn, k, g, gamma = _retrace_coefs(args, (r, te, tr, vn, q1, tgt1, beh1), offs_t, CT, HAS_TR, HAS_NV)
    return tl.where(term, r, r + gamma * vn), g * k, q0.to(CT)


@triton.jit
def _retrace_split_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                         _F2: tl.constexpr):
    """The split plans' scans (_retrace_difference_terms): a = a0 - q[t], b; keeps a0 and b for
    _emit_retrace_rows."""
    a0, b, q0 = _retrace_difference_terms(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    return a0 - q0, b, (a0, b)


@triton.jit
def _retrace_rows_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, HAS_NV: tl.constexpr,
                        _F2: tl.constexpr):
    """The row-by-row solve's (_solve with ROWS; _retrace_difference_terms): as _retrace_split_terms, also keeping
    q[t] for the step, which adds in the reference's order (_retrace_rows_step)."""
    a0, b, q0 = _retrace_difference_terms(args, raw, offs_t, CT, HAS_TR, HAS_NV)
    return a0 - q0, b, (a0, b, q0)


@triton.jit
def _retrace_rows_step(a, b, y, keep):
    """D[t] = (r + gamma*(1-term)*V+ + b*D[t+1]) - q[t] from y = D[t+1], the product 0 where b is 0: the
    reference's order, which forms Q_ret[t] before it subtracts q[t] (a + b*D[t+1], with a = r + gamma*V+ - q[t],
    can overflow where Q_ret[t] and D[t] do not; _row_step)."""
    a0, b, q0 = keep
    return (a0 + _scale(b, y, True)) - q0


@triton.jit
def _emit_retrace_rows(outs, BIG: tl.constexpr, offs_t, m, y, y_next, keep):
    """OUT[t] = Q_ret[t] = r + gamma*(1-term)*V+ + b*D[t+1], the product 0 where b is 0 (_retrace_split_terms,
    _retrace_rows_terms: keep starts with a0 and b); q[t] itself is not read, as in the reference."""
    OUT, s_o_t, s_o_n, offs_n = outs
    a0 = keep[0]
    b = keep[1]
    _store_out(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), a0 + _scale(b, y_next, True), m)


@triton.jit
def retrace_kernel(R, Q, V, TE, TR, BV, NV, BEH, TGT, OUT, LINK_I, LINK_F, T, N,
                   s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n,
                   s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, s_o_t, s_o_n,
                   g_hi, g_lo, l_hi, l_lo, lcc_hi, lcc_lo,
                   HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                   T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                   SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    _after_previous_grid(PDL)
    if _retrace_program(R, Q, V, TE, TR, BV, NV, BEH, TGT, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_q_t,
                        s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_b_t,
                        s_b_n, s_g_t, s_g_n, s_o_t, s_o_n, g_hi, g_lo, l_hi, l_lo, lcc_hi, lcc_lo, HAS_TR,
                        HAS_NV, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD, False):
        _retrace_rows(R, Q, V, TE, TR, BV, NV, BEH, TGT, OUT, LINK_I, LINK_F, T, N, s_r_t, s_r_n, s_q_t, s_q_n,
                      s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n, s_b_t, s_b_n,
                      s_g_t, s_g_n, s_o_t, s_o_n, g_hi, g_lo, l_hi, l_lo, lcc_hi, lcc_lo, HAS_TR, HAS_NV, CT,
                      BIG, T_BLOCK, BLOCK_N, N_CHUNKS, SEG_L, SPLIT, PRELOAD, True)


@triton.jit
def _retrace_program(R, Q, V, TE, TR, BV, NV, BEH, TGT, OUT, LINK_I, LINK_F, T, N,
                     s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n,
                     s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, s_o_t, s_o_n,
                     g_hi, g_lo, l_hi, l_lo, lcc_hi, lcc_lo,
                     HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                     T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                     SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, boot = _program_columns(LINK_I, N, BV, s_bv_n, not HAS_NV, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, True)
    args = (R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_n, T, mn, s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n,
            s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n,
            _scalar(g_hi, g_lo, CT), _scalar(l_hi, l_lo, CT), _scalar(lcc_hi, lcc_lo, CT))
    # the ROWS variant and the split plans solve in the reference's form (_retrace_difference_terms): a split plan
    # composes its chunks' maps and solves a chunk that is not finite in the same form, so in the scans' form
    # an overflowing k*q[t+1] would reach its output. Only the ROWS variant keeps q[t] for its step (the split
    # plans' scans keeping it too changed their SASS at 512x2048). The ROWS variant's scan code, never run, is
    # still compiled, and its EMIT needs y_next there (NEED_NEXT).
    return _solve(_retrace_rows_load if ROWS or SPLIT else _retrace_load,
                  _retrace_rows_terms if ROWS else (_retrace_split_terms if SPLIT else _retrace_terms),
                  _emit_retrace_rows if ROWS or SPLIT else _emit_y, args, (OUT, s_o_t, s_o_n, offs_n),
                  tl.zeros([BLOCK_N], CT), T, mn, CT, BIG, HAS_TR, HAS_NV, None, T_BLOCK, N_CHUNKS, SEG_L, True,
                  ROWS or SPLIT,
                  SPLIT, c, (LINK_I, LINK_F, eb, epoch, offs_n, mn, N), PRELOAD, ROWS, None, None,
                  _retrace_rows_step if ROWS else None)


_retrace_rows = _not_inlined(_retrace_program, "_retrace_rows")


@triton.jit
def _forward_load(args, offs_t, BIG: tl.constexpr, HAS_TR: tl.constexpr, _F1: tl.constexpr, _F2: tl.constexpr):
    """Raw rows: x[t], and terminated, truncated at t-1."""
    X, TE, TR, offs_n, T, mn, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, f = args
    m = (offs_t < T)[:, None] & mn[None, :]
    mp = ((offs_t >= 1) & (offs_t <= T))[:, None] & mn[None, :]
    x = _raw(X, offs_t, offs_n, s_x_t, s_x_n, m, BIG)
    te, tr = _flags_raw(TE, TR, offs_t - 1, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, mp, HAS_TR, BIG)
    return x, te, tr


@triton.jit
def _forward_terms(args, raw, offs_t, CT: tl.constexpr, HAS_TR: tl.constexpr, _F1: tl.constexpr,
                   _F2: tl.constexpr):
    """a = x, b = f*(1-done[t-1])."""
    X, TE, TR, offs_n, T, mn, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, f = args
    x, te, tr = raw
    _tp, done_prev = _done(te, tr, HAS_TR)
    return x.to(CT), tl.where(done_prev, 0.0, f), ()


@triton.jit
def forward_kernel(X, TE, TR, INIT, OUT, LINK_I, LINK_F, T, N,
                   s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_i_n, s_o_t, s_o_n,
                   f_hi, f_lo,
                   HAS_TR: tl.constexpr, HAS_INIT: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                   T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                   SPLIT: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    """y[t] = x[t] + f*(1-done[t-1])*y[t-1], y[-1] = initial (eligibility traces, prefix sums)."""
    _after_previous_grid(PDL)
    if _forward_program(X, TE, TR, INIT, OUT, LINK_I, LINK_F, T, N, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t,
                        s_tr_n, s_i_n, s_o_t, s_o_n, f_hi, f_lo, HAS_TR, HAS_INIT, CT, BIG, T_BLOCK, BLOCK_N,
                        N_CHUNKS, SEG_L, SPLIT, PRELOAD, False):
        _forward_rows(X, TE, TR, INIT, OUT, LINK_I, LINK_F, T, N, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
                      s_i_n, s_o_t, s_o_n, f_hi, f_lo, HAS_TR, HAS_INIT, CT, BIG, T_BLOCK, BLOCK_N, N_CHUNKS,
                      SEG_L, SPLIT, PRELOAD, True)


@triton.jit
def _forward_program(X, TE, TR, INIT, OUT, LINK_I, LINK_F, T, N,
                     s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_i_n, s_o_t, s_o_n,
                     f_hi, f_lo,
                     HAS_TR: tl.constexpr, HAS_INIT: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                     T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr,
                     SPLIT: tl.constexpr, PRELOAD: tl.constexpr, ROWS: tl.constexpr):
    eb, c, epoch, offs_n, mn, carry = _program_columns(LINK_I, N, INIT, s_i_n, HAS_INIT, CT, BLOCK_N, N_CHUNKS,
                                                      SPLIT, False)
    args = (X, TE, TR, offs_n, T, mn, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, _scalar(f_hi, f_lo, CT))
    return _solve(_forward_load, _forward_terms, _emit_y, args, (OUT, s_o_t, s_o_n, offs_n), carry, T, mn, CT, BIG,
                  HAS_TR, None, None, T_BLOCK, N_CHUNKS, SEG_L, False, False, SPLIT, c,
                  (LINK_I, LINK_F, eb, epoch, offs_n, mn, N), PRELOAD, ROWS, None)


_forward_rows = _not_inlined(_forward_program, "_forward_rows")
