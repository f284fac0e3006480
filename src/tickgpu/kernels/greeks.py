"""Black-Scholes-Merton price and greeks, fused in one Triton kernel.

One program handles a tile of ``BLOCK_SIZE`` consecutive options: it reads each of the seven inputs
once, computes the price and the nine greeks in registers and writes each of the ten outputs once,
so a large chain costs one pass over memory. The runtime launches ``ceil(n / BLOCK_SIZE)``
programs; compiled with PERSISTENT, any grid (say a few programs per SM) steps through the tiles.

At 1e8 options the kernel needs more issue slots than the memory system needs time (float32: ~500
instructions per option before these changes against a copy-bandwidth budget of ~1.5 ms; float64
also ~385 DP operations per option against the H200's 64 DP lanes per SM), so what counts is the
instruction count per option. What the code does for it, each checked in the SASS
(``cuobjdump -sass``; scripts/kernel-sweep prints the counts):

* In float32 each input's stride (0: one value for the whole chain, 1: contiguous) is a branch,
  not a multiplier: ``ptr + offs * stride`` hides the contiguity from the compiler, which then
  issues one 4-byte load per element; with the branch the contiguous case of the aligned16
  variants is vector loads (LDG.E.64 at 2 float32 per thread), like the stores. float64's variants
  load one element a thread either way, so there the stride is a multiplier: three instructions an
  input instead of a dozen (measured settled on the H200, benchmarks/results/h200-2026-12-01-d:
  1.3% faster in float64; the multiplier in float32 was 1.3% slower).
* Options that are bad input or at zero total variance are rare and need the limit formulas and
  twenty selects; a tile with none (nearly always) takes a branch that computes the general
  formulas only (FAST_PATH: float32 ~360 instructions per option instead of ~500, float64 ~330 DP
  operations instead of ~385). The branch costs a block-wide OR: shared memory and two barriers
  for a block of several warps, a warp reduction alone for float64's tiles of one warp
  (tickgpu.kernels.build says why those).
  Which tile may take it is judged by ranges that imply validity (`_fast_ok`: S, K, t and sigma
  each between two powers of two, tested on the word holding the sign and exponent, one
  subtraction and one unsigned comparison each, plus |r t| and |q t|); the special path sorts
  bad input, limits and extreme magnitudes apart itself. That took the float64 kernel's code
  before the branch from 388 to 315 instructions (float32: 282 to 224 for two options), where
  the float comparisons of validity, limit and magnitude had compiled to 64-bit integer
  compares.
* float64's normal CDFs come from a table erfcx (tickgpu.kernels.erfcx: 18 DP operations, against
  92 for libdevice's erfcx and 63 for its erfc) times exp(-d^2/2) (CDF=2), which takes the
  general formulas to ~240 DP operations an option. At 1e8 options back to back the board
  settles at its 700 W limit (SM clock ~1.5 GHz) after about a second. Measured there on the H200
  (benchmarks/results/h200-2026-12-01-b: blocks of 1.5 s after 1.5 s, in both orders), launches
  ran at 3.42 TB/s, against 3.31 TB/s with libdevice's erfcx and erfc (CDF=1) and 3.20-3.22 TB/s
  with erfc alone (CDF=0): 3.5% and 6% faster. Single launches, and blocks short of a second,
  do not separate the forms: they swing with the board's power controller.
* d2's exponential is d1's times the forward ratio F/K (d1^2 - d2^2 = 2 ln(F/K)), with
  e^{-qt} = e^{-rt} e^{(r-q)t} so that F/K = (S/K) e^{(r-q)t} costs one multiplication: an exp
  fewer, ~21 fewer DP operations an option (CDF=3). It needs exp(-d1^2/2) to be a normal number
  and e^{-rt}, e^{(r-q)t} finite, so a tile with some |d1| > 37.5 or |r t|, |(r - q) t| > 700
  computes as CDF=2; the same block-wide OR as the fast path's finds such tiles. Settled at the power limit on the H200
  (benchmarks/results/h200-2026-12-01-c, blocks of 1.5 s after 1.5 s, in both orders) launches
  took 3.777-3.799 ms against 3.888-3.905 ms for CDF=2: 2.9% faster. A single uniform branch for
  "every input contiguous" in place of one branch per input (~70 fewer instructions an option)
  measured 0.5% faster in float64 and 5.6% slower in float32, so float32's loads keep their
  branches (float64's now multiply the stride, see above);
  two options a thread (256 / 4 warps or 128 / 2 warps, 96 or 128 registers) measured 3-12%
  slower.
* Divisions are few: 1/(sigma sqrt t), ln(S/K)'s, and gamma's 1/S; 1/sigma, sigma/sqrt(t) and
  1/(2t) are formed from the reciprocal at hand. In float64, 1/(sigma sqrt t) and gamma's 1/S are
  the hardware's reciprocal estimate and two Newton steps (`_recip`: 5 instructions, where the
  IEEE division takes ~14 with its rounding correction and slow-path check), valid where the fast
  path's ranges hold; the special path judges the zero-variance limit by the IEEE reciprocal, as
  the CPU does. S/K stays an IEEE division: it must be exactly 1 at the money. (All three from the
  estimate measured 2.4% faster settled on the H200, benchmarks/results/h200-2026-12-01-d, but
  put ~15% of at-the-money options an ulp off the money.) Each replaced division moves a result by
  an ulp or two, far inside the 1e-12 (float64) / 1e-5 (float32) agreement with the CPU backend.
* Inputs are read once and outputs written once. STREAM marks the loads evict-first and the stores
  streaming (.cs); measured on the H200 (scripts/kernel-sweep, 1e8 options) it was slower (float32
  88.2% of copy bandwidth with it, 90.8% without; float64 62.3% vs 65.6%), so it is off by default.
  A broadcast input (stride 0) is read by every program and keeps the default policy.

The same source is compiled for float32 and float64: the element type comes from the pointer types
of the signature (``*fp32`` or ``*fp64``), and every transcendental function goes to libdevice
(``__nv_expf`` / ``__nv_exp``, ``__nv_erfcf`` / ``__nv_erfc``, ...), whose float32 versions keep
their stated accuracy over the whole argument range (Triton's own ``tl.exp`` in float32 is the
hardware approximation, whose relative error grows with the argument).

This module imports Triton; only the bundle builder (``tickgpu.kernels.build``), the tests and
scripts/kernel-sweep import it. The runtime launches the compiled cubins and never imports this
file.
"""
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from tickgpu.kernels import erfcx as _erfcx

