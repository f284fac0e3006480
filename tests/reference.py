"""Plain NumPy/SciPy float64 references for the greeks and the vol surface: the readable version.

Written from the textbook formulas (Hull; Haug, "The Complete Guide to Option Pricing Formulas",
ch. 1 and 2), call and put spelled out separately, with SciPy's normal CDF. They serve as a second
implementation in tests and as the NumPy baseline in timings. Valid inputs with t > 0 only.
"""
from __future__ import annotations

import numpy as np
from scipy.special import ndtr

SQRT_2PI = np.sqrt(2.0 * np.pi)


def normal_pdf(x):
    return np.exp(-0.5 * x * x) / SQRT_2PI


def bsm_greeks(spot, strike, t, rate, vol, div=0.0, call=True) -> dict[str, np.ndarray]:
    """Black-Scholes-Merton price and greeks, QuantLib's units (per 1.00, theta per year)."""
    S, K, t, r, sigma, q, is_call = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (spot, strike, t, rate, vol, div)),
        np.asarray(call, dtype=bool),
    )
    sqrt_t = np.sqrt(t)
    d1 = (np.log(S / K) + (r - q + 0.5 * sigma**2) * t) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    disc_q = np.exp(-q * t)
    disc_r = np.exp(-r * t)
    pdf1 = normal_pdf(d1)

    call_price = S * disc_q * ndtr(d1) - K * disc_r * ndtr(d2)
    put_price = K * disc_r * ndtr(-d2) - S * disc_q * ndtr(-d1)
    call_delta = disc_q * ndtr(d1)
    put_delta = -disc_q * ndtr(-d1)
    gamma = disc_q * pdf1 / (S * sigma * sqrt_t)
    vega = S * disc_q * pdf1 * sqrt_t
    decay = -S * disc_q * pdf1 * sigma / (2.0 * sqrt_t)
    call_theta = decay - r * K * disc_r * ndtr(d2) + q * S * disc_q * ndtr(d1)
    put_theta = decay + r * K * disc_r * ndtr(-d2) - q * S * disc_q * ndtr(-d1)
    call_rho = K * t * disc_r * ndtr(d2)
    put_rho = -K * t * disc_r * ndtr(-d2)
    call_phi = -S * t * disc_q * ndtr(d1)
    put_phi = S * t * disc_q * ndtr(-d1)
    vanna = -disc_q * pdf1 * d2 / sigma
    volga = vega * d1 * d2 / sigma
    # charm = -d(delta)/dT (calendar time passing), Haug 2.2.x
    drift_term = disc_q * pdf1 * (2.0 * (r - q) * t - d2 * sigma * sqrt_t) / (2.0 * t * sigma * sqrt_t)
    call_charm = q * disc_q * ndtr(d1) - drift_term
    put_charm = -q * disc_q * ndtr(-d1) - drift_term

    pick = lambda c, p: np.where(is_call, c, p)  # noqa: E731
    return {
        "price": pick(call_price, put_price),
        "delta": pick(call_delta, put_delta),
        "gamma": gamma,
        "vega": vega,
        "theta": pick(call_theta, put_theta),
        "rho": pick(call_rho, put_rho),
        "phi": pick(call_phi, put_phi),
        "vanna": vanna,
        "volga": volga,
        "charm": pick(call_charm, put_charm),
    }


def surface_variance(strikes, expiries, vols, strike, t, interpolation="variance"):
    """Total variance on a vol grid, by 1-D np.interp passes (flat outside each axis).

    "variance": per expiry row, interpolate total variance linearly in strike; then in t over the
    expiries with a zero row prepended at t = 0; beyond the last expiry, keep the vol flat.
    "vol": the same on the vols, flat in t outside [T_first, T_last]; variance = vol^2 t.
    """
    strikes = np.asarray(strikes, float)
    expiries = np.asarray(expiries, float)
    vols = np.asarray(vols, float)
    K, T = np.broadcast_arrays(np.asarray(strike, float), np.asarray(t, float))
    out = np.empty(K.shape)
    for idx in np.ndindex(K.shape):
        k, tt = K[idx], T[idx]
        if interpolation == "variance":
            rows = np.array([np.interp(k, strikes, vols[i] ** 2 * expiries[i]) for i in range(len(expiries))])
            if tt > expiries[-1]:
                out[idx] = rows[-1] * tt / expiries[-1]
            else:
                out[idx] = np.interp(tt, np.r_[0.0, expiries], np.r_[0.0, rows])
        else:
            rows = np.array([np.interp(k, strikes, vols[i]) for i in range(len(expiries))])
            vol = np.interp(tt, expiries, rows)
            out[idx] = vol * vol * tt
    return out


def surface_vol(strikes, expiries, vols, strike, t, interpolation="variance"):
    """Black vol on a vol grid: sqrt(variance / t), t > 0 (see surface_variance)."""
    t = np.asarray(t, float)
    return np.sqrt(surface_variance(strikes, expiries, vols, strike, t, interpolation) / t)
