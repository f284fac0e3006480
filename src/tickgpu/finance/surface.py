"""Volatility surfaces: Black vols on an (expiry x strike) grid, interpolated like QuantLib's."""
from __future__ import annotations

import numpy as np

from tickgpu import dispatch
from tickgpu._native import as_input, check, ffi, lib
from tickgpu.finance import _checks
from tickgpu.finance.greeks import shape_and_place
from tickgpu.finance import greeks as _greeks
from tickgpu.finance.greeks import _host, _runtime_ops

__all__ = ["VolSurface"]

_MODES = {"variance": 0, "vol": 1}
_BACKENDS = frozenset(_checks.BACKENDS)
_F64 = np.dtype(np.float64)
_VOL, _VARIANCE = 0, 1
_ARG_NAMES = ("strike", "t")


def _check_variance_range(vols: np.ndarray, expiries: np.ndarray) -> None:
    """Variance interpolation works on sigma^2 t: refuse a grid point where that overflows or
    leaves the normal doubles (a nonzero vol whose variance underflows would read as 0)."""
    with np.errstate(over="ignore", under="ignore"):
        w = vols * vols * expiries[:, None]
    bad = ~np.isfinite(w) | ((vols > 0) & (w < 1e-300))
    if bad.any():
        i, j = (int(a) for a in np.argwhere(bad)[0])
        raise ValueError(f"vols[{i}, {j}]: total variance vol^2 t = {float(vols[i, j])!r}^2 x "
                         f"{float(expiries[i])!r} is outside what a double holds for "
                         "interpolation='variance'; use interpolation='vol'")