# Module-level constexprs keep their full float64 value: a float literal assigned inside a kernel
# body can be materialised as a float32 constant first.
INV_SQRT_2PI = tl.constexpr(0.398942280401432677939946059934)
INV_SQRT_2 = tl.constexpr(0.707106781186547524400844362105)
#: erfcx of two arguments from a table of polynomials, as inline PTX carrying its table
#: (tickgpu.kernels.erfcx).
ERFCX2_PTX = tl.constexpr(_erfcx.ptx(2))
#: CDF 3: up to this |d1|, exp(-d1^2/2) >= exp(-703.2) ~ 4e-306 is a normal float64 number.
NEAR_D1 = tl.constexpr(37.5)
#: Magnitudes the general formulas need no care for, shared by the fast path's test (`_fast_ok`)
#: and the special path's `extreme`: S, K within 2^-MAG_LOG2 .. 2^MAG_LOG2; |r t|, |q t| up to
#: RT_MAX (float32: RT_MAX_F32); t from 2^T_MIN_LOG2 (float32: 2^T_MIN_LOG2_F32).
MAG_LOG2 = tl.constexpr(50)
RT_MAX = tl.constexpr(350.0)
RT_MAX_F32 = tl.constexpr(40.0)
T_MIN_LOG2 = tl.constexpr(-1000)
T_MIN_LOG2_F32 = tl.constexpr(-100)


@triton.jit
def _load_input(ptr, stride, offs, mask, other, STREAM: tl.constexpr, SCALAR: tl.constexpr):
    """The tile's values of one input of element stride 0 or 1 (see the module docstring).
    SCALAR: the loads are one element a thread whatever the stride (float64's variants)."""
    if SCALAR:
        # No vector load to lose: the stride's multiplication costs an instruction where the
        # branch costs a dozen.
        if STREAM:
            x = tl.load(ptr + offs * stride, mask=mask, other=other, eviction_policy="evict_first")
        else:
            x = tl.load(ptr + offs * stride, mask=mask, other=other)
    elif stride == 0:
        # Every lane reads element 0; the hardware serves a warp's identical addresses at once.
        x = tl.load(ptr + offs * 0, mask=mask, other=other)
    else:
        if STREAM:
            x = tl.load(ptr + offs, mask=mask, other=other, eviction_policy="evict_first")
        else:
            x = tl.load(ptr + offs, mask=mask, other=other)
    return x


@triton.jit
def _store_output(ptr, offs, value, mask, STREAM: tl.constexpr):
    if STREAM:
        tl.store(ptr + offs, value, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptr + offs, value, mask=mask)


@triton.jit
def _store_greeks(price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr, phi_ptr, vanna_ptr, volga_ptr,
                  charm_ptr, offs, mask, STREAM: tl.constexpr,
                  price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm):
    # Outputs are contiguous: with 16-byte aligned pointers and n % 16 == 0 (the aligned16
    # variants) and two or more elements per thread these are vector stores.
    _store_output(price_ptr, offs, price, mask, STREAM)
    _store_output(delta_ptr, offs, delta, mask, STREAM)
    _store_output(gamma_ptr, offs, gamma, mask, STREAM)
    _store_output(vega_ptr, offs, vega, mask, STREAM)
    _store_output(theta_ptr, offs, theta, mask, STREAM)
    _store_output(rho_ptr, offs, rho, mask, STREAM)
    _store_output(phi_ptr, offs, phi, mask, STREAM)
    _store_output(vanna_ptr, offs, vanna, mask, STREAM)
    _store_output(volga_ptr, offs, volga, mask, STREAM)
    _store_output(charm_ptr, offs, charm, mask, STREAM)


@triton.jit
def _either(a, b):
    return a | b


@triton.jit
def _rcp_seed(x):
    """The hardware's float64 reciprocal estimate (MUFU.RCP64H, from the top 32 bits of x: some 20
    bits; inf and 0 for a subnormal or huge x, which flush)."""
    return tl.inline_asm_elementwise("rcp.approx.ftz.f64 $0, $1;", "=d,d", [x], dtype=tl.float64, is_pure=True,
                                     pack=1)


