"""Triton JIT code only: one combine operator, one kernel per estimator.

Every estimator is a first-order linear recurrence ``y[t] = a[t] + b[t] * y[t+-1]``.
An element (a, b) is the affine map ``y -> a + b*y``; composing maps is associative,
so ``tl.associative_scan`` over the time axis of a ``[T_BLOCK, BLOCK_N]`` tile
solves the recurrence for BLOCK_N sequences at once. A program owns BLOCK_N
environments (contiguous along N, so loads/stores coalesce) and walks time in
chunks of T_BLOCK rows, and the running carry (y at the chunk edge) links
consecutive chunks. With T <= T_BLOCK the loop runs once. Coefficients are built
in registers from the raw inputs; nothing intermediate touches global memory.

Each kernel solves a chunk in one of two ways, chosen by the constexpr SEG_L:

* SEG_L == 0, tile scan: one ``tl.associative_scan`` over the [T_BLOCK, BLOCK_N]
  tile. Triton spreads the time axis over threads and warps, so the scan goes
  through shuffles and shared memory; it suits few environments (long tiles).
* SEG_L > 0, segments: warp w owns the SEG_L consecutive rows
  ``t0 + w*SEG_L + j`` of the chunk (SEG_W = T_BLOCK // SEG_L warps), one
  environment per lane. Every row j is a [SEG_W, BLOCK_N] tensor, so walking j
  is sequential inside each thread. Pass 1 composes each segment's map in
  registers, one scan across the SEG_W segments links them (``_seg_link``), and
  pass 2 walks the segment again from the values kept in registers, writing the
  outputs. The only shared-memory traffic is that one short scan; on the H200
  the tile scan was bound by it (scripts/profile_tile_scan.py).

Scalars that must be exact in float64 (gamma, lambda, log clips) arrive as a
float32 hi/lo pair (Triton passes Python floats as fp32) and are rebuilt in CT.
"""
import triton
import triton.language as tl


@triton.jit
def _combine(a_prev, b_prev, a_cur, b_cur):
    # compose y -> a_cur + b_cur * (a_prev + b_prev * y)
    return a_cur + b_cur * a_prev, b_cur * b_prev


@triton.jit
def _offs(offs_t, offs_n, s_t, s_n, BIG: tl.constexpr):
    if BIG:
        return offs_t.to(tl.int64)[:, None] * s_t + offs_n.to(tl.int64)[None, :] * s_n
    else:
        return offs_t[:, None] * s_t + offs_n[None, :] * s_n


@triton.jit
def _ld(ptr, offs_t, offs_n, s_t, s_n, mask, CT: tl.constexpr, BIG: tl.constexpr):
    return tl.load(ptr + _offs(offs_t, offs_n, s_t, s_n, BIG), mask=mask, other=0).to(CT)


@triton.jit
def _ldflag(ptr, offs_t, offs_n, s_t, s_n, mask, BIG: tl.constexpr):
    return tl.load(ptr + _offs(offs_t, offs_n, s_t, s_n, BIG), mask=mask, other=0) != 0


@triton.jit
def _row(y, offs_t, t):
    # y[t, :] as a [BLOCK_N] vector (t is inside the tile)
    return tl.sum(tl.where((offs_t == t)[:, None], y, 0.0), axis=0)


@triton.jit
def _scalar(hi, lo, CT: tl.constexpr):
    return tl.cast(hi, CT) + tl.cast(lo, CT)


@triton.jit
def _vnext(V, NV, boot, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn,
           HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """V+[t] for the rows offs_t: next_values[t], else values[t+1] / bootstrap at T-1."""
    if HAS_NV:
        vn = _ld(NV, offs_t, offs_n, s_nv_t, s_nv_n, m, CT, BIG)
    else:
        m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
        vn = _ld(V, offs_t + 1, offs_n, s_v_t, s_v_n, m1, CT, BIG)
        vn = tl.where((offs_t == T - 1)[:, None], boot[None, :], vn)
    return vn


@triton.jit
def _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m,
          HAS_TR: tl.constexpr, BIG: tl.constexpr):
    term = _ldflag(TE, offs_t, offs_n, s_te_t, s_te_n, m, BIG)
    done = term
    if HAS_TR:
        done = done | _ldflag(TR, offs_t, offs_n, s_tr_t, s_tr_n, m, BIG)
    return term, done


