"""Causal calibration: observers whose scale at tick t depends on data up to t and nothing after.

An observer sees one batch per tick (``update(x_t)``) and keeps a running state: min/max or absmax,
either an exponential moving average (``alpha`` = weight of the past, 0.99 by default) or, with
``alpha=None``, the plain running extremes. Its quantization parameters are a function of that state
only, so they can never see the future; :func:`tickgpu.quant.check_causal` verifies this by
perturbing the future and comparing bit for bit.

Degenerate data never gives a zero, infinite or NaN scale: every range is floored at
:data:`tickgpu.quant.schemes.EPS` (2**-100). Non-finite values (NaN, +-inf) are *masked*: they are left
out of the statistics and counted in ``n_nonfinite``; with ``strict=True`` they raise ValueError naming
the tick and index instead. Before the first finite value an observer is not ``ready`` and reports the
floor scale.

For live inference the scales are frozen; :class:`ScheduledScales` refreshes them on a schedule from a
closed window of past ticks and swaps them in atomically.
"""
from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np

from tickgpu.quant.schemes import EPS

_EPS64 = float(EPS)


def calibration_noise(x: np.ndarray, sigma: float, seed: int, step: int) -> np.ndarray:
    """``x + sigma * N(0, 1)``, the noise drawn from a counter-based stream keyed by (seed, step).

    The draw at a tick depends only on the seed, the tick number and the batch's shape, never on
    other ticks, so it is causal and replayable.
    """
    if sigma == 0:
        return x
    gen = np.random.Generator(np.random.Philox(key=[int(seed) & (2**64 - 1), int(step)]))
    return x + sigma * gen.standard_normal(np.shape(x))


def _qrange(bits: int, symmetric: bool) -> tuple[int, int]:
    if bits not in (8, 16):
        raise ValueError(f"bits: must be 8 or 16, got {bits}")
    top = 2 ** (bits - 1) - 1
    return (-top, top) if symmetric else (-top - 1, top)