@triton.jit
def _recip(x):
    """1/x to about an ulp for x with a normal reciprocal (|x| in [2^-1022, 2^1022]): the
    estimate, a cubic then a Newton step (an error of 2^-20 goes to 2^-60, then to the rounding). The IEEE
    division also corrects the last rounding and checks for its slow path: ~14 instructions
    against these 5. float32 keeps its division."""
    if x.dtype == tl.float64:
        r = _rcp_seed(x)
        e = tl.fma(-x, r, 1.0)
        r = tl.fma(r, tl.fma(e, e, e), r)
        r = tl.fma(r, tl.fma(-x, r, 1.0), r)
    else:
        r = 1.0 / x
    return r


@triton.jit
def _ratio(a, b):
    """a / b: in float64 a times `_recip(b)` (an ulp or two, b as there), in float32 a division."""
    if b.dtype == tl.float64:
        q = a * _recip(b)
    else:
        q = a / b
    return q


@triton.jit
def _log_moneyness(S, K, SK):
    """ln(S/K) given SK = S / K, for S and K in [2^-50, 2^50] and, in float32, S/K >= 1/16
    (others take the special path)."""
    if S.dtype == tl.float32:
        # log1p((S - K)/K), as the CPU backend near the money: S - K is exact there and the log
        # keeps its relative accuracy, where log(S / K) would carry the rounding of S / K (an
        # absolute error of an ulp of 1, amplified by 1/(sigma sqrt t): visible in float32
        # vanna). Above 2, (S - K)/K is S/K - 1 to an ulp; below 1/2 it rounds towards -1, by
        # 2^-24 / (S/K) in the log at most: 2^-20 at the 1/16 that the special path starts at.
        lm = libdevice.log1p((S - K) / K)
    else:
        # In float64 that ulp of 1 (2.2e-16) is far below the 1e-12 agreement, and libdevice's
        # log1p costs twice log's 30 float64 operations.
        lm = libdevice.log(SK)
    return lm


@triton.jit
def _log_moneyness_cpu(S, K):
    """ln(S/K) exactly as the CPU backend forms it (csrc/cpu/greeks_kernel.h), for any S, K > 0:
    log1p((S - K)/K) for S/K in (1/2, 2), log(S/K) in (2^-100, 2^100), else log S - log K."""
    ratio = S / K
    lm = tl.where((ratio > 0.5) & (ratio < 2.0), libdevice.log1p((S - K) / K), libdevice.log(ratio))
    far = ~((ratio > 2.0**-100) & (ratio < 2.0**100))
    return tl.where(far, libdevice.log(S) - libdevice.log(K), lm)


@triton.jit
def _dm(lm, t, r, q, inv_sst):
    """(ln(S/K) + (r - q) t) / (sigma sqrt t): d1 = dm + sigma sqrt(t) / 2, d2 = dm - that (each
    from the shared part, as the CPU backend: d2 = d1 - sigma sqrt t would be inf - inf where
    sigma sqrt t overflows)."""
    return (lm + (r - q) * t) * inv_sst


@triton.jit
def _d1(S, K, t, r, q, sst, inv_sst):
    """d1 = (ln(S/K) + (r - q) t) / (sigma sqrt t) + sigma sqrt(t) / 2."""
    return _dm(_log_moneyness(S, K, S / K), t, r, q, inv_sst) + 0.5 * sst


@triton.jit
def _half_erfc(z, e):
    """erfc(z) / 2 given e = exp(-z^2): erfcx(|z|) e / 2 for z >= 0, 1 - that for z < 0."""
    a = 0.5 * libdevice.erfcx(tl.abs(z)) * e
    return tl.where(z >= 0, a, 1.0 - a)


@triton.jit
def _erfcx_table2(x1, x2):
    """float64 (erfcx(x1), erfcx(x2)) for x >= 0, each to about an ulp in 18 float64 operations
    (tickgpu.kernels.erfcx); NaN reads as 0."""
    return tl.inline_asm_elementwise(ERFCX2_PTX, "=d,=d,d,d", [x1, x2], dtype=(tl.float64, tl.float64),
                                     is_pure=True, pack=1)


@triton.jit
def _density_exp(d):
    """exp(-d^2 / 2), with the rounding of d^2 taken back out: d d = h + l exactly, and
    exp(-h/2) (1 - l/2) is what erfc does inside (the rounding is amplified by h in the tails).
    Where d^2 overflows (|d| > 1.3e154), h = inf and l = -inf: the result is exp's 0, not the
    NaN of inf * 0."""
    h = d * d
    l = tl.fma(d, d, -h)
    e = libdevice.exp(-0.5 * h)
    return tl.where(e > 0, tl.fma(-0.5 * l, e, e), e)


