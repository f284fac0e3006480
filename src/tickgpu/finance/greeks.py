"""Black-Scholes-Merton prices and greeks of European options, on the CPU core or the GPU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tickgpu import dispatch
from tickgpu.finance import _checks

__all__ = ["Greeks", "greeks"]

GREEK_NAMES = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


@dataclass(frozen=True)
class Greeks:
    """Price and greeks of a batch of European options, each an array of the inputs' broadcast shape.

    Units follow QuantLib: ``vega``, ``rho`` and ``phi`` (dividend rho) per 1.00 change of vol,
    rate and dividend yield (divide by 100 for "per point"); ``theta`` and ``charm`` per year of
    calendar time (divide by 365 for per day); ``vanna`` = d delta / d vol; ``volga`` =
    d vega / d vol.
    """

    price: np.ndarray
    delta: np.ndarray
    gamma: np.ndarray
    vega: np.ndarray
    theta: np.ndarray
    rho: np.ndarray
    phi: np.ndarray
    vanna: np.ndarray
    volga: np.ndarray
    charm: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        """The ten arrays by name, in the order of the fields."""
        return {name: getattr(self, name) for name in GREEK_NAMES}


def greeks(spot, strike, t, rate, vol, div=0.0, call=True, *, dtype=np.float64, backend="auto",
           strict=False) -> Greeks:
    """Black-Scholes-Merton price and greeks of European options with a continuous dividend yield.

    Parameters
    ----------
    spot, strike : array_like
        Underlying price and strike, in currency, > 0.
    t : array_like
        Time to expiry in years, >= 0.
    rate, div : array_like
        Continuously compounded risk-free rate and dividend yield (per year, 0.05 = 5%).
        For Black-76 on futures pass the forward as ``spot`` and ``div = rate``.
    vol : array_like
        Black-Scholes volatility per sqrt(year), > 0 (0.2 = 20%).
    call : bool or array_like of bool
        True for calls, False for puts (an integer array of 0 and 1 is accepted too).
    dtype : numpy.float64 or numpy.float32
        Precision of the computation and of the results. float32 computes in float32 throughout.
    backend : {"auto", "cpu", "gpu"}
        Where to compute; "auto" leaves it to :func:`tickgpu.dispatch.choose`.
    strict : bool
        If True, the first bad element raises instead of giving NaN.

    Returns
    -------
    Greeks
        Arrays of the broadcast shape of the inputs (0-d arrays when all inputs are scalars), of
        `dtype`; units as in :class:`Greeks`.

    Raises
    ------
    ValueError
        Shapes that do not broadcast (always). With ``strict=True``, also the first bad element,
        naming the argument, its index and the reason (non-finite, spot <= 0, strike <= 0, t < 0,
        vol <= 0), e.g. ``"vol[3]: must be > 0, got -0.1"``.
    TypeError
        A `dtype` other than float64 / float32, or a `call` that is not boolean.

    Notes
    -----
    Without ``strict``, an element with a non-finite input, spot <= 0, strike <= 0, t < 0 or
    vol <= 0 gives NaN in all ten outputs, and the other elements are unaffected. At t == 0 the
    result is the intrinsic value with the limit greeks: in the money delta = +-1 and theta =
    -/+(r K - q S); out of the money everything 0; gamma, vega, vanna, volga 0; exactly at the
    money delta = +-1/2, gamma = +inf, theta = -inf (the limits as t -> 0). See csrc/tickgpu.h.
    """
    dt = _checks.check_dtype(dtype)
    _checks.check_backend(backend)
    args = {"spot": spot, "strike": strike, "t": t, "rate": rate, "vol": vol, "div": div, "call": call}
    shape = _checks.broadcast_shape(**args)
    on_device = _any_on_device(args.values())
    call = _call_flags(call)
    if strict:
        _check_elements(spot, strike, t, rate, vol, div)
    n = int(np.prod(shape, dtype=np.int64))
    where = dispatch.choose("greeks", n, backend, on_device=on_device)
    if where == "gpu":
        from tickgpu.runtime import ops

        out = ops.greeks(spot, strike, t, rate, vol, div, call, dtype=dt, shape=shape)
        return Greeks(**{name: out[name] for name in GREEK_NAMES})
    return _greeks_cpu(spot, strike, t, rate, vol, div, call, dt, shape)


def _greeks_cpu(spot, strike, t, rate, vol, div, call, dt: np.dtype, shape) -> Greeks:
    from tickgpu._native import as_input, check, ffi, lib, ptr

    n = int(np.prod(shape, dtype=np.int64))
    # Keep every array referenced until the call returns: the C core reads them in place.
    values = {}
    inputs = ffi.new("tg_bsm_inputs *")
    for name, a in (("spot", spot), ("strike", strike), ("t", t), ("rate", rate), ("vol", vol),
                    ("div", div)):
        arr, stride = as_input(a, shape, dt)
        values[name] = arr
        setattr(inputs, name, ptr(arr))
        setattr(inputs, "s_" + name, stride)
    flags, s_call = as_input(call, shape, np.uint8)
    values["call"] = flags
    inputs.call = ptr(flags, "uint8_t *")
    inputs.s_call = s_call

    results = {name: np.empty(shape, dtype=dt) for name in GREEK_NAMES}
    outputs = ffi.new("tg_greeks_outputs *")
    for name, a in results.items():
        setattr(outputs, name, ptr(a))
    run = lib.tg_greeks_f64 if dt == np.float64 else lib.tg_greeks_f32
    check(run(n, inputs, outputs, 0), "tg_greeks")
    return Greeks(**results)


def _call_flags(call):
    """`call` as uint8 flags (1 call, 0 put); a device array is passed through unchanged."""
    if _is_device_array(call):
        return call
    flags = np.asarray(call)
    if flags.dtype == np.bool_:
        return flags.astype(np.uint8)
    if np.issubdtype(flags.dtype, np.integer):
        _checks.require("call", flags, (flags == 0) | (flags == 1), "must be True/False (or 1/0)")
        return flags.astype(np.uint8)
    raise TypeError(f"call: must be bool or an array of bool, got {flags.dtype}")


def _check_elements(spot, strike, t, rate, vol, div) -> None:
    """strict=True: raise at the first bad element, argument by argument."""
    _checks.require_positive("spot", _host(spot))
    _checks.require_positive("strike", _host(strike))
    _checks.require_nonnegative("t", _host(t))
    _checks.require_finite("rate", _host(rate))
    _checks.require_positive("vol", _host(vol))
    _checks.require_finite("div", _host(div))


def _is_device_array(x) -> bool:
    if not (hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack_device__")):
        return False
    if isinstance(x, np.ndarray):
        return False
    try:
        from tickgpu.runtime import is_device_array
    except ImportError:
        return hasattr(x, "__cuda_array_interface__")
    return bool(is_device_array(x))


def _any_on_device(values) -> bool:
    return any(_is_device_array(v) for v in values)


def _host(x):
    """A host copy of a GPU array, for strict checks only (CuPy: .get(), PyTorch: .cpu())."""
    if not _is_device_array(x):
        return x
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    raise TypeError(f"strict=True cannot read a {type(x).__name__} on the host; pass strict=False")
