"""Implied volatility of European options from their premiums (Black-Scholes-Merton).

The solver is Peter Jaeckel's "Let's Be Rational" (Wilmott, 2015): a rational initial guess on four
branches of the normalised price and two Householder(3) iterations, which reach machine precision
everywhere the price determines the vol. One C source (csrc/cpu/lbr_core.h) runs on both backends.
"""
from __future__ import annotations

import enum

import numpy as np

from tickgpu import dispatch
from tickgpu.finance import _checks
from tickgpu._native import check, ffi, lib
from tickgpu.finance import greeks as _greeks
from tickgpu.finance.greeks import _call_flags, _runtime_ops, bind_flags, bind_inputs, shape_and_place
from tickgpu.finance.greeks import give_frame, require_discountable, take_frame

__all__ = ["IVStatus", "implied_vol"]


class IVStatus(enum.IntEnum):
    """Why an implied vol is what it is; mirrors ``tg_iv_status`` in csrc/tickgpu.h."""

    OK = 0
    #: price below the discounted intrinsic value: no vol exists (NaN)
    BELOW_INTRINSIC = 1
    #: price at or above the no-arbitrage maximum, S e^{-qt} (call) or K e^{-rt} (put) (NaN)
    ABOVE_MAXIMUM = 2
    #: non-finite input, spot <= 0, strike <= 0, t <= 0 or price < 0, or rate * t or div * t
    #: beyond what a double can discount (S e^{-qt} or K e^{-rt} 0 or infinite) (NaN)
    BAD_INPUT = 3
    #: price equal to the intrinsic value: vol 0
    AT_INTRINSIC = 4
    #: float32 inputs cannot resolve the price's distance to a bound, either side of the intrinsic
    #: value (NaN); see `implied_vol`
    PRECISION = 5


_NAMES = ("price", "spot", "strike", "t", "rate", "div")


def implied_vol(price, spot, strike, t, rate, div=0.0, call=True, *, dtype=np.float64,
                backend="auto", strict=False, return_status=False):
    """Black-Scholes-Merton implied volatility of European option premiums.

    Parameters
    ----------
    price : array_like
        Option premium (present value, in currency).
    spot, strike : array_like
        Spot S and strike K, in the same currency.
    t : array_like
        Time to expiry in years (> 0).
    rate, div : array_like
        Continuously compounded risk-free rate r and dividend yield q, per year (``div=0.0`` by
        default). For Black-76 on a forward F discounted at r, pass ``spot=F`` and ``div=rate``.
    call : bool or array_like of bool
        True for calls, False for puts (an integer array of 0 and 1 is accepted too); anything
        else raises as in `greeks`.
    dtype : np.float64 or np.float32
        Precision of the inputs and the result (see "float32" below).
    backend : {"auto", "cpu", "gpu"}
        ``"auto"`` leaves the choice to `tickgpu.dispatch.choose`.
    strict : bool
        If True, raise ValueError at the first element without a vol, naming the argument, the
        index and the reason (non-finite, price < 0, spot <= 0, strike <= 0, t <= 0, judged on
        the values as converted to `dtype`; rate * t or div * t beyond what a double can
        discount), or, for a price outside the no-arbitrage bounds, the index and the `IVStatus`
        name. A price at its intrinsic value is not an error (vol 0).
    return_status : bool
        If True, return ``(vols, status)``.

    Returns
    -------
    vols : ndarray
        Implied vol per sqrt(year) (0.2 = 20%), of the broadcast shape of the inputs (0-d for
        all-scalar input), NaN where there is none.
    status : ndarray of int8
        `IVStatus` values, only with ``return_status=True``.

    Notes
    -----
    Method: P. Jaeckel, "Let's Be Rational" (Wilmott, 2015). The premium is reduced to the
    normalised price of an out-of-the-money option, a rational initial guess is taken on one of
    four branches, and two Householder(3) iterations follow: a fixed cost (about 0.3 us per option
    on one CPU core), no tolerance to tune and no iteration limit to hit. The same C source
    (csrc/cpu/lbr_core.h) runs on the GPU.

    No-arbitrage bounds are taken on the discounted quantities ``S e^{-qt}`` and ``K e^{-rt}``:
    a call's premium must lie in ``[max(S e^{-qt} - K e^{-rt}, 0), S e^{-qt})``, a put's in
    ``[max(K e^{-rt} - S e^{-qt}, 0), K e^{-rt})``. Below that range the status is
    BELOW_INTRINSIC, at its lower end AT_INTRINSIC (vol 0), at or above its upper end
    ABOVE_MAXIMUM. In between the vol is found to about machine precision in the normalised
    price; how much of that survives in the vol depends on vega: deep in the money, the time
    value ``price - intrinsic`` carries only the digits the price has beyond the intrinsic value.
    A time value too small for a normalised double once divided by ``sqrt(S e^{-qt} K e^{-rt})``
    (below ~1e-308 of it) is reported as AT_INTRINSIC, vol 0.

    float32: the float32 inputs are promoted to double, solved exactly as in float64 and the vol is
    rounded to float32. The status is PRECISION (NaN) where float32 inputs cannot carry the
    information the vol comes from: with ``scale = max(S e^{-qt}, K e^{-rt})``, when an
    in-the-money option's time value ``price - intrinsic`` is below ``2**-21 * scale`` in
    magnitude (a price that little below the intrinsic value may be the rounding of one at or
    above it: PRECISION, not BELOW_INTRINSIC; one within float64's band of it is still
    AT_INTRINSIC), or when the room below the maximum, ``max - price``, is below
    ``2**-21 * scale``. 2**-21 is four float32 unit roundoffs: price, spot and strike each carry
    half an ulp of rounding, so a smaller difference has no correct digit. Out-of-the-money
    premiums keep their own relative precision in float32 and are never flagged for being small.

    Mismatched shapes always raise ValueError; bad values raise only with ``strict=True``. Inputs
    that are not real numbers (strings, complex, None, booleans) raise TypeError.
    """
    fast = _fast
    if fast is not None and strict is False:
        outs = fast(dtype, backend, price, spot, strike, t, rate, div, call)
        if outs is not None:   # None: not a call the C entry takes (runtime/fasttick.py)
            return outs if return_status else outs[0]
    dt = _checks.check_dtype(dtype)
    if type(backend) is not str or backend not in _BACKENDS:
        _checks.check_backend(backend)
    values = (price, spot, strike, t, rate, div, call)
    try:
        return _implied_vol(values, dt, backend, strict, return_status)
    except OverflowError as e:      # a Python int beyond float64's range, met converting it
        raise _checks.int_overflow(_ARG_NAMES, values, e) from None