@triton.jit
def _bsm_general(S, K, t, r, sig, q, w, sqt, sst, inv_sst, CDF: tl.constexpr, NEAR: tl.constexpr,
                 CAREFUL: tl.constexpr, FULL: tl.constexpr, extreme):
    """Price and greeks by the closed forms, for sigma sqrt(t) > 0 with a finite reciprocal and
    S e^{-qt}, K e^{-rt} normal numbers (the special path selects NaN where they are not).

    CDF picks how float64 forms N(w d1) and N(w d2) (see bsm_greeks_kernel). NEAR (CDF 3): every
    option of the tile has |d1| <= NEAR_D1, so exp(-d1^2/2) is a normal number and d2's
    exponential is formed from it. CAREFUL: the density terms of vanna, volga and charm are 0
    where the density has underflowed (not 0 * inf = NaN where d1 or d2 is infinite), as on the
    CPU; a NEAR tile needs no such care. FULL: ln(S/K) as the CPU forms it where `extreme`.
    """
    if CDF == 3 and S.dtype == tl.float64 and NEAR:
        # e^{-qt} = e^{-rt} e^{(r-q)t}: the forward ratio F/K = (S/K) e^{(r-q)t} comes with it
        # (|r t|, |q t| <= 350 outside the special path, so neither factor overflows).
        Dr = libdevice.exp(-r * t)
        E = libdevice.exp((r - q) * t)
        Dq = Dr * E
    else:
        Dq = libdevice.exp(-q * t)
        Dr = libdevice.exp(-r * t)
    # IEEE: S / K is exactly 1 at the money, where S times a reciprocal of K may not be (for
    # ~15% of strikes it is 1 - 2^-53, which moves ln(S/K) off 0 and an option at expiry off the money).
    SK = S / K
    lm = _log_moneyness(S, K, SK)
    if FULL:
        lm = tl.where(extreme, _log_moneyness_cpu(S, K), lm)
    dm = _dm(lm, t, r, q, inv_sst)
    half_sst = 0.5 * sst
    d1 = dm + half_sst
    d2 = dm - half_sst
    SDq = S * Dq
    KDr = K * Dr
    if (CDF == 2 or CDF == 3) and S.dtype == tl.float64:
        # erfc(z) = erfcx(|z|) exp(-z^2) for z >= 0, and z^2 = d^2 / 2: N(w d1) takes the
        # density's exponential, and erfcx comes from the table. N(w d2) takes an exponential of
        # its own, or (CDF 3, near the money) d1's times F/K, since d1^2 - d2^2 = 2 ln(F/K): two
        # multiplications for an exp.
        e1 = _density_exp(d1)
        pdf = INV_SQRT_2PI * e1
        z1 = -w * d1 * INV_SQRT_2
        z2 = -w * d2 * INV_SQRT_2
        x1, x2 = _erfcx_table2(tl.abs(z1), tl.abs(z2))
        a1 = 0.5 * x1 * e1
        if CDF == 3 and NEAR:
            a2 = 0.5 * x2 * (e1 * (SK * E))
        else:
            a2 = 0.5 * x2 * _density_exp(d2)
        Nd1 = tl.where(z1 >= 0, a1, 1.0 - a1)
        Nd2 = tl.where(z2 >= 0, a2, 1.0 - a2)
    elif CDF == 1 and S.dtype == tl.float64:
        # As CDF 2 for N(w d1), with libdevice's erfcx; N(w d2) from libdevice's erfc.
        e1 = _density_exp(d1)
        pdf = INV_SQRT_2PI * e1
        Nd1 = _half_erfc(-w * d1 * INV_SQRT_2, e1)
        Nd2 = 0.5 * libdevice.erfc(-w * d2 * INV_SQRT_2)
    else:
        # N(w d) through erfc: no 1 - N cancellation in either tail.
        Nd1 = 0.5 * libdevice.erfc(-w * d1 * INV_SQRT_2)
        Nd2 = 0.5 * libdevice.erfc(-w * d2 * INV_SQRT_2)
        pdf = INV_SQRT_2PI * libdevice.exp(-0.5 * d1 * d1)
    SDq_N1 = SDq * Nd1
    KDr_N2 = KDr * Nd2
    Dq_pdf = Dq * pdf
    SDq_pdf = SDq * pdf
    vega = SDq_pdf * sqt
    # 1/sigma and 1/sqrt(t) from 1/(sigma sqrt t): two multiplications instead of two divisions.
    inv_sig = sqt * inv_sst
    inv_sqt = sig * inv_sst

    price = w * (SDq_N1 - KDr_N2)
    # Far out of the money the legs are tails of a few ulps each: never a negative price, nor -0.0 (as the CPU).
    price = tl.where(price <= 0.0, 0.0, price)
    delta = w * Dq * Nd1
    if FULL:
        # An extreme S may be subnormal, whose reciprocal estimate flushes.
        gamma = tl.where(extreme, Dq_pdf * inv_sst / S, _ratio(Dq_pdf * inv_sst, S))
    else:
        gamma = _ratio(Dq_pdf * inv_sst, S)
    theta = -0.5 * SDq_pdf * sig * inv_sqt + w * (q * SDq_N1 - r * KDr_N2)
    rho = w * t * KDr_N2
    phi = -w * t * SDq_N1
    vanna = -Dq_pdf * d2 * inv_sig
    volga = vega * d1 * d2 * inv_sig
    charm_density = Dq_pdf * (2.0 * (r - q) * t - d2 * sst) * inv_sst * (0.5 * inv_sqt * inv_sqt)
    if FULL:
        # 1/(2t) as the CPU forms it, where 1/sqrt(t)^2 may overflow (a subnormal t)
        charm_slow = Dq_pdf * (2.0 * (r - q) * t - d2 * sst) * inv_sst / (2.0 * t)
        charm_density = tl.where(extreme, charm_slow, charm_density)
    if CAREFUL:
        # The density decays faster than any power of d1, d2, 1/sigma or sigma sqrt t grows.
        dense = pdf > 0
        vanna = tl.where(dense, vanna, 0.0)
        volga = tl.where(dense, volga, 0.0)
        charm_density = tl.where(dense, charm_density, 0.0)
    charm = w * q * Dq * Nd1 - charm_density
    return price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm


@triton.jit
def _between(x, LO: tl.constexpr, HI: tl.constexpr):
    """2^LO <= x < 2^HI (false for NaN, infinities, zero and negatives), from the bits: one
    subtraction and one unsigned comparison of the word holding the sign and the exponent (where
    the float comparisons would take four, or in float64 a dozen integer operations)."""
    if x.dtype == tl.float64:
        h = (x.to(tl.uint64, bitcast=True) >> 32).to(tl.uint32)
        lo = (1023 + LO) << 20
        span = (HI - LO) << 20
    else:
        h = x.to(tl.uint32, bitcast=True)
        lo = (127 + LO) << 23
        span = (HI - LO) << 23
    return (h - lo) < span


@triton.jit
def _fast_ok(S, K, t, r, sig, q):
    """Whether an option lies where the general formulas need no care: S and K in [2^-50, 2^50)
    (S/K normal, its log accurate; in float32 also S >= K/16, see _log_moneyness), |r t| and
    |q t| <= 350 (float32: 40; S e^{-qt}, K e^{-rt} normal numbers, e^{(r-q)t} finite), t in
    [2^-1000, 2^1000) and sigma in [2^-500, 2^500) (float32: 2^-100, 2^100, 2^-60, 2^60; so
    sigma sqrt(t) and its reciprocal are normal numbers and charm's 1/sqrt(t)^2 finite).

    Such an option is valid and not at the limit of zero total variance; every other option (none
    in any real chain) takes the special path, which sorts bad input, limits and extreme
    magnitudes apart. NaN fails every test."""
    ok = _between(S, -MAG_LOG2, MAG_LOG2) & _between(K, -MAG_LOG2, MAG_LOG2)
    if S.dtype == tl.float32:
        ok = ok & _between(t, T_MIN_LOG2_F32, -T_MIN_LOG2_F32) & _between(sig, -60, 60)
        ok = ok & (tl.abs(r * t) <= RT_MAX_F32) & (tl.abs(q * t) <= RT_MAX_F32) & (S >= 0.0625 * K)
    else:
        ok = ok & _between(t, T_MIN_LOG2, -T_MIN_LOG2) & _between(sig, -500, 500)
        ok = ok & (tl.abs(r * t) <= RT_MAX) & (tl.abs(q * t) <= RT_MAX)
    return ok


@triton.jit
def _greeks_tile(tile, spot_ptr, s_spot, strike_ptr, s_strike, t_ptr, s_t, rate_ptr, s_rate, vol_ptr, s_vol,
                 div_ptr, s_div, call_ptr, s_call, price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr,
                 phi_ptr, vanna_ptr, volga_ptr, charm_ptr, n, BLOCK_SIZE: tl.constexpr, STREAM: tl.constexpr,
                 FAST_PATH: tl.constexpr, CDF: tl.constexpr):
    """Options [tile * BLOCK_SIZE, (tile + 1) * BLOCK_SIZE) of the chain (see bsm_greeks_kernel)."""
    offs = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    SCALAR: tl.constexpr = spot_ptr.dtype.element_ty == tl.float64

    S = _load_input(spot_ptr, s_spot, offs, mask, 1.0, STREAM, SCALAR)
    K = _load_input(strike_ptr, s_strike, offs, mask, 1.0, STREAM, SCALAR)
    t = _load_input(t_ptr, s_t, offs, mask, 1.0, STREAM, SCALAR)
    r = _load_input(rate_ptr, s_rate, offs, mask, 0.0, STREAM, SCALAR)
    sig = _load_input(vol_ptr, s_vol, offs, mask, 1.0, STREAM, SCALAR)
    q = _load_input(div_ptr, s_div, offs, mask, 0.0, STREAM, SCALAR)
    is_call = _load_input(call_ptr, s_call, offs, mask, 1, STREAM, SCALAR) != 0
    w = tl.where(is_call, 1.0, -1.0).to(S.dtype)

    # Bit 0 of a tile's flags: an option outside the magnitudes the general formulas need no
    # care for (see `_fast_ok`), bad input and zero total variance included.
    sqt = libdevice.sqrt(t)
    sst = sig * sqt                       # total vol sigma sqrt(t)
    # 1/(sigma sqrt t), used where sst is in [2^-1000, 2^1000] (the special path judges the limit
    # itself, by the IEEE reciprocal as the CPU does).
    inv_sst = _recip(sst)
    special = mask & ~_fast_ok(S, K, t, r, sig, q)

    # tl.reduce with a combiner of this module rather than tl.max: the Triton interpreter
    # (tests/bundle) cannot run triton.language's own @jit helpers.
    if FAST_PATH:
        flags = special.to(tl.int32)
        if CDF == 3 and S.dtype == tl.float64:
            # Bit 1: an option of the tile lies so far from the money that exp(-d1^2/2) may not
            # be a normal number (its d1 is recomputed in the branch taken; NaN compares false).
            far = mask & (tl.abs(_d1(S, K, t, r, q, sst, inv_sst)) > NEAR_D1)
            flags = flags | (far.to(tl.int32) * 2)
        flags = tl.reduce(flags, 0, _either)
    else:
        flags = 1
    if flags == 0:
        # Every option of the tile is valid and has positive total variance.
        price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm = _bsm_general(
            S, K, t, r, sig, q, w, sqt, sst, inv_sst, CDF, True, CDF != 3 or S.dtype == tl.float32, False, mask)
        _store_greeks(price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr, phi_ptr, vanna_ptr,
                      volga_ptr, charm_ptr, offs, mask, STREAM,
                      price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm)
    else:
        if CDF == 3 and S.dtype == tl.float64:
            if flags == 2:
                # Valid, positive total variance, some option far from the money.
                price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm = _bsm_general(
                    S, K, t, r, sig, q, w, sqt, sst, inv_sst, CDF, False, True, False, mask)
                _store_greeks(price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr, phi_ptr, vanna_ptr,
                              volga_ptr, charm_ptr, offs, mask, STREAM,
                              price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm)
            else:
                _special_tile(S, K, t, r, sig, q, w, sqt, sst, price_ptr, delta_ptr, gamma_ptr, vega_ptr,
                              theta_ptr, rho_ptr, phi_ptr, vanna_ptr, volga_ptr, charm_ptr, offs, mask, STREAM, CDF)
        else:
            _special_tile(S, K, t, r, sig, q, w, sqt, sst, price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr,
                          rho_ptr, phi_ptr, vanna_ptr, volga_ptr, charm_ptr, offs, mask, STREAM, CDF)