@triton.jit
def _combine_with_tail(a_prev, b_prev, ta_prev, tb_prev, a_cur, b_cur, ta_cur, tb_cur):
    # (a, b): the composed map of a segment, as in _combine; (ta, tb): the same segment without its
    # earliest row. Scanned in reverse, (ta, tb) at row t is the composition of rows t+1.., i.e.
    # the exclusive scan, which gives y[t+1] on row t without moving values between rows.
    return a_cur + b_cur * a_prev, b_cur * b_prev, ta_cur + tb_cur * a_prev, tb_cur * b_prev


@triton.jit
def _seg_link(ca, cb, carry, REVERSE: tl.constexpr):
    """y entering each segment row of [SEG_W, BLOCK_N] composed maps (ca, cb), given y beyond the chunk.

    The tail pair of the scan is the exclusive part: for segment w, the composition of the segments that
    the recurrence visits before it (those after w in time for a backward recurrence)."""
    _a, _b, ta, tb = tl.associative_scan((ca, cb, tl.zeros_like(ca), tl.full(ca.shape, 1, ca.dtype)), 0,
                                         _combine_with_tail, reverse=REVERSE)
    return ta + tb * carry[None, :]


@triton.jit
def _gae_terms(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn,
               s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, gl,
               HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """GAE's (a, b) = (delta, gamma*lambda*(1-done)) and values for rows offs_t, and their mask."""
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _ld(R, offs_t, offs_n, s_r_t, s_r_n, m, CT, BIG)
    v = _ld(V, offs_t, offs_n, s_v_t, s_v_n, m, CT, BIG)
    term, done = _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext(V, NV, boot, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, CT, BIG)
    delta = tl.where(term, r, r + gamma * vn) - v
    return delta, gl * (1 - done.to(CT)), v, m


@triton.jit
def gae_kernel(R, V, TE, TR, BV, NV, ADV, RET, T, N,
               s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
               s_a_t, s_a_n, s_o_t, s_o_n,
               g_hi, g_lo, gl_hi, gl_lo,
               HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
               T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    gl = _scalar(gl_hi, gl_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            a, b, v, m = _gae_terms(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n,
                                    s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, gl,
                                    HAS_TR, HAS_NV, CT, BIG)
            A, B = tl.associative_scan((a, b), 0, _combine, reverse=True)
            y = A + B * carry[None, :]
            tl.store(ADV + _offs(offs_t, offs_n, s_a_t, s_a_n, BIG), y, mask=m)
            tl.store(RET + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y + v, mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, offs_t, t0)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            Vs = ()
            for j in tl.static_range(SEG_L - 1, -1, -1):
                a, b, v, _m = _gae_terms(R, V, TE, TR, NV, boot, t0 + wi * SEG_L + j, offs_n, T, mn, s_r_t, s_r_n,
                                         s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, gl,
                                         HAS_TR, HAS_NV, CT, BIG)
                ca = a + b * ca
                cb = b * cb
                As = (a,) + As
                Bs = (b,) + Bs
                Vs = (v,) + Vs
            y = _seg_link(ca, cb, carry, True)
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                m = (offs_t < T)[:, None] & mn[None, :]
                y = As[j] + Bs[j] * y
                tl.store(ADV + _offs(offs_t, offs_n, s_a_t, s_a_n, BIG), y, mask=m)
                tl.store(RET + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y + Vs[j], mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, wi, 0)


@triton.jit
def _vtrace_terms(R, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                  s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """Per-row V-trace quantities for rows offs_t (rows >= T give zeros)."""
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _ld(R, offs_t, offs_n, s_r_t, s_r_n, m, CT, BIG)
    v = _ld(V, offs_t, offs_n, s_v_t, s_v_n, m, CT, BIG)
    term, done = _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext(V, NV, boot, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, CT, BIG)
    log_rho = _ld(TGT, offs_t, offs_n, s_g_t, s_g_n, m, CT, BIG) - _ld(BEH, offs_t, offs_n, s_b_t, s_b_n, m, CT, BIG)
    rho = tl.exp(tl.minimum(log_rho, lrc))
    c = lam * tl.exp(tl.minimum(log_rho, lcc))
    delta = tl.where(term, r, r + gamma * vn) - v
    a = rho * delta
    b = tl.where(done, 0.0, gamma * c)
    return r, v, term, done, vn, log_rho, a, b


@triton.jit
def _vtrace_pg_parts(R, V, NV, r, v, term, done, vn, log_rho, offs_t, offs_n, T, mn, s_v_t, s_v_n, gamma, lpc,
                     HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    """pg_advantages[t] = P[t] + coef[t] * Y[t+1] (Y = vs - values), split so that Y[t+1] comes last."""
    if HAS_NV:  # values[t+1]; without next_values it is V+[t] itself wherever it is used
        m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
        v1 = _ld(V, offs_t + 1, offs_n, s_v_t, s_v_n, m1, CT, BIG)
    else:
        v1 = vn
    cut = done | (offs_t == T - 1)[:, None]
    pg_rho = tl.exp(tl.minimum(log_rho, lpc))
    g = tl.where(term, 0.0, gamma)
    P = pg_rho * (r - v + g * tl.where(cut, vn, v1))
    return P, tl.where(cut, 0.0, pg_rho * g)


@triton.jit
def _pg(P, coef, Y1):
    # where coef is 0, Y[t+1] is not used at all (a non-finite Y must not leak in through 0 * inf)
    return P + tl.where(coef == 0, 0.0, coef * Y1)


@triton.jit
def vtrace_kernel(R, V, TE, TR, BV, NV, BEH, TGT, VS, PG, T, N,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                  s_b_t, s_b_n, s_g_t, s_g_n, s_vs_t, s_vs_n, s_pg_t, s_pg_n,
                  g_hi, g_lo, l_hi, l_lo, lrc_hi, lrc_lo, lcc_hi, lcc_lo, lpc_hi, lpc_lo,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                  T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    # Y[t] = vs[t] - values[t] = a[t] + b[t]*Y[t+1]; pg needs Y[t+1], which the tile scan's tail
    # (exclusive) part gives on row t, and the segment walk holds before it updates Y at row t.
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    lam = _scalar(l_hi, l_lo, CT)
    lrc = _scalar(lrc_hi, lrc_lo, CT)
    lcc = _scalar(lcc_hi, lcc_lo, CT)
    lpc = _scalar(lpc_hi, lpc_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)  # Y at the first row after the chunk
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            m = (offs_t < T)[:, None] & mn[None, :]
            r, v, term, done, vn, log_rho, a, b = _vtrace_terms(
                R, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
                s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc, HAS_TR, HAS_NV, CT, BIG)
            P, coef = _vtrace_pg_parts(R, V, NV, r, v, term, done, vn, log_rho, offs_t, offs_n, T, mn, s_v_t, s_v_n,
                                       gamma, lpc, HAS_NV, CT, BIG)
            A, B, TA, TB = tl.associative_scan((a, b, tl.zeros_like(a), tl.full(a.shape, 1, CT)), 0,
                                               _combine_with_tail, reverse=True)
            Y = A + B * carry[None, :]
            tl.store(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), v + Y, mask=m)
            tl.store(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG), _pg(P, coef, TA + TB * carry[None, :]), mask=m)
            if N_CHUNKS > 1:
                carry = _row(Y, offs_t, t0)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            Vs = ()
            Ps = ()
            Cs = ()
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                r, v, term, done, vn, log_rho, a, b = _vtrace_terms(
                    R, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
                    s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                    s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lrc, lcc, HAS_TR, HAS_NV, CT, BIG)
                P, coef = _vtrace_pg_parts(R, V, NV, r, v, term, done, vn, log_rho, offs_t, offs_n, T, mn,
                                           s_v_t, s_v_n, gamma, lpc, HAS_NV, CT, BIG)
                ca = a + b * ca
                cb = b * cb
                As = (a,) + As
                Bs = (b,) + Bs
                Vs = (v,) + Vs
                Ps = (P,) + Ps
                Cs = (coef,) + Cs
            Y = _seg_link(ca, cb, carry, True)
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                m = (offs_t < T)[:, None] & mn[None, :]
                tl.store(PG + _offs(offs_t, offs_n, s_pg_t, s_pg_n, BIG), _pg(Ps[j], Cs[j], Y), mask=m)
                Y = As[j] + Bs[j] * Y
                tl.store(VS + _offs(offs_t, offs_n, s_vs_t, s_vs_n, BIG), Vs[j] + Y, mask=m)
            if N_CHUNKS > 1:
                carry = _row(Y, wi, 0)


@triton.jit
def _lambda_terms(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn,
                  s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, lam,
                  HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _ld(R, offs_t, offs_n, s_r_t, s_r_n, m, CT, BIG)
    term, done = _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext(V, NV, boot, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, CT, BIG)
    l = tl.where(done | (offs_t == T - 1)[:, None], 0.0, lam)
    g = tl.where(term, 0.0, gamma)
    return r + g * ((1 - l) * vn), g * l, m


@triton.jit
def lambda_returns_kernel(R, V, TE, TR, BV, NV, OUT, T, N,
                          s_r_t, s_r_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                          s_o_t, s_o_n, g_hi, g_lo, l_hi, l_lo,
                          HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                          T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                          SEG_L: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    lam = _scalar(l_hi, l_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            a, b, m = _lambda_terms(R, V, TE, TR, NV, boot, offs_t, offs_n, T, mn, s_r_t, s_r_n, s_v_t, s_v_n,
                                    s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, lam,
                                    HAS_TR, HAS_NV, CT, BIG)
            A, B = tl.associative_scan((a, b), 0, _combine, reverse=True)
            y = A + B * carry[None, :]
            tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, offs_t, t0)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            for j in tl.static_range(SEG_L - 1, -1, -1):
                a, b, _m = _lambda_terms(R, V, TE, TR, NV, boot, t0 + wi * SEG_L + j, offs_n, T, mn, s_r_t, s_r_n,
                                         s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, lam,
                                         HAS_TR, HAS_NV, CT, BIG)
                ca = a + b * ca
                cb = b * cb
                As = (a,) + As
                Bs = (b,) + Bs
            y = _seg_link(ca, cb, carry, True)
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                y = As[j] + Bs[j] * y
                tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=(offs_t < T)[:, None] & mn[None, :])
            if N_CHUNKS > 1:
                carry = _row(y, wi, 0)


@triton.jit
def _discounted_terms(R, TE, TR, NV, boot, offs_t, offs_n, T, mn,
                      s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma,
                      HAS_TR: tl.constexpr, HAS_BV: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr,
                      BIG: tl.constexpr):
    m = (offs_t < T)[:, None] & mn[None, :]
    r = _ld(R, offs_t, offs_n, s_r_t, s_r_n, m, CT, BIG)
    term, done = _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    last = (offs_t == T - 1)[:, None]
    cut = done | last
    g = tl.where(term, 0.0, gamma)
    a = r
    if HAS_NV:
        nv = _ld(NV, offs_t, offs_n, s_nv_t, s_nv_n, m, CT, BIG)
        a = r + g * tl.where(cut, nv, 0.0)
    elif HAS_BV:
        a = r + g * tl.where(last, boot[None, :], 0.0)
    return a, tl.where(cut, 0.0, g), m


@triton.jit
def discounted_kernel(R, TE, TR, BV, NV, OUT, T, N,
                      s_r_t, s_r_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n, s_nv_t, s_nv_n,
                      s_o_t, s_o_n, g_hi, g_lo,
                      HAS_TR: tl.constexpr, HAS_BV: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr,
                      BIG: tl.constexpr, T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr,
                      SEG_L: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if HAS_BV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            a, b, m = _discounted_terms(R, TE, TR, NV, boot, offs_t, offs_n, T, mn, s_r_t, s_r_n, s_te_t, s_te_n,
                                        s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma, HAS_TR, HAS_BV, HAS_NV, CT, BIG)
            A, B = tl.associative_scan((a, b), 0, _combine, reverse=True)
            y = A + B * carry[None, :]
            tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, offs_t, t0)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            for j in tl.static_range(SEG_L - 1, -1, -1):
                a, b, _m = _discounted_terms(R, TE, TR, NV, boot, t0 + wi * SEG_L + j, offs_n, T, mn, s_r_t, s_r_n,
                                             s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n, gamma,
                                             HAS_TR, HAS_BV, HAS_NV, CT, BIG)
                ca = a + b * ca
                cb = b * cb
                As = (a,) + As
                Bs = (b,) + Bs
            y = _seg_link(ca, cb, carry, True)
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                y = As[j] + Bs[j] * y
                tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=(offs_t < T)[:, None] & mn[None, :])
            if N_CHUNKS > 1:
                carry = _row(y, wi, 0)


@triton.jit
def _retrace_terms(R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn,
                   s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
                   s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc,
                   HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    m = (offs_t < T)[:, None] & mn[None, :]
    m1 = ((offs_t + 1) < T)[:, None] & mn[None, :]
    r = _ld(R, offs_t, offs_n, s_r_t, s_r_n, m, CT, BIG)
    term, done = _done(TE, TR, offs_t, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, m, HAS_TR, BIG)
    vn = _vnext(V, NV, boot, offs_t, offs_n, T, s_v_t, s_v_n, s_nv_t, s_nv_n, m, mn, HAS_NV, CT, BIG)
    q1 = _ld(Q, offs_t + 1, offs_n, s_q_t, s_q_n, m1, CT, BIG)
    lr1 = _ld(TGT, offs_t + 1, offs_n, s_g_t, s_g_n, m1, CT, BIG) - _ld(BEH, offs_t + 1, offs_n, s_b_t, s_b_n, m1, CT, BIG)
    k = tl.where(done | (offs_t == T - 1)[:, None], 0.0, lam * tl.exp(tl.minimum(lr1, lcc)))
    g = tl.where(term, 0.0, gamma)
    return r + g * (vn - k * q1), g * k, m


@triton.jit
def retrace_kernel(R, Q, V, TE, TR, BV, NV, BEH, TGT, OUT, T, N,
                   s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_bv_n,
                   s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, s_o_t, s_o_n,
                   g_hi, g_lo, l_hi, l_lo, lcc_hi, lcc_lo,
                   HAS_TR: tl.constexpr, HAS_NV: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                   T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    gamma = _scalar(g_hi, g_lo, CT)
    lam = _scalar(l_hi, l_lo, CT)
    lcc = _scalar(lcc_hi, lcc_lo, CT)
    boot = tl.zeros([BLOCK_N], CT)
    if not HAS_NV:
        boot = tl.load(BV + offs_n * s_bv_n, mask=mn, other=0).to(CT)
    carry = tl.zeros([BLOCK_N], CT)
    for i in range(N_CHUNKS):
        t0 = (N_CHUNKS - 1 - i) * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            a, b, m = _retrace_terms(R, Q, V, TE, TR, NV, BEH, TGT, boot, offs_t, offs_n, T, mn, s_r_t, s_r_n,
                                     s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_nv_t, s_nv_n,
                                     s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc, HAS_TR, HAS_NV, CT, BIG)
            A, B = tl.associative_scan((a, b), 0, _combine, reverse=True)
            y = A + B * carry[None, :]
            tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, offs_t, t0)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            for j in tl.static_range(SEG_L - 1, -1, -1):
                a, b, _m = _retrace_terms(R, Q, V, TE, TR, NV, BEH, TGT, boot, t0 + wi * SEG_L + j, offs_n, T, mn,
                                          s_r_t, s_r_n, s_q_t, s_q_n, s_v_t, s_v_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
                                          s_nv_t, s_nv_n, s_b_t, s_b_n, s_g_t, s_g_n, gamma, lam, lcc,
                                          HAS_TR, HAS_NV, CT, BIG)
                ca = a + b * ca
                cb = b * cb
                As = (a,) + As
                Bs = (b,) + Bs
            y = _seg_link(ca, cb, carry, True)
            for j in tl.static_range(SEG_L - 1, -1, -1):
                offs_t = t0 + wi * SEG_L + j
                y = As[j] + Bs[j] * y
                tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=(offs_t < T)[:, None] & mn[None, :])
            if N_CHUNKS > 1:
                carry = _row(y, wi, 0)


@triton.jit
def _forward_terms(X, TE, TR, offs_t, offs_n, T, mn, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, f,
                   HAS_TR: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr):
    m = (offs_t < T)[:, None] & mn[None, :]
    mp = ((offs_t >= 1) & (offs_t <= T))[:, None] & mn[None, :]
    x = _ld(X, offs_t, offs_n, s_x_t, s_x_n, m, CT, BIG)
    _tp, done_prev = _done(TE, TR, offs_t - 1, offs_n, s_te_t, s_te_n, s_tr_t, s_tr_n, mp, HAS_TR, BIG)
    return x, tl.where(done_prev, 0.0, f), m


@triton.jit
def forward_kernel(X, TE, TR, INIT, OUT, T, N,
                   s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n, s_i_n, s_o_t, s_o_n,
                   f_hi, f_lo,
                   HAS_TR: tl.constexpr, HAS_INIT: tl.constexpr, CT: tl.constexpr, BIG: tl.constexpr,
                   T_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, N_CHUNKS: tl.constexpr, SEG_L: tl.constexpr):
    """y[t] = x[t] + f*(1-done[t-1])*y[t-1], y[-1] = initial (eligibility traces, prefix sums)."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = offs_n < N
    f = _scalar(f_hi, f_lo, CT)
    carry = tl.zeros([BLOCK_N], CT)
    if HAS_INIT:
        carry = tl.load(INIT + offs_n * s_i_n, mask=mn, other=0).to(CT)
    for i in range(N_CHUNKS):
        t0 = i * T_BLOCK
        if SEG_L == 0:
            offs_t = t0 + tl.arange(0, T_BLOCK)
            x, b, m = _forward_terms(X, TE, TR, offs_t, offs_n, T, mn, s_x_t, s_x_n, s_te_t, s_te_n, s_tr_t, s_tr_n,
                                     f, HAS_TR, CT, BIG)
            A, B = tl.associative_scan((x, b), 0, _combine)
            y = A + B * carry[None, :]
            tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=m)
            if N_CHUNKS > 1:
                carry = _row(y, offs_t, t0 + T_BLOCK - 1)
        else:
            wi = tl.arange(0, T_BLOCK // SEG_L)
            ca = tl.zeros([T_BLOCK // SEG_L, BLOCK_N], CT)
            cb = tl.full([T_BLOCK // SEG_L, BLOCK_N], 1, CT)
            As = ()
            Bs = ()
            for j in tl.static_range(SEG_L):
                x, b, _m = _forward_terms(X, TE, TR, t0 + wi * SEG_L + j, offs_n, T, mn, s_x_t, s_x_n,
                                          s_te_t, s_te_n, s_tr_t, s_tr_n, f, HAS_TR, CT, BIG)
                ca = x + b * ca
                cb = b * cb
                As = As + (x,)
                Bs = Bs + (b,)
            y = _seg_link(ca, cb, carry, False)
            for j in tl.static_range(SEG_L):
                offs_t = t0 + wi * SEG_L + j
                y = As[j] + Bs[j] * y
                tl.store(OUT + _offs(offs_t, offs_n, s_o_t, s_o_n, BIG), y, mask=(offs_t < T)[:, None] & mn[None, :])
            if N_CHUNKS > 1:
                carry = _row(y, wi, T_BLOCK // SEG_L - 1)