def _implied_vol(values, dt, backend, strict, return_status):
    price, spot, strike, t, rate, div, call = values
    shape, on_device = shape_and_place(_ARG_NAMES, values)
    if call is not True:
        call = _call_flags(call)        # the same flags, and the same errors, as greeks
        values = (price, spot, strike, t, rate, div, call)
    n = 1
    for d in shape:
        n *= d
    if strict:
        args = dict(zip(_ARG_NAMES, values))
        _check_values(args, dt)

    if dispatch.choose("implied_vol", n, backend, on_device) == "gpu":
        vols, status = (_greeks._ops or _runtime_ops()).implied_vol(price, spot, strike, t, rate, div, call,
                                                                   dtype=dt, shape=shape)
    else:
        vols, status = _implied_vol_cpu(values, shape, n, dt)
    if strict:
        _check_status(args, shape, status, dt)
    return (vols, status) if return_status else vols


_ARG_NAMES = ("price", "spot", "strike", "t", "rate", "div", "call")
# The GPU runtime's C entry for a staged tick, set while a context has one (runtime/fasttick.py).
_fast = None
_BACKENDS = frozenset(_checks.BACKENDS)
_F64 = np.dtype(np.float64)
_I8 = np.dtype(np.int8)
# C types resolved once (a type given as a string is looked up on every call).
_DOUBLE_P, _FLOAT_P, _I8_P = ffi.typeof("double *"), ffi.typeof("float *"), ffi.typeof("int8_t *")


def _implied_vol_cpu(values: tuple, shape: tuple, n: int, dt: np.dtype):
    vols = np.empty(shape, dtype=dt)
    status = np.empty(shape, dtype=_I8)
    if n == 0:
        _checks.refuse_non_numbers(_ARG_NAMES[:6], values[:6])   # as at any other size, as greeks does
        return vols, status
    fr = take_frame()
    pointers, strides = fr.pointers, fr.strides
    f64 = dt is _F64
    # The converted arrays the C call reads stay referenced until it returns.
    keep = bind_inputs(pointers, strides, values[:6], dt, shape, fr.scratch64 if f64 else fr.scratch32,
                       _ARG_NAMES)
    flags = bind_flags(pointers, strides, 6, values[6], shape, fr.flag)   # checked by _call_flags
    solve = lib.tg_implied_vol_f64 if f64 else lib.tg_implied_vol_f32
    st = solve(n, fr.iv, ffi.cast(_DOUBLE_P if f64 else _FLOAT_P, ffi.from_buffer(vols)),
               ffi.cast(_I8_P, ffi.from_buffer(status)), 0)
    del keep, flags
    give_frame(fr)
    if st:
        check(st, "implied_vol")
    return vols, status