@triton.jit
def _special_tile(S, K, t, r, sig, q, w, sqt, sst, price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr,
                  phi_ptr, vanna_ptr, volga_ptr, charm_ptr, offs, mask, STREAM: tl.constexpr, CDF: tl.constexpr):
    """A tile holding bad input, zero total variance or extreme magnitudes: the general formulas
    (on stand-ins where invalid or at the limit), then NaN and the limits selected in, as the CPU
    backend's KERNEL_ELEMENT and KERNEL_LIMIT (see bsm_greeks_kernel)."""
    inf = float("inf")
    # Comparisons are false for NaN, so these also reject NaN.
    valid = (S > 0) & (S < inf) & (K > 0) & (K < inf) & (t >= 0) & (t < inf)
    valid = valid & (sig > 0) & (sig < inf) & (tl.abs(r) < inf) & (tl.abs(q) < inf)
    # Zero total variance (t == 0, or sigma sqrt(t) so small that its reciprocal overflows):
    # the t -> 0 limits, judged exactly as on the CPU (which tests 1/sst < inf).
    sst_pos = tl.where(sst > 0, sst, 1.0)
    if S.dtype == tl.float32:
        # The IEEE float32 reciprocal of x >= 0 overflows exactly when x <= 2^-128 (2^128
        # rounds up to inf; the next float up, 2^-128 (1 + 2^-21), has a finite one), so the
        # limit is judged as on the CPU by a comparison, and the reciprocal itself may be
        # Triton's 2-ulp division.
        limit = valid & ~(sst > tl.full(sst.shape, 2.0**-128, tl.float32))
        inv_sst = 1.0 / sst_pos
    else:
        # float64 "/" is IEEE in Triton: the reciprocal overflows exactly as on the CPU. Where
        # the estimate's Newton steps apply, the value is theirs, as on the fast path (so that
        # without FAST_PATH the results are the same bits).
        inv_sst = 1.0 / sst_pos
        limit = valid & ~((sst > 0) & (inv_sst < inf))
        inv_sst = tl.where((sst > 2.0**-1000) & (sst < 2.0**1000), _recip(sst_pos), inv_sst)
    # Magnitudes where the general formulas need care (none in any real chain): S or K outside
    # [2^-50, 2^50], |r t| or |q t| > 350 (float32: 40, and S < K/16), t < 2^-1000 (float32:
    # 2^-100). These are formed as the CPU forms them, and NaN where S e^{-qt} or K e^{-rt}
    # overflows or vanishes.
    lo, hi = 2.0**-MAG_LOG2, 2.0**MAG_LOG2
    extreme = (S < lo) | (S > hi) | (K < lo) | (K > hi)
    if S.dtype == tl.float32:
        extreme = extreme | (tl.abs(r * t) > RT_MAX_F32) | (tl.abs(q * t) > RT_MAX_F32) | (S < 0.0625 * K)
        extreme = extreme | (t < 2.0**T_MIN_LOG2_F32)
    else:
        extreme = extreme | (tl.abs(r * t) > RT_MAX) | (tl.abs(q * t) > RT_MAX) | (t < 2.0**T_MIN_LOG2)
    # t = -0.0 is t = 0 (sqrt(-0.0) = -0.0 already took it to the limit).
    t = tl.abs(t)
    sqt = tl.abs(sqt)
    # Invalid lanes compute on harmless values; their outputs are replaced by NaN below.
    S = tl.where(valid, S, 1.0)
    K = tl.where(valid, K, 1.0)
    t = tl.where(valid, t, 1.0)
    r = tl.where(valid, r, 0.0)
    sig = tl.where(valid, sig, 1.0)
    q = tl.where(valid, q, 0.0)
    sqt = tl.where(valid, sqt, 1.0)
    sst = tl.where(valid, sst, 1.0)
    inv_sst = tl.where(valid, inv_sst, 1.0)
    # Limit lanes run the general formulas with stand-ins (t = 1, sst = sigma) so that
    # nothing divides by zero; their results are replaced by the limits below.
    price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm = _bsm_general(
        S, K, tl.where(limit, 1.0, t), r, sig, q, w, tl.where(limit, 1.0, sqt),
        tl.where(limit, sig, sst), tl.where(limit, 1.0 / sig, inv_sst), CDF, False, True, True, extreme)

    # The discounted spot and strike, which also decide the limits (see the docstring): an
    # option whose S e^{-qt} or K e^{-rt} vanishes or overflows is out of range (NaN).
    Dq = libdevice.exp(-q * t)
    SDq = S * Dq
    KDr = K * libdevice.exp(-r * t)
    valid = valid & (SDq > 0) & (SDq < inf) & (KDr > 0) & (KDr < inf)
    m = w * (SDq - KDr)
    atm = m == 0
    itm = tl.where(m > 0, 1.0, tl.where(atm, 0.5, 0.0)).to(S.dtype)
    # At the money theta's decay term and charm's drift term diverge like 1/sqrt(t): at t == 0
    # they are infinities of known sign. The drift over sigma, (r - q)/sigma + sigma/2, does
    # not square sigma (which overflows in float32 for a huge sigma).
    t_pos = sqt > 0
    sqt_l = tl.where(t_pos, sqt, 1.0)
    decay = tl.where(t_pos, -SDq * INV_SQRT_2PI * sig / (2.0 * sqt_l), -inf)
    drift_sig = (r - q) / sig + 0.5 * sig
    drift_term = tl.where(t_pos, INV_SQRT_2PI * Dq * drift_sig / (2.0 * sqt_l), tl.where(drift_sig > 0, inf, -inf))
    nan = float("nan")
    price = tl.where(valid, tl.where(limit, tl.where(m > 0, m, 0.0), price), nan)
    delta = tl.where(valid, tl.where(limit, w * Dq * itm, delta), nan)
    gamma = tl.where(valid, tl.where(limit, tl.where(atm, inf, 0.0), gamma), nan)
    vega = tl.where(valid, tl.where(limit, tl.where(atm, SDq * INV_SQRT_2PI * sqt, 0.0), vega), nan)
    # The itm weights first: out of the money the terms are 0 even where t S or t K overflows.
    lim_theta = tl.where(atm, decay, 0.0) + w * (q * (SDq * itm) - r * (KDr * itm))
    theta = tl.where(valid, tl.where(limit, lim_theta, theta), nan)
    rho = tl.where(valid, tl.where(limit, w * t * (KDr * itm), rho), nan)
    phi = tl.where(valid, tl.where(limit, -w * t * (SDq * itm), phi), nan)
    vanna = tl.where(valid, tl.where(limit, 0.0, vanna), nan)
    volga = tl.where(valid, tl.where(limit, 0.0, volga), nan)
    lim_charm = w * q * Dq * itm - tl.where(atm & (drift_sig != 0), drift_term, 0.0)
    charm = tl.where(valid, tl.where(limit, lim_charm, charm), nan)
    _store_greeks(price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr, phi_ptr, vanna_ptr,
                  volga_ptr, charm_ptr, offs, mask, STREAM,
                  price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm)


