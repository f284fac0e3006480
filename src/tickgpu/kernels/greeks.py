"""Black-Scholes-Merton price and greeks, fused in one Triton kernel.

One program handles ``BLOCK_SIZE`` consecutive options: it reads each of the seven inputs once,
computes the price and the nine greeks in registers and writes each of the ten outputs once, so a
large chain costs one pass over memory (on an H200 the kernel is bound by launch latency below
about 1e5 options and by bandwidth, at 3.2-3.6 TB/s, from a few million).

The same source is compiled for float32 and float64: the element type comes from the pointer types
of the signature (``*fp32`` or ``*fp64``), and every transcendental function goes to libdevice
(``__nv_expf`` / ``__nv_exp``, ``__nv_erfcf`` / ``__nv_erfc``, ...), whose float32 versions keep
their stated accuracy over the whole argument range (Triton's own ``tl.exp`` in float32 is the
hardware approximation, whose relative error grows with the argument).

This module imports Triton; only the bundle builder (``tickgpu.kernels.build``) and the tests
import it. The runtime launches the compiled cubins and never imports this file.
"""
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

# Module-level constexprs keep their full float64 value: a float literal assigned inside a kernel
# body can be materialised as a float32 constant first.
INV_SQRT_2PI = tl.constexpr(0.398942280401432677939946059934)
INV_SQRT_2 = tl.constexpr(0.707106781186547524400844362105)


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
        Number of options; the grid is ``ceil(n / BLOCK_SIZE)`` programs.
    BLOCK_SIZE : constexpr
        Options per program.

    Bad input and limits (the convention of the CPU kernel, csrc/cpu/greeks_kernel.h)
    --------------------------------------------------------------------------------
    * An option with a non-finite input, S <= 0, K <= 0, t < 0 or sigma <= 0 gets NaN in all ten
      outputs.
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
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n

    # A stride of 0 makes every lane read element 0 (one value broadcast to the whole chain);
    # the hardware serves a warp's identical addresses with one transaction.
    S = tl.load(spot_ptr + offs * s_spot, mask=mask, other=1.0)
    K = tl.load(strike_ptr + offs * s_strike, mask=mask, other=1.0)
    t = tl.load(t_ptr + offs * s_t, mask=mask, other=1.0)
    r = tl.load(rate_ptr + offs * s_rate, mask=mask, other=0.0)
    sig = tl.load(vol_ptr + offs * s_vol, mask=mask, other=1.0)
    q = tl.load(div_ptr + offs * s_div, mask=mask, other=0.0)
    is_call = tl.load(call_ptr + offs * s_call, mask=mask, other=1) != 0

    inf = float("inf")
    # Comparisons are false for NaN, so these also reject NaN.
    valid = (S > 0) & (S < inf) & (K > 0) & (K < inf) & (t >= 0) & (t < inf)
    valid = valid & (sig > 0) & (sig < inf) & (tl.abs(r) < inf) & (tl.abs(q) < inf)
    # Invalid lanes compute on harmless values; their outputs are replaced by NaN at the end.
    S = tl.where(valid, S, 1.0)
    K = tl.where(valid, K, 1.0)
    t = tl.where(valid, t, 1.0)
    r = tl.where(valid, r, 0.0)
    sig = tl.where(valid, sig, 1.0)
    q = tl.where(valid, q, 0.0)
    w = tl.where(is_call, 1.0, -1.0).to(S.dtype)

    sqt = libdevice.sqrt(t)
    sst = sig * sqt                       # total vol sigma sqrt(t)
    # Zero total variance (t == 0, or sigma sqrt(t) so small that its reciprocal overflows): the
    # t -> 0 limits below. IEEE division so that a subnormal sst is judged exactly as on the CPU
    # (float64 "/" is IEEE in Triton; float32 "/" is the 2-ulp approximation, hence div_rn).
    sst_pos = tl.where(sst > 0, sst, 1.0)
    if S.dtype == tl.float32:
        inv_sst = tl.math.div_rn(tl.full(sst.shape, 1.0, sst.dtype), sst_pos)
    else:
        inv_sst = 1.0 / sst_pos
    limit = valid & ~((sst > 0) & (inv_sst < inf))
    # Limit lanes run the general formulas with stand-in divisors so nothing divides by zero.
    sqt_g = tl.where(limit, 1.0, sqt)
    t_g = tl.where(limit, 1.0, t)
    sst_g = tl.where(limit, sig, sst)
    inv_sst = tl.where(limit, 1.0 / sig, inv_sst)

    Dq = libdevice.exp(-q * t)
    Dr = libdevice.exp(-r * t)
    SDq = S * Dq
    KDr = K * Dr

    d1 = (libdevice.log(S / K) + (r - q) * t) * inv_sst + 0.5 * sst_g
    d2 = d1 - sst_g
    # N(w d) through erfc: no 1 - N cancellation in either tail.
    Nd1 = 0.5 * libdevice.erfc(-w * d1 * INV_SQRT_2)
    Nd2 = 0.5 * libdevice.erfc(-w * d2 * INV_SQRT_2)
    pdf = INV_SQRT_2PI * libdevice.exp(-0.5 * d1 * d1)
    SDq_N1 = SDq * Nd1
    KDr_N2 = KDr * Nd2
    Dq_pdf = Dq * pdf
    vega = SDq * pdf * sqt_g
    inv_sig = 1.0 / sig

    price = w * (SDq_N1 - KDr_N2)
    delta = w * Dq * Nd1
    gamma = Dq_pdf * inv_sst / S
    theta = -0.5 * SDq * pdf * sig / sqt_g + w * (q * SDq_N1 - r * KDr_N2)
    rho = w * t * KDr_N2
    phi = -w * t * SDq_N1
    vanna = -Dq_pdf * d2 * inv_sig
    volga = vega * d1 * d2 * inv_sig
    charm = w * q * Dq * Nd1 - Dq_pdf * (2.0 * (r - q) * t - d2 * sst_g) * inv_sst / (2.0 * t_g)

    # Zero-total-variance limits (see the docstring).
    m = w * (SDq - KDr)
    atm = m == 0
    itm = tl.where(m > 0, 1.0, tl.where(atm, 0.5, 0.0)).to(S.dtype)
    # At t == 0 the at-the-money decay terms are infinite; for t > 0 they are finite.
    t_pos = sqt > 0
    sqt_l = tl.where(t_pos, sqt, 1.0)
    drift = (r - q) + 0.5 * sig * sig
    atm_theta = tl.where(t_pos, -SDq * INV_SQRT_2PI * sig / (2.0 * sqt_l), -inf)
    atm_charm = tl.where(t_pos, INV_SQRT_2PI * Dq * drift / (2.0 * sig * sqt_l), tl.where(drift > 0, inf, -inf))
    atm_charm = tl.where(drift != 0, atm_charm, 0.0)
    lim_price = tl.maximum(m, 0.0)
    lim_delta = w * Dq * itm
    lim_gamma = tl.where(atm, inf, 0.0)
    lim_vega = tl.where(atm, SDq * INV_SQRT_2PI * sqt, 0.0)
    lim_theta = tl.where(atm, atm_theta, 0.0) + w * (q * SDq - r * KDr) * itm
    lim_rho = w * t * KDr * itm
    lim_phi = -w * t * SDq * itm
    lim_charm = w * q * Dq * itm - tl.where(atm, atm_charm, 0.0)

    nan = float("nan")
    price = tl.where(valid, tl.where(limit, lim_price, price), nan)
    delta = tl.where(valid, tl.where(limit, lim_delta, delta), nan)
    gamma = tl.where(valid, tl.where(limit, lim_gamma, gamma), nan)
    vega = tl.where(valid, tl.where(limit, lim_vega, vega), nan)
    theta = tl.where(valid, tl.where(limit, lim_theta, theta), nan)
    rho = tl.where(valid, tl.where(limit, lim_rho, rho), nan)
    phi = tl.where(valid, tl.where(limit, lim_phi, phi), nan)
    vanna = tl.where(valid, tl.where(limit, 0.0, vanna), nan)
    volga = tl.where(valid, tl.where(limit, 0.0, volga), nan)
    charm = tl.where(valid, tl.where(limit, lim_charm, charm), nan)

    # Outputs are contiguous: with 16-byte aligned pointers and n % 16 == 0 (the aligned16
    # variants) and two or more elements per thread these become vector stores.
    tl.store(price_ptr + offs, price, mask=mask)
    tl.store(delta_ptr + offs, delta, mask=mask)
    tl.store(gamma_ptr + offs, gamma, mask=mask)
    tl.store(vega_ptr + offs, vega, mask=mask)
    tl.store(theta_ptr + offs, theta, mask=mask)
    tl.store(rho_ptr + offs, rho, mask=mask)
    tl.store(phi_ptr + offs, phi, mask=mask)
    tl.store(vanna_ptr + offs, vanna, mask=mask)
    tl.store(volga_ptr + offs, volga, mask=mask)
    tl.store(charm_ptr + offs, charm, mask=mask)