def _to_host(a):
    """`a` on the host: host values as they are (so that a check names their own type: "got bool",
    not "got an array of bool"), GPU arrays copied."""
    if isinstance(a, (np.ndarray, np.generic)) or not (hasattr(a, "__cuda_array_interface__")
                                                        or hasattr(a, "__dlpack_device__")):
        return a
    if hasattr(a, "get"):  # CuPy
        return np.asarray(a.get())
    if hasattr(a, "cpu"):  # PyTorch
        return a.cpu().numpy()
    return np.asarray(a)


def _check_values(args: dict, dt: np.dtype) -> None:
    """strict=True: the first bad element of each argument, in argument order, as converted to
    `dt` (what the solver reads: 1e39 is inf and 1e-50 is 0 in float32)."""
    host = {name: _to_host(args[name]) for name in _NAMES}
    for name in _NAMES:
        _checks.require_finite(name, host[name], dt)
    _checks.require_nonnegative("price", host["price"], dt)
    for name in ("spot", "strike", "t"):
        _checks.require_positive(name, host[name], dt)


def _check_status(args: dict, shape: tuple, status, dt: np.dtype) -> None:
    """strict=True: raise at the first element the solver could not give a vol."""
    status = _to_host(status).reshape(shape)
    bad = (status != IVStatus.OK) & (status != IVStatus.AT_INTRINSIC)
    if not bad.any():
        return
    flat = int(np.flatnonzero(bad.ravel())[0])
    index = flat if len(shape) <= 1 else tuple(int(i) for i in np.unravel_index(flat, shape))
    code = IVStatus(int(status.ravel()[flat]))
    # The inputs as the solver read them: rounded to dt (then, float32 too, used in double).
    with np.errstate(over="ignore", under="ignore"):
        seen = {k: np.asarray(_to_host(args[k]), dtype=np.float64).astype(dt).astype(np.float64)
                for k in _NAMES}
    v = {k: float(np.broadcast_to(a, shape).ravel()[flat]) for k, a in seen.items()}
    where = f"[{index}]" if shape else ""
    if code == IVStatus.BAD_INPUT:
        # _check_values passed every argument on its own, so what is left is the discounting, which
        # the solver does in double whatever dt is; the elements before this one passed it.
        require_discountable(seen["spot"], seen["strike"], seen["t"], seen["rate"], seen["div"],
                             np.dtype(np.float64), "BAD_INPUT")
        raise ValueError(f"price{where}: BAD_INPUT: the inputs are out of the solver's range (spot "
                         f"{v['spot']!r}, strike {v['strike']!r}, t {v['t']!r}, rate {v['rate']!r}, "
                         f"div {v['div']!r})")
    where = "price" + where
    is_call = bool(np.broadcast_to(_to_host(args["call"]), shape).ravel()[flat])
    with np.errstate(over="ignore", invalid="ignore"):
        fwd = float(v["spot"] * np.exp(-v["div"] * v["t"]))
        strike = float(v["strike"] * np.exp(-v["rate"] * v["t"]))
    intrinsic = max(fwd - strike if is_call else strike - fwd, 0.0)
    cap = fwd if is_call else strike
    detail = {
        IVStatus.BELOW_INTRINSIC: f"below the discounted intrinsic value {intrinsic!r}",
        IVStatus.ABOVE_MAXIMUM: f"at or above the no-arbitrage maximum {cap!r}",
        IVStatus.PRECISION: "too close for float32 to resolve to the no-arbitrage bounds "
                            f"[{intrinsic!r}, {cap!r})",
    }[code]
    raise ValueError(f"{where}: {code.name}: {v['price']!r} is {detail} "
                     f"({'call' if is_call else 'put'}, spot {v['spot']!r}, strike "
                     f"{v['strike']!r}, t {v['t']!r})")
