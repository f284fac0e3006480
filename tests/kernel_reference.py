"""Float64 NumPy references for the GPU kernels: BSM greeks and the vol surface.

Written from the textbook formulas, call and put separately (the kernel folds them into one sign
w), with scipy's ndtr for the normal CDF; checked against QuantLib in test_interpreter.py. Each
greek comes with a *scale*: the sum of the absolute values of the terms it is computed from, so a
test can bound the rounding error of a correct implementation by rtol * scale even where terms
cancel (theta, charm, a deep in-the-money price).
"""
import numpy as np
from scipy.special import ndtr

GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
INV_SQRT_2PI = 0.398942280401432677939946059934


def bsm_greeks(S, K, t, r, sig, q, call):
    """(values, scales, d1): dicts of float64 arrays keyed by GREEKS, and d1 for conditioning."""
    S, K, t, r, sig, q = (np.asarray(a, dtype=np.float64) for a in (S, K, t, r, sig, q))
    call = np.asarray(call).astype(bool)
    S, K, t, r, sig, q, call = np.broadcast_arrays(S, K, t, r, sig, q, call)
    t_given = t
    t = np.abs(t)                           # t = -0.0 is t = 0
    with np.errstate(all="ignore"):
        sqt = np.sqrt(t)
        sst = sig * sqt
        ratio = S / K
        # ln(S/K), also where S/K overflows or is subnormal
        ln_sk = np.where((ratio > 2.0**-1000) & (ratio < np.inf), np.log(ratio), np.log(S) - np.log(K))
        d1 = (ln_sk + (r - q) * t) / sst + 0.5 * sst
        d2 = d1 - sst
        Dq, Dr = np.exp(-q * t), np.exp(-r * t)
        pdf = INV_SQRT_2PI * np.exp(-0.5 * d1**2)
        # Where the density has underflowed its terms are 0 (it decays faster than d1, d2 grow).
        dense = pdf > 0
        Nd1, Nd2, Nmd1, Nmd2 = ndtr(d1), ndtr(d2), ndtr(-d1), ndtr(-d2)
        dd1_dT = (r - q) / sst - d2 / (2 * t)      # (2 (r - q) t - d2 sst) / (2 t sst), with no t sst to underflow
        decay = S * Dq * pdf * sig / (2 * sqt)

        v, s = {}, {}
        c_price = S * Dq * Nd1 - K * Dr * Nd2
        p_price = K * Dr * Nmd2 - S * Dq * Nmd1
        v["price"] = np.where(call, c_price, p_price)
        s["price"] = np.where(call, S * Dq * Nd1 + K * Dr * Nd2, K * Dr * Nmd2 + S * Dq * Nmd1)
        v["delta"] = np.where(call, Dq * Nd1, -Dq * Nmd1)
        s["delta"] = np.abs(v["delta"])
        v["gamma"] = Dq * pdf / (S * sst)
        s["gamma"] = v["gamma"]
        v["vega"] = S * Dq * pdf * sqt
        s["vega"] = v["vega"]
        v["theta"] = np.where(call, -decay + q * S * Dq * Nd1 - r * K * Dr * Nd2,
                              -decay - q * S * Dq * Nmd1 + r * K * Dr * Nmd2)
        s["theta"] = decay + np.where(call, np.abs(q * S * Dq * Nd1) + np.abs(r * K * Dr * Nd2),
                                      np.abs(q * S * Dq * Nmd1) + np.abs(r * K * Dr * Nmd2))
        v["rho"] = np.where(call, K * t * Dr * Nd2, -K * t * Dr * Nmd2)
        s["rho"] = np.abs(v["rho"])
        v["phi"] = np.where(call, -t * S * Dq * Nd1, t * S * Dq * Nmd1)
        s["phi"] = np.abs(v["phi"])
        v["vanna"] = np.where(dense, -Dq * pdf * d2 / sig, 0.0)
        # d2 = d1 - sigma sqrt(t) cancels near d1 = sigma sqrt(t): scale by the parts.
        s["vanna"] = Dq * pdf * (np.abs(d1) + sst) / sig
        v["volga"] = np.where(dense, v["vega"] * d1 * d2 / sig, 0.0)
        s["volga"] = v["vega"] * np.abs(d1) * (np.abs(d1) + sst) / sig
        v["charm"] = np.where(call, q * Dq * Nd1, -q * Dq * Nmd1) - np.where(dense, Dq * pdf * dd1_dT, 0.0)
        s["charm"] = (np.abs(q * Dq) + Dq * pdf * (np.abs(2 * (r - q) * t) + np.abs(d2) * sst + sst)
                      / (2 * t * sst))

    # Zero total variance: the limits of the kernels' docstring.
    with np.errstate(divide="ignore"):
        limit = ~(1.0 / sst < np.inf)        # t == 0, or 1 / (sigma sqrt t) overflowing
    if limit.any():
        w = np.where(call, 1.0, -1.0)
        m = w * (S * Dq - K * Dr)
        atm = m == 0
        itm = np.where(m > 0, 1.0, np.where(atm, 0.5, 0.0))
        with np.errstate(all="ignore"):     # inf * 0 on invalid lanes; they become NaN below
            drift = r - q + 0.5 * sig**2
            atm_theta = np.where(sqt > 0, -S * Dq * INV_SQRT_2PI * sig / (2 * sqt), -np.inf)
            atm_charm = np.where(drift != 0, np.where(sqt > 0, INV_SQRT_2PI * Dq * drift / (2 * sig * sqt),
                                                      np.copysign(np.inf, drift)), 0.0)
            lim = {
                "price": np.maximum(m, 0.0),
                "delta": w * Dq * itm,
                "gamma": np.where(atm, np.inf, 0.0),
                "vega": np.where(atm, S * Dq * INV_SQRT_2PI * sqt, 0.0),
                "theta": np.where(atm, atm_theta, 0.0) + w * (q * S * Dq - r * K * Dr) * itm,
                "rho": w * t * K * Dr * itm,
                "phi": -w * t * S * Dq * itm,
                "vanna": np.zeros_like(S),
                "volga": np.zeros_like(S),
                "charm": w * q * Dq * itm - np.where(atm, atm_charm, 0.0),
            }
            for g in GREEKS:
                v[g] = np.where(limit, lim[g], v[g])
                s[g] = np.where(limit, np.abs(lim[g]) + np.abs(S) + np.abs(K), s[g])

    finite = np.isfinite(S) & np.isfinite(K) & np.isfinite(t) & np.isfinite(r) & np.isfinite(sig) & np.isfinite(q)
    valid = finite & (S > 0) & (K > 0) & (t_given >= 0) & (sig > 0)
    # Out of range: the discounted spot or strike vanishes or overflows (float64).
    with np.errstate(all="ignore"):
        valid &= (S * Dq > 0) & (S * Dq < np.inf) & (K * Dr > 0) & (K * Dr < np.inf)
    for g in GREEKS:
        v[g] = np.where(valid, v[g], np.nan)
    return v, s, np.where(valid & ~limit, d1, 0.0)