@triton.jit
def bsm_greeks_kernel(
    spot_ptr, s_spot,
    strike_ptr, s_strike,
    t_ptr, s_t,
    rate_ptr, s_rate,
    vol_ptr, s_vol,
    div_ptr, s_div,
    call_ptr, s_call,
    price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr, rho_ptr, phi_ptr, vanna_ptr, volga_ptr,
    charm_ptr,
    n,
    BLOCK_SIZE: tl.constexpr,
    STREAM: tl.constexpr = False,
    FAST_PATH: tl.constexpr = True,
    PERSISTENT: tl.constexpr = False,
    CDF: tl.constexpr = 3,
):
    """Price and greeks of ``n`` European options under Black-Scholes-Merton.

    Parameters (in launch order)
    ----------------------------
    spot_ptr, strike_ptr, t_ptr, rate_ptr, vol_ptr, div_ptr : pointer to fp32 or fp64
        Spot S, strike K, time to expiry t (years), continuously compounded rate r, Black vol
        sigma (per sqrt(year)), continuous dividend yield q. All six share one float type.
    call_ptr : pointer to uint8
        Nonzero for a call, zero for a put.
    s_* : int32
        Element stride of the input before it, 1 (contiguous) or 0 (one value for every option).
    price_ptr ... charm_ptr : pointer to the input float type
        Contiguous outputs of ``n`` elements, never NULL. Units as QuantLib: vega, rho and phi
        (dividend rho) per 1.00 change, theta per year of calendar time (-dV/dt_expiry), vanna
        = d delta / d sigma, volga = d vega / d sigma, charm = -d delta / d t per year.
    n : int32
        Number of options; ``ceil(n / BLOCK_SIZE)`` programs, one tile each (with PERSISTENT, any
        number of programs: each steps through the tiles).
    BLOCK_SIZE : constexpr
        Options per tile.
    STREAM : constexpr
        Evict-first loads and streaming stores (see the module docstring).
    FAST_PATH : constexpr
        Branch, per tile, to the general formulas alone when no option needs the limits or NaN
        (a block-wide OR: a reduction through shared memory and barriers). False: every tile takes
        the general path. Same results either way, bit for bit under CDF 0-2; under CDF 3 the
        fast path's tiles near the money form e^{-qt} as e^{-rt} e^{(r-q)t}, an ulp or two
        from exp(-qt).
    PERSISTENT : constexpr
        Loop over tiles with a stride of the grid size, so that a grid of a few programs per SM
        covers any n. Off by default: the loop costs float64 registers (82 -> 100 on sm_90) and
        the runtime launches one program per tile.
    CDF : constexpr
        How float64 forms N(w d1) and N(w d2) (float32, bound by memory, always takes erfc):
        0, both from libdevice's erfc, which computes its own exp(-z^2); 1, N(w d1) from
        libdevice's erfcx times the density's exp(-d1^2/2), computed once for both (~20 fewer of
        ~330 float64 operations an option), N(w d2) from erfc; 2, both from the erfcx table of
        tickgpu.kernels.erfcx (18 float64 operations against erfcx's 92 and erfc's 63) times
        exp(-d^2/2), d1's being the density's; 3 (default), as 2, with exp(-d2^2/2) =
        exp(-d1^2/2) (S/K) e^{(r-q)t} in tiles where every |d1| <= 37.5 (exp(-d1^2/2) a normal
        number) and |r t|, |(r - q) t| <= 700 (other tiles as 2), ~21 float64 operations fewer. All four agree within a few
        ulps of each greek's scale; element by element less closely where a far
        out-of-the-money price is a difference of two tail terms (up to 1.2e-9 relative at
        d1 = 36, where each form is as far from the exact price).

    Bad input and limits (the convention of the CPU kernel, csrc/cpu/greeks_kernel.h)
    --------------------------------------------------------------------------------
    * An option with a non-finite input, S <= 0, K <= 0, t < 0 or sigma <= 0 gets NaN in all ten
      outputs; so does one out of range, whose S e^{-qt} or K e^{-rt} (in the float type) is 0 or
      overflows. t = -0.0 is t = 0.
    * Where the normal density at d1 underflows (far from the money, a tiny or a huge sigma),
      vanna, volga and the density part of charm are 0, their limits.
    * Zero total variance (t == 0, or sigma sqrt(t) too small for its reciprocal to be finite): the
      option is worth its forward intrinsic value. With w = +1 (call) / -1 (put),
      m = w (S e^{-qt} - K e^{-rt}) and itm = 1 if m > 0, 1/2 if m == 0 (at the money), else 0:
      price = max(m, 0); delta = w e^{-qt} itm; gamma = +inf at the money, else 0;
      vega = S e^{-qt} sqrt(t) / sqrt(2 pi) at the money, else 0 (so 0 at t == 0);
      theta = w (q S e^{-qt} - r K e^{-rt}) itm, minus S e^{-qt} sigma / (2 sqrt(2 pi t)) at the
      money (-inf at t == 0); rho = w t K e^{-rt} itm; phi = -w t S e^{-qt} itm; vanna = volga = 0;
      charm = w q e^{-qt} itm, minus e^{-qt} (r - q + sigma^2/2) / (2 sigma sqrt(2 pi t)) at the
      money when that drift is nonzero (+-inf at t == 0).
      These are the one-sided limits as t -> 0 (along S == K at the money).
    """
    pid = tl.program_id(axis=0)
    if PERSISTENT:
        # ceil(n / BLOCK_SIZE) without the overflow of n + BLOCK_SIZE - 1 near 2^31 (n == 0: one
        # fully masked tile, as C division truncates -1 // BLOCK_SIZE to 0)
        num_tiles = (n - 1) // BLOCK_SIZE + 1
        tile = pid
        # A while loop, not range(): the Triton interpreter (tests/bundle) cannot run a range over
        # run-time bounds.
        while tile < num_tiles:
            _greeks_tile(tile, spot_ptr, s_spot, strike_ptr, s_strike, t_ptr, s_t, rate_ptr, s_rate, vol_ptr, s_vol,
                         div_ptr, s_div, call_ptr, s_call, price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr,
                         rho_ptr, phi_ptr, vanna_ptr, volga_ptr, charm_ptr, n, BLOCK_SIZE, STREAM, FAST_PATH, CDF)
            tile += tl.num_programs(axis=0)
    else:
        _greeks_tile(pid, spot_ptr, s_spot, strike_ptr, s_strike, t_ptr, s_t, rate_ptr, s_rate, vol_ptr, s_vol,
                     div_ptr, s_div, call_ptr, s_call, price_ptr, delta_ptr, gamma_ptr, vega_ptr, theta_ptr,
                     rho_ptr, phi_ptr, vanna_ptr, volga_ptr, charm_ptr, n, BLOCK_SIZE, STREAM, FAST_PATH, CDF)