def qparams_from_range(lo, hi, *, bits: int = 8, symmetric: bool = False):
    """float32 scale and int32 zero point for the range [lo, hi] (arrays or scalars).

    Symmetric: ``s = max(max(|lo|, |hi|), EPS) / qmax``, ``z = 0`` (qmax = 127 or 32767).
    Asymmetric: the range is widened to hold 0, ``s = max(hi - lo, EPS) / (qmax - qmin)``,
    ``z = clip(qmin - rint(lo / s), qmin, qmax)``. Non-finite bounds are treated as 0.
    """
    qmin, qmax = _qrange(bits, symmetric)
    lo = np.nan_to_num(np.asarray(lo, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    hi = np.nan_to_num(np.asarray(hi, np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if symmetric:
        a = np.maximum(np.maximum(np.abs(lo), np.abs(hi)), _EPS64)
        # float32 rounding of a huge float64 range must not give inf: cap at float32's max.
        scale = np.minimum(a / qmax, np.finfo(np.float32).max).astype(np.float32)
        return scale, np.zeros(scale.shape, np.int32)
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    scale = np.minimum(np.maximum(hi - lo, _EPS64) / (qmax - qmin), np.finfo(np.float32).max)
    scale = scale.astype(np.float32)
    zp = np.clip(qmin - np.rint(lo / scale.astype(np.float64)), qmin, qmax).astype(np.int32)
    return scale, zp


class Observer:
    """Base class: a streaming statistic of ticks ``x_0, x_1, ...`` and the qparams it implies.

    Parameters
    ----------
    alpha : float or None
        EMA weight of the past, in [0, 1): ``state = alpha * state + (1 - alpha) * batch_stat``, the
        first batch initializing it. None keeps the plain running extremes.
    axis : int or None
        None: one scale for the whole tensor. An int: one scale per index along that axis (e.g. -1
        for per-feature scales of (batch, features) ticks), reducing over the other axes.
    bits, symmetric : int, bool
        The integer grid the scales are for (8 or 16 bits).
    noise_sigma, seed : float, int
        Optional Gaussian noise added to each tick before it is observed (see
        :func:`calibration_noise`); 0 turns it off.
    strict : bool
        Raise ValueError on non-finite input instead of masking it.
    """

    symmetric_default = False

    def __init__(self, *, alpha: float | None = 0.99, axis: int | None = None, bits: int = 8,
                 symmetric: bool | None = None, noise_sigma: float = 0.0, seed: int = 0,
                 strict: bool = False):
        if alpha is not None and not (0.0 <= float(alpha) < 1.0):
            raise ValueError(f"alpha: must be in [0, 1) or None, got {alpha!r}")
        if not (np.isfinite(noise_sigma) and noise_sigma >= 0):
            raise ValueError(f"noise_sigma: must be finite and >= 0, got {noise_sigma!r}")
        self.alpha = None if alpha is None else float(alpha)
        self.axis = axis
        self.bits = bits
        self.symmetric = self.symmetric_default if symmetric is None else bool(symmetric)
        _qrange(bits, self.symmetric)
        self.noise_sigma = float(noise_sigma)
        self.seed = int(seed)
        self.strict = strict
        self.step = 0  # ticks seen
        self.n_nonfinite = 0
        self._lo = None  # float64 state arrays (per channel) or None before the first finite value
        self._hi = None

    # -- statistics ------------------------------------------------------------------------------
    def _batch_stats(self, x: np.ndarray):
        """(lo, hi, has_data) of one tick over the reduced axes, non-finite values left out."""
        finite = np.isfinite(x)
        if self.axis is None:
            red = None
        else:
            ax = self.axis % x.ndim
            red = tuple(i for i in range(x.ndim) if i != ax)
        lo = np.min(np.where(finite, x, np.inf), axis=red, initial=np.inf)
        hi = np.max(np.where(finite, x, -np.inf), axis=red, initial=-np.inf)
        return np.atleast_1d(lo), np.atleast_1d(hi), np.atleast_1d(np.any(finite, axis=red))

    def _merge(self, old, new, has, extreme):
        if old is None:
            return np.where(has, new, np.nan)
        fresh = np.isnan(old) & has
        if self.alpha is None:
            merged = extreme(old, new)
        else:
            merged = self.alpha * old + (1.0 - self.alpha) * new
        return np.where(fresh, new, np.where(has, merged, old))

    def update(self, x) -> "Observer":
        """Observe tick t's batch (any shape; float). Returns self."""
        x = np.asarray(x, dtype=np.float64)
        bad = ~np.isfinite(x)
        if bad.any():
            if self.strict:
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"x (tick {self.step}) at index {idx}: must be finite, got {x[idx]!r}")
            self.n_nonfinite += int(bad.sum())
        x = calibration_noise(x, self.noise_sigma, self.seed, self.step)
        lo, hi, has = self._batch_stats(x)
        self._lo = self._merge(self._lo, lo, has, np.minimum)
        self._hi = self._merge(self._hi, hi, has, np.maximum)
        self.step += 1
        return self

    # -- results ---------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True once every channel has seen at least one finite value."""
        return self._lo is not None and not np.isnan(self._lo).any()

    @property
    def range(self) -> tuple[np.ndarray, np.ndarray]:
        """float64 (lo, hi) per channel (shape (1,) for a per-tensor observer); 0 where unseen."""
        if self._lo is None:
            return np.zeros(1), np.zeros(1)
        return np.nan_to_num(self._lo, nan=0.0), np.nan_to_num(self._hi, nan=0.0)

    def qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """float32 scale and int32 zero point, per channel (shape (1,) per tensor); always finite > 0."""
        lo, hi = self.range
        return qparams_from_range(lo, hi, bits=self.bits, symmetric=self.symmetric)

    def trace(self, series) -> dict[str, np.ndarray]:
        """Run a copy of this observer over ``series`` (ticks along axis 0, or a list of batches).

        Returns arrays with one row per tick t: ``scale``, ``zero_point``, ``lo``, ``hi``, the
        state after observing tick t. The observer itself is left unchanged.
        """
        obs = copy.deepcopy(self)
        out: dict[str, list] = {"scale": [], "zero_point": [], "lo": [], "hi": []}
        for x in series:
            obs.update(x)
            s, z = obs.qparams()
            lo, hi = obs.range
            out["scale"].append(s)
            out["zero_point"].append(z)
            out["lo"].append(lo)
            out["hi"].append(hi)
        return {k: np.array(v) for k, v in out.items()}


class MinMaxObserver(Observer):
    """EMA (or running) min and max; asymmetric scales and zero points by default."""

    symmetric_default = False


class AbsMaxObserver(Observer):
    """EMA (or running) absolute maximum; symmetric scales (zero point 0)."""

    symmetric_default = True

    def _batch_stats(self, x):
        lo, hi, has = super()._batch_stats(x)
        a = np.maximum(np.abs(np.where(has, lo, 0.0)), np.abs(np.where(has, hi, 0.0)))
        return -a, a, has


class EmaStandardizer:
    """Causal feature standardization: tick t is scaled by the EMA mean and std of ticks < t.

    ``z_t = (x_t - mean_{t-1}) / max(std_{t-1}, floor)``; the first tick (no past) gives 0.
    Statistics are per feature (last axis), updated after the tick is transformed, so z_t never
    depends on x_t's own value or on anything later. Non-finite features give NaN and are not
    added to the statistics.
    """

    def __init__(self, alpha: float = 0.99, floor: float = 1e-12):
        if not (0.0 <= alpha < 1.0):
            raise ValueError(f"alpha: must be in [0, 1), got {alpha!r}")
        self.alpha, self.floor = float(alpha), float(floor)
        self.mean = None
        self.var = None

    def transform(self, series) -> np.ndarray:
        """Standardize a (T, F) series tick by tick (one row per tick); returns float64 (T, F)."""
        x = np.asarray(series, np.float64)
        if x.ndim != 2:
            raise ValueError(f"series: must be 2-D (ticks, features), got shape {x.shape}")
        out = np.zeros_like(x)
        a = self.alpha
        for t in range(x.shape[0]):
            row = x[t]
            ok = np.isfinite(row)
            if self.mean is None:
                out[t] = np.where(ok, 0.0, np.nan)
                self.mean = np.where(ok, row, np.nan)
                self.var = np.where(ok, 0.0, np.nan)
                continue
            std = np.maximum(np.sqrt(np.nan_to_num(self.var, nan=0.0)), self.floor)
            z = (row - np.nan_to_num(self.mean, nan=0.0)) / std
            out[t] = np.where(ok & ~np.isnan(self.mean), z, np.where(ok, 0.0, np.nan))
            fresh = ok & np.isnan(self.mean)
            d = row - self.mean
            new_mean = self.mean + (1 - a) * d
            new_var = a * (self.var + (1 - a) * d * d)
            self.mean = np.where(fresh, row, np.where(ok, new_mean, self.mean))
            self.var = np.where(fresh, 0.0, np.where(ok, new_var, self.var))
        return out


@dataclass(frozen=True)
class FrozenScales:
    """Quantization parameters frozen for live use: immutable, swapped as one object.

    ``window`` is the half-open tick range [start, end) they were computed from; ``version`` counts
    updates (0 for the initial parameters).
    """

    scale: np.ndarray
    zero_point: np.ndarray
    version: int
    window: tuple[int, int]


class ScheduledScales:
    """Frozen scales refreshed every ``every`` ticks from the closed past window of ``window`` ticks.

    Live code reads :attr:`current` (an immutable :class:`FrozenScales`) to quantize tick t *before*
    calling ``observe(x_t)``; the scales it gets were computed from ticks strictly before t. At each
    scheduled tick, a fresh observer from ``make_observer`` runs over the window of ticks
    [t - window, t), and the result replaces :attr:`current` in one reference assignment under a
    lock, so a reader sees either the old parameters or the new ones, never a mixture.

    Parameters
    ----------
    make_observer : callable
        Returns a fresh :class:`Observer`.
    window, every : int
        Window length and update period, in ticks (>= 1).
    initial : (scale, zero_point), optional
        Parameters before the first update; without them, the floor scale of an unready observer
        (so live code should check ``current.version > 0`` or pass ``initial``).
    """

    def __init__(self, make_observer, *, window: int, every: int, initial=None):
        if window < 1 or every < 1:
            raise ValueError(f"window and every: must be >= 1, got window={window}, every={every}")
        self.make_observer = make_observer
        self.window, self.every = int(window), int(every)
        if initial is None:
            initial = make_observer().qparams()
        s, z = initial
        self._current = FrozenScales(np.atleast_1d(np.array(s, np.float32)),
                                     np.atleast_1d(np.array(z, np.int32)), 0, (0, 0))
        self._past: list[np.ndarray] = []
        self.step = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> FrozenScales:
        return self._current

    def observe(self, x) -> None:
        """Record tick ``step``'s batch; refresh the scales when the schedule says so."""
        self._past.append(np.array(x, np.float64, copy=True))
        if len(self._past) > self.window:
            self._past.pop(0)
        self.step += 1
        if self.step % self.every == 0:
            self.apply(self.compute(self.step))

    def compute(self, end: int) -> FrozenScales:
        """Scales from the window [end - window, end) of recorded ticks (all strictly in the past)."""
        obs = self.make_observer()
        for x in self._past:
            obs.update(x)
        s, z = obs.qparams()
        start = max(end - len(self._past), 0)
        return FrozenScales(s, z, self._current.version + 1, (start, end))

    def apply(self, frozen: FrozenScales) -> None:
        with self._lock:
            self._current = frozen

    def trace(self, series) -> dict[str, np.ndarray]:
        """Scales in force when each tick of ``series`` is quantized (state left unchanged)."""
        me = copy.copy(self)
        me._past = list(self._past)
        me._lock = threading.Lock()
        scale, zp, version = [], [], []
        for x in series:
            cur = me.current
            scale.append(cur.scale)
            zp.append(cur.zero_point)
            version.append(cur.version)
            me.observe(x)
        return {"scale": np.array(scale), "zero_point": np.array(zp), "version": np.array(version)}