def surface(strikes, expiries, vols, mode, k, t, what):
    """Vol (what 0) or total variance (what 1) by the conventions of the surface kernel's docstring.

    A direct, loop-per-query implementation: locate the cell with np.searchsorted, interpolate.
    """
    strikes, expiries = np.asarray(strikes, float), np.asarray(expiries, float)
    vols = np.asarray(vols, float).reshape(len(expiries), len(strikes))
    k, t = np.broadcast_arrays(np.asarray(k, float), np.asarray(t, float))
    out = np.empty(k.shape)
    for idx in np.ndindex(k.shape):
        out[idx] = _surface_one(strikes, expiries, vols, mode, k[idx], t[idx], what)
    return out


def _row(strikes, row, kq, variance, T):
    """Row value at strike kq, linear in vol (variance=False) or in sigma^2 T, flat outside."""
    y = row**2 * T if variance else row
    if len(strikes) == 1:
        return y[0]
    return np.interp(kq, strikes, y)      # np.interp holds the end values flat outside


def _surface_one(strikes, expiries, vols, mode, kq, tq, what):
    if not (np.isfinite(kq) and np.isfinite(tq) and tq >= 0):
        return np.nan
    T = expiries
    if mode == 0:
        def var_at(tt):
            if tt >= T[-1]:
                return _row(strikes, vols[-1], kq, True, T[-1]) * tt / T[-1]
            if tt <= T[0]:
                return _row(strikes, vols[0], kq, True, T[0]) * tt / T[0]
            i = np.searchsorted(T, tt, side="right") - 1
            b = (tt - T[i]) / (T[i + 1] - T[i])
            return (1 - b) * _row(strikes, vols[i], kq, True, T[i]) + b * _row(strikes, vols[i + 1], kq, True, T[i + 1])
        if what == 1:
            return var_at(tq)
        if tq == 0:
            return np.sqrt(_row(strikes, vols[0], kq, True, T[0]) / T[0])
        return np.sqrt(var_at(tq) / tq)
    if tq >= T[-1]:
        vol = _row(strikes, vols[-1], kq, False, None)
    elif tq <= T[0]:
        vol = _row(strikes, vols[0], kq, False, None)
    else:
        i = np.searchsorted(T, tq, side="right") - 1
        b = (tq - T[i]) / (T[i + 1] - T[i])
        vol = (1 - b) * _row(strikes, vols[i], kq, False, None) + b * _row(strikes, vols[i + 1], kq, False, None)
    return vol if what == 0 else vol * vol * tq