class VolSurface:
    """Black vols quoted on a grid of expiries and strikes, evaluated anywhere.

    Parameters
    ----------
    strikes : array_like, shape (nk,)
        Strictly increasing, finite strikes (currency), nk >= 1.
    expiries : array_like, shape (nt,)
        Strictly increasing, finite times to expiry in years, all > 0, nt >= 1.
    vols : array_like, shape (nt, nk)
        Black vols per sqrt(year), finite and >= 0; ``vols[i, j]`` is the vol at
        ``expiries[i]`` and ``strikes[j]``.
    interpolation : {"variance", "vol"}
        "variance" (default) is QuantLib's ``BlackVarianceSurface`` with bilinear interpolation:
        bilinear in total variance sigma^2 t over (t, strike), with an implicit zero-variance row at
        t = 0, so that before the first expiry the vol is the first expiry's. "vol" is bilinear in
        the vols themselves, flat in t before the first expiry. Bilinear in vol differs from
        bilinear in variance by up to ~30 bp of vol on ordinary grids.

    Notes
    -----
    Extrapolation: the vol is held flat in strike outside [strikes[0], strikes[-1]] (QuantLib's
    ``ConstantExtrapolation`` on both sides) and flat in t beyond the last expiry (QuantLib's
    rule: w(t) = w(T_last) t / T_last). Calendar arbitrage (total variance decreasing in t) is not
    checked. Any finite strikes are accepted, also a grid spanning more than the largest double
    (e.g. -1e308 and 1e308): the interpolation weights are formed without overflow.

    Raises
    ------
    ValueError
        A grid that breaks the rules above, naming the argument, the index and the reason, e.g.
        ``"expiries[2]: must be > expiries[1] (strictly increasing), got 0.5"``. With
        ``interpolation="variance"`` also a grid point whose total variance sigma^2 t a double cannot
        hold (vols beyond ~1e150, or vols and expiries so small that it falls below 1e-300):
        "vol" interpolation takes those.
    TypeError
        Grid values, strikes or times that are not real numbers (strings, complex, None, booleans).
    """

    __slots__ = ("_strikes", "_expiries", "_vols", "_interpolation", "_native")

    def __init__(self, strikes, expiries, vols, *, interpolation: str = "variance"):
        if type(interpolation) is not str or interpolation not in _MODES:
            raise ValueError(f"interpolation: must be 'variance' or 'vol', got {interpolation!r}")
        strikes = _axis("strikes", strikes, positive=False)
        expiries = _axis("expiries", expiries, positive=True)
        # Row-major whatever the input's order: the CPU and GPU kernels read vols[it * nk + ik].
        vols = np.array(_checks.real_array("vols", vols), dtype=np.float64, order="C")
        if vols.shape != (len(expiries), len(strikes)):
            raise ValueError(
                f"vols: must have shape (len(expiries), len(strikes)) = "
                f"{(len(expiries), len(strikes))}, got {vols.shape}"
            )
        _checks.require_nonnegative("vols", vols)
        if interpolation == "variance":
            _check_variance_range(vols, expiries)
        for a in (strikes, expiries, vols):
            a.flags.writeable = False
        self._strikes, self._expiries, self._vols = strikes, expiries, vols
        self._interpolation = interpolation
        self._native = None

    @property
    def strikes(self) -> np.ndarray:
        """The grid's strikes (read-only float64)."""
        return self._strikes

    @property
    def expiries(self) -> np.ndarray:
        """The grid's expiries in years (read-only float64)."""
        return self._expiries

    @property
    def vols(self) -> np.ndarray:
        """The grid's vols, shape (len(expiries), len(strikes)) (read-only float64)."""
        return self._vols

    @property
    def interpolation(self) -> str:
        """"variance" or "vol"."""
        return self._interpolation

    def __repr__(self) -> str:
        return (f"VolSurface({len(self._expiries)} expiries x {len(self._strikes)} strikes, "
                f"interpolation={self._interpolation!r})")

    def vol(self, strike, t, *, strict: bool = False, backend: str = "auto") -> np.ndarray:
        """Black vol per sqrt(year) at (strike, t), broadcast; float64.

        t is in years. Without `strict`, a non-finite strike or t, or t < 0, gives NaN; with
        it, the first such element raises ValueError naming the argument and index. With
        ``interpolation="variance"``, for every t up to the first expiry (subnormal t included)
        the vol is the first expiry's vol at that strike, and at t == 0 that is its limit as
        t -> 0.
        """
        return self._eval(strike, t, _VOL, strict, backend)

    def variance(self, strike, t, *, strict: bool = False, backend: str = "auto") -> np.ndarray:
        """Total Black variance sigma^2 t at (strike, t), broadcast; float64. Bad input as :meth:`vol`."""
        return self._eval(strike, t, _VARIANCE, strict, backend)

    def _eval(self, strike, t, what: int, strict: bool, backend: str) -> np.ndarray:
        if type(backend) is not str or backend not in _BACKENDS:
            _checks.check_backend(backend)
        try:
            return self._eval_checked(strike, t, what, strict, backend)
        except OverflowError as e:      # a Python int beyond float64's range, met converting it
            raise _checks.int_overflow(_ARG_NAMES, (strike, t), e) from None

    def _eval_checked(self, strike, t, what: int, strict: bool, backend: str) -> np.ndarray:
        values = (strike, t)
        shape, on_device = shape_and_place(_ARG_NAMES, values)
        if strict:
            _checks.require_finite("strike", _host(strike))
            _checks.require_nonnegative("t", _host(t))
        n = 1
        for d in shape:
            n *= d
        if dispatch.choose("surface", n, backend, on_device=on_device) == "gpu":
            return (_greeks._ops or _runtime_ops()).surface_eval(self._strikes, self._expiries, self._vols,
                                    _MODES[self._interpolation], strike, t, what=what, shape=shape)
        return self._eval_cpu(strike, t, what, shape, n)

    def _eval_cpu(self, strike, t, what: int, shape, n: int) -> np.ndarray:
        if self._native is None:
            grid = ffi.new("tg_surface *")
            grid.nk, grid.nt = len(self._strikes), len(self._expiries)
            grid.strikes = ffi.cast("double *", ffi.from_buffer(self._strikes))
            grid.expiries = ffi.cast("double *", ffi.from_buffer(self._expiries))
            grid.vols = ffi.cast("double *", ffi.from_buffer(self._vols))
            grid.mode = _MODES[self._interpolation]
            self._native = grid     # the arrays it points into live as long as self
        scratch = ffi.new("double[2]")
        ptrs, keep = [], []
        for i, v in enumerate((strike, t)):
            tv = type(v)
            if tv is float or tv is int:
                scratch[i] = v
                ptrs.append((scratch + i, 0))
            elif tv is np.ndarray and v.dtype is _F64 and v.shape == shape and v.flags.c_contiguous:
                ptrs.append((ffi.cast("double *", ffi.from_buffer(v)), 1 if v.size != 1 else 0))
            else:
                a, stride = as_input(_checks.real_array(_ARG_NAMES[i], v), shape, np.float64)
                keep.append(a)
                ptrs.append((ffi.cast("double *", ffi.from_buffer(a)), stride))
        out = np.empty(shape, dtype=np.float64)
        (k, s_k), (tt, s_t) = ptrs
        check(lib.tg_surface_eval(self._native, n, k, s_k, tt, s_t, ffi.cast("double *", ffi.from_buffer(out)),
                                  what, 0), "tg_surface_eval")
        del keep, scratch
        return out


def _axis(name: str, values, *, positive: bool) -> np.ndarray:
    a = np.array(_checks.real_array(name, values), dtype=np.float64)
    if a.ndim != 1 or a.size < 1:
        raise ValueError(f"{name}: must be a 1-D array of at least one value, got shape {a.shape}")
    _checks.require_positive(name, a) if positive else _checks.require_finite(name, a)
    # Compared, not differenced: the difference of strikes near -1e308 and 1e308 overflows.
    down = a[1:] <= a[:-1]
    if np.any(down):
        i = int(np.flatnonzero(down)[0]) + 1
        raise ValueError(f"{name}[{i}]: must be > {name}[{i - 1}] (strictly increasing), "
                         f"got {float(a[i])!r} after {float(a[i - 1])!r}")
    return a

