"""Volatility-surface evaluation on an (expiry x strike) grid of Black vols, as a Triton kernel.

The grid is small (tens to a few hundred points a side) and shared by every query, so each
program locates its queries by counting the grid points at or below them (a loop over the grid
that every lane of the program runs together, reading the same grid value: one broadcast load per
step, no divergence) and then gathers the four corner vols. The work per query is a few dozen
flops; the kernel is bound by reading the queries and writing the results.

Float64 only, like the CPU surface (csrc/cpu/surface.c), whose conventions this kernel follows
operation for operation so that both backends agree to rounding. The grid's validity (strictly
increasing strikes and positive expiries, finite non-negative vols, nk >= 1, nt >= 1) is checked
on the host before launch.

This module imports Triton; only the bundle builder and the tests import it.
"""
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice


@triton.jit
def vol_surface_kernel(
    strikes_ptr, expiries_ptr, vols_ptr, nk, nt, mode,
    strike_ptr, s_strike,
    t_ptr, s_t,
    out_ptr, what,
    n,
    BLOCK_SIZE: tl.constexpr,
):
    """Vol or total variance of a surface at ``n`` (strike, t) queries.

    Parameters (in launch order)
    ----------------------------
    strikes_ptr : pointer to fp64
        ``nk`` strictly increasing strikes.
    expiries_ptr : pointer to fp64
        ``nt`` strictly increasing expiries, in years, all > 0.
    vols_ptr : pointer to fp64
        Black vols, row-major ``vols[it * nk + ik]`` (one row per expiry).
    nk, nt : int32
        Grid sizes, both >= 1.
    mode : int32
        0: bilinear in total variance sigma^2 t over (t, K) on the grid augmented with a row of
        zero variance at t = 0 (QuantLib's BlackVarianceSurface): before the first expiry the
        variance is linear in t, beyond the last it is w(T_last, K) t / T_last (flat vol).
        1: bilinear in vol, flat in t outside [T_first, T_last].
        Both are flat in strike outside [K_first, K_last].
    strike_ptr, t_ptr : pointer to fp64
        Query strikes and times (years).
    s_strike, s_t : int32
        Element strides of the queries, 1 or 0 (broadcast one value).
    out_ptr : pointer to fp64
        ``n`` contiguous results.
    what : int32
        0: vol (per sqrt(year)); 1: total variance sigma^2 t.
    n : int32
        Number of queries; the grid is ``ceil(n / BLOCK_SIZE)`` programs.

    Bad input: a query with a non-finite strike or t, or t < 0, gives NaN. At t == 0 the variance
    is 0 and the vol is its limit as t -> 0 (in mode 0 the first expiry's vol at that strike).
    """
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n

    k = tl.load(strike_ptr + offs * s_strike, mask=mask, other=1.0)
    t = tl.load(t_ptr + offs * s_t, mask=mask, other=1.0)
    inf = float("inf")
    valid = (tl.abs(k) < inf) & (t >= 0) & (t < inf)
    k = tl.where(valid, k, 0.0)
    t = tl.where(valid, t, 0.0)

    # Count the grid points at or below each query: that count locates its interval. (While loops
    # rather than range(nk): the Triton interpreter cannot take a run-time bound in range() under
    # NumPy 2; the compiled loop is the same.)
    nk_le = tl.full([BLOCK_SIZE], 0, dtype=tl.int32)
    ik = 0
    while ik < nk:
        nk_le += (tl.load(strikes_ptr + ik) <= k).to(tl.int32)
        ik += 1
    nt_le = tl.full([BLOCK_SIZE], 0, dtype=tl.int32)
    it = 0
    while it < nt:
        nt_le += (tl.load(expiries_ptr + it) <= t).to(tl.int32)
        it += 1

    # Strike column j and weight u: the row's value at k is (1 - u) row[j] + u row[j + 1].
    k_first = tl.load(strikes_ptr)
    k_last = tl.load(strikes_ptr + (nk - 1))
    j = tl.minimum(tl.maximum(nk_le - 1, 0), tl.maximum(nk - 2, 0))
    j1 = tl.minimum(j + 1, nk - 1)
    k_j = tl.load(strikes_ptr + j)
    k_j1 = tl.load(strikes_ptr + j1)
    interior_k = (k > k_first) & (k < k_last)
    span = tl.where(interior_k, k_j1 - k_j, 1.0)
    # Strikes of both signs near +-DBL_MAX: the span (and k - k_j with it) overflows; halved,
    # both differences are finite (as the CPU backend, csrc/cpu/surface.c).
    u = tl.where(span < inf, (k - k_j) / span, (0.5 * k - 0.5 * k_j) / (0.5 * k_j1 - 0.5 * k_j))
    u = tl.where(interior_k, u, 0.0)
    u = tl.where((k >= k_last) & (nk > 1), 1.0, u)

    # Expiry rows i0 <= i1 bracketing t; i1 is the last row from T_last on, i0 row 0 up to T_first.
    t_first = tl.load(expiries_ptr)
    t_last = tl.load(expiries_ptr + (nt - 1))
    i0 = tl.minimum(tl.maximum(nt_le - 1, 0), tl.maximum(nt - 2, 0))
    i1 = tl.minimum(i0 + 1, nt - 1)
    T0 = tl.load(expiries_ptr + i0)
    T1 = tl.load(expiries_ptr + i1)
    interior_t = (t > t_first) & (t < t_last)
    v = tl.where(interior_t, (t - T0) / tl.where(interior_t, T1 - T0, 1.0), 0.0)

    # The four corner vols; with nk == 1 both columns are column 0 (u is 0 then).
    a00 = tl.load(vols_ptr + i0 * nk + j)
    a01 = tl.load(vols_ptr + i0 * nk + j1)
    a10 = tl.load(vols_ptr + i1 * nk + j)
    a11 = tl.load(vols_ptr + i1 * nk + j1)

    # Mode 0: total variance, linear in strike along each row, then linear in t.
    # One strike: the row's own variance (not 0 * inf where sigma^2 T overflows), as the CPU.
    w0 = tl.where(nk == 1, a00 * a00 * T0, (1.0 - u) * (a00 * a00 * T0) + u * (a01 * a01 * T0))
    w1 = tl.where(nk == 1, a10 * a10 * T1, (1.0 - u) * (a10 * a10 * T1) + u * (a11 * a11 * T1))
    var_first = tl.where(t <= t_first, w0, w1)      # row 0's variance when t <= t_first
    var0 = (1.0 - v) * w0 + v * w1
    # From the last expiry on (row i1): w(T_last) t / T_last, exactly w(T_last) at T_last; where
    # w t overflows (a huge t) and w (t / T_last) does not, the latter (w > 0 there: no 0 x inf).
    wt = w1 * t / t_last
    wt = tl.where(wt == inf, w1 * (t / t_last), wt)
    var0 = tl.where(t >= t_last, tl.where(t == t_last, w1, wt), var0)
    # Before the first expiry: the implicit zero row at t = 0 makes the variance linear in t.
    var0 = tl.where((t <= t_first) & (t < t_last), var_first * (t / t_first), var0)
    # Up to the first expiry the vol is the first row's for every t (and its limit at t = 0),
    # taken from that row: from w(t) / t it would carry w's rounding, and for a subnormal t
    # (w(t) underflowing) come out 0.
    after = t > t_first
    vol0 = tl.where(after, libdevice.sqrt(var0 / tl.where(after, t, 1.0)), libdevice.sqrt(var_first / t_first))
    # Beyond the last expiry the vol is flat, the last row's: where w(t) overflowed it is taken from
    # that row directly (elsewhere as w / t, bit for bit the CPU's).
    vol0 = tl.where((vol0 == inf) & (t > t_last), libdevice.sqrt(w1 / t_last), vol0)

    # Mode 1: vol, linear in strike along each row, then linear in t.
    s0 = (1.0 - u) * a00 + u * a01
    s1 = (1.0 - u) * a10 + u * a11
    vol1 = tl.where(t >= t_last, s1, tl.where(t <= t_first, s0, (1.0 - v) * s0 + v * s1))
    var1 = vol1 * vol1 * t

    out = tl.where(mode == 0, tl.where(what == 0, vol0, var0), tl.where(what == 0, vol1, var1))
    out = tl.where(valid, out, float("nan"))
    tl.store(out_ptr + offs, out, mask=mask)
