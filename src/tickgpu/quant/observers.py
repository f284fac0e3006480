"""Causal calibration: observers whose scale at tick t depends on data up to t and nothing after.

An observer sees one batch per tick (``update(x_t)``) and keeps a running state: min/max or absmax,
either an exponential moving average (``alpha`` = weight of the past, 0.99 by default) or, with
``alpha=None``, the plain running extremes. Its quantization parameters are a function of that state
only, so they can never see the future; :func:`tickgpu.quant.check_causal` verifies this by
perturbing the future and comparing bit for bit.

Degenerate data never gives a zero, infinite or NaN scale: every range is floored at
:data:`tickgpu.quant.schemes.EPS` (2**-100). Non-finite values (NaN, +-inf) are *masked*: they are left
out of the statistics and counted in ``n_nonfinite``; with ``strict=True`` they raise ValueError naming
the tick and index instead. Finite values beyond float32's range (|x| > 3.4e38, possible in float64
input) count as +-float32 max, so a statistic never overflows. Before the first finite value an
observer is not ``ready`` and reports the floor scale.

For live inference the scales are frozen; :class:`ScheduledScales` refreshes them on a schedule from a
closed window of past ticks and swaps them in atomically.
"""
from __future__ import annotations

import copy
import math
import numbers
import threading
from dataclasses import dataclass

import numpy as np

from tickgpu.quant.schemes import EPS

_EPS64 = float(EPS)
_F32MAX = float(np.finfo(np.float32).max)
_KEY_MASK = 2**64 - 1


def _check_sigma(sigma, name: str) -> float:
    """A noise level as a float: a real number (not a bool), finite and >= 0."""
    if isinstance(sigma, np.ndarray) and sigma.ndim == 0 and sigma.dtype.kind in "iuf":
        sigma = sigma.item()
    if isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, numbers.Real):
        raise TypeError(f"{name}: must be a real number, got {sigma!r}")
    value = float(sigma)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: must be finite and >= 0, got {sigma!r}")
    return value


def _check_alpha(alpha, or_none: str = "") -> float:
    """An EMA weight of the past as a float: a real number (not a bool) in [0, 1)."""
    if isinstance(alpha, np.ndarray) and alpha.ndim == 0 and alpha.dtype.kind in "iuf":
        alpha = alpha.item()
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha: must be a real number in [0, 1){or_none}, got {alpha!r}")
    if not 0.0 <= float(alpha) < 1.0:
        raise ValueError(f"alpha: must be in [0, 1){or_none}, got {alpha!r}")
    return float(alpha)


def _check_flag(value, name: str) -> bool:
    """A bool (NumPy's too): a string such as 'no' would otherwise count as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: must be a bool, got {value!r}")
    return bool(value)


def _check_count(value, name: str) -> int:
    """A tick count (window, period) as an int >= 1; bools and non-integers refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: must be an int >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name}: must be >= 1, got {value!r}")
    return int(value)


def _real_batch(x, what: str) -> np.ndarray:
    """A tick's batch as float64 (no copy where it already is); TypeError naming `what` for values
    that are not real numbers (complex, strings, objects)."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise TypeError(f"{what}: must be real numbers, got {x.dtype}")
    return x.astype(np.float64, copy=False)


def calibration_noise(x: np.ndarray, sigma: float, seed: int, step: int) -> np.ndarray:
    """``x + sigma * N(0, 1)``, the noise drawn from a counter-based stream keyed by (seed, step).

    The draw at a tick depends only on the seed, the tick number and the batch's shape, never on
    other ticks, so it is causal and replayable. The Philox key is ``(seed mod 2**64, step mod
    2**64)`` as two uint64 words, so distinct seeds (negative ones and those past 2**63 included)
    give distinct noise.

    Raises TypeError for a sigma that is not a real number, ValueError for one that is not finite
    and >= 0.
    """
    sigma = _check_sigma(sigma, "sigma")
    if sigma == 0:
        return x
    key = np.array([int(seed) & _KEY_MASK, int(step) & _KEY_MASK], dtype=np.uint64)
    gen = np.random.Generator(np.random.Philox(key=key))
    return x + sigma * gen.standard_normal(np.shape(x))


def _qrange(bits: int, symmetric: bool) -> tuple[int, int]:
    if type(bits) is bool or not isinstance(bits, (int, np.integer)) or bits not in (8, 16):
        raise ValueError(f"bits: must be the integer 8 or 16, got {bits!r}")
    bits = int(bits)
    top = 2 ** (bits - 1) - 1
    return (-top, top) if symmetric else (-top - 1, top)


def _real_bound(v, name: str) -> np.ndarray:
    """A range bound (or a frozen parameter) as an array of real numbers (Python ints past int64 too); TypeError naming it
    for complex values, bools, strings or objects."""
    a = np.asarray(v)
    if a.dtype.kind == "O" and all(isinstance(e, numbers.Real) and not isinstance(e, (bool, np.bool_))
                                   for e in a.flat):
        a = a.astype(np.float64)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name}: must be real numbers, got dtype {a.dtype}")
    return a


def qparams_from_range(lo, hi, *, bits: int = 8, symmetric: bool = False):
    """float32 scale and int32 zero point for the range [lo, hi] (arrays or scalars).

    Symmetric: ``s = max(max(|lo|, |hi|), EPS) / qmax``, ``z = 0`` (qmax = 127 or 32767).
    Asymmetric: the range is widened to hold 0, ``s = max(hi - lo, EPS) / (qmax - qmin)``,
    ``z = clip(qmin - rint(lo / s), qmin, qmax)``. NaN bounds are treated as 0 and infinite ones as
    +-float64 max; lo > hi raises ValueError naming the index, and so do shapes that do not
    broadcast; bounds that are not real numbers (complex, bool, strings) raise TypeError.

    A scale past float32's max (a range wider than about 8.7e40 for 8 bits) is capped there; the
    grid then covers only part of the range, and the zero point keeps 0 at the same relative place
    in it: ``z = qmin + rint((qmax - qmin) * -lo / (hi - lo))`` (the middle for a symmetric range), so
    values on both sides of 0 stay representable.
    """
    qmin, qmax = _qrange(bits, symmetric)
    big = np.finfo(np.float64).max
    lo, hi = _real_bound(lo, "lo"), _real_bound(hi, "hi")
    try:
        np.broadcast_shapes(lo.shape, hi.shape)
    except ValueError:
        raise ValueError(f"lo, hi: shapes {lo.shape} and {hi.shape} do not broadcast") from None
    lo = np.nan_to_num(lo.astype(np.float64), nan=0.0, posinf=big, neginf=-big)
    hi = np.nan_to_num(hi.astype(np.float64), nan=0.0, posinf=big, neginf=-big)
    inverted = lo > hi
    if np.any(inverted):
        i = tuple(int(a) for a in np.argwhere(np.broadcast_to(inverted, np.broadcast_shapes(lo.shape, hi.shape)))[0])
        at = f"[{', '.join(map(str, i))}]" if i else ""
        raise ValueError(f"lo{at}, hi{at}: the range is inverted, lo {float(np.broadcast_to(lo, inverted.shape)[i])!r} "
                         f"> hi {float(np.broadcast_to(hi, inverted.shape)[i])!r}")
    f32max = float(np.finfo(np.float32).max)
    if symmetric:
        a = np.maximum(np.maximum(np.abs(lo), np.abs(hi)), _EPS64)
        # float32 rounding of a huge float64 range must not give inf: cap at float32's max.
        scale = np.minimum(a / qmax, f32max).astype(np.float32)
        return scale, np.zeros(scale.shape, np.int32)
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    with np.errstate(over="ignore"):
        wide = np.maximum(hi - lo, _EPS64) / (qmax - qmin)   # inf where hi - lo overflows float64
        scale = np.minimum(wide, f32max).astype(np.float32)
        zp = np.clip(qmin - np.rint(lo / scale.astype(np.float64)), qmin, qmax)
    capped = wide > f32max
    if np.any(capped):
        # -lo / s no longer fits the grid: place 0 at its fraction of the range instead (taken on
        # halves, which cannot overflow).
        half = np.where(capped, hi / 2 - lo / 2, 1.0)
        zp = np.where(capped, qmin + np.rint((qmax - qmin) * ((-lo / 2) / half)), zp)[()]
    return scale, zp.astype(np.int32)


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

    Raises TypeError for arguments of the wrong type (an alpha, seed or bits that is not a number
    of its kind, bools included; symmetric or strict not a bool), ValueError for values out of
    range (alpha outside [0, 1), bits not 8 or 16, a negative or non-finite noise_sigma).
    """

    symmetric_default = False

    def __init__(self, *, alpha: float | None = 0.99, axis: int | None = None, bits: int = 8,
                 symmetric: bool | None = None, noise_sigma: float = 0.0, seed: int = 0,
                 strict: bool = False):
        self.alpha = None if alpha is None else _check_alpha(alpha, " or None")
        noise_sigma = _check_sigma(noise_sigma, "noise_sigma")
        if axis is not None and (isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer))):
            raise TypeError(f"axis: must be an int or None, got {axis!r}")
        self.axis = None if axis is None else int(axis)
        self.symmetric = self.symmetric_default if symmetric is None else _check_flag(symmetric, "symmetric")
        _qrange(bits, self.symmetric)
        self.bits = int(bits)
        self.noise_sigma = noise_sigma
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed: must be an int, got {seed!r}")
        self.seed = int(seed)
        self.strict = _check_flag(strict, "strict")
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
        # Clamped to float32's range (only float64 input reaches past it): an EMA of values near
        # float64's max would overflow to inf, and no float32 scale could cover them anyway.
        lo = np.clip(lo, -_F32MAX, _F32MAX)
        hi = np.clip(hi, -_F32MAX, _F32MAX)
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

    def check_batch(self, x, tick: int, channels: int | None = None,
                    source: str = "earlier ticks") -> np.ndarray:
        """``x`` as float64 (not copied where it already is), checked as tick ``tick``'s batch
        without observing it: real numbers; for a per-channel observer at least 1-D, the axis in
        range and ``channels`` channels along it (None: any number; ``source`` says where that
        count comes from in the error); finite with ``strict``.

        Raises TypeError (complex, strings, objects) or ValueError naming the tick (and the shapes
        or the index), as :meth:`update` does.
        """
        x = _real_batch(x, f"x (tick {tick})")
        if self.axis is not None:
            if x.ndim == 0:
                raise ValueError(f"x (tick {tick}): a per-channel observer (axis={self.axis}) needs "
                                 f"at least 1-D batches, got a scalar")
            if not -x.ndim <= self.axis < x.ndim:
                raise ValueError(f"axis: {self.axis} is out of range for tick {tick}'s batch of shape "
                                 f"{x.shape} ({x.ndim}-D)")
            n = x.shape[self.axis % x.ndim]
            if n == 0:
                # a first such batch would fix the observer at no channel for good
                raise ValueError(f"x (tick {tick}): a per-channel observer (axis={self.axis}) needs at "
                                 f"least one channel, got shape {x.shape}")
            if channels is not None and n != channels:
                raise ValueError(f"x (tick {tick}): has {n} channels along axis {self.axis} (shape "
                                 f"{x.shape}), the observer has {channels} from {source}")
        if self.strict:
            bad = ~np.isfinite(x)
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"x (tick {tick}) at index {idx}: must be finite, got {x[idx]!r}")
        return x

    def update(self, x) -> "Observer":
        """Observe tick t's batch (any shape; float). Returns self.

        Raises ValueError (naming the tick and both shapes) when a per-channel observer gets a
        batch with a different number of channels than the batches before, a scalar, or a batch
        with fewer dimensions than its axis needs; TypeError for values that are not real numbers
        (complex, strings, objects). The observer is unchanged after an error.
        """
        x = self.check_batch(x, self.step, None if self._lo is None else self._lo.shape[0])
        bad = ~np.isfinite(x)
        if bad.any():
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
    def seen(self) -> np.ndarray:
        """bool per channel (shape (1,) per tensor): whether it has seen a finite value."""
        if self._lo is None:
            return np.zeros(1, bool)
        return ~np.isnan(self._lo)

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

    ``z_t = (x_t - mean_{t-1}) / max(std_{t-1}, floor)``; a feature's first ``warmup`` finite
    values give 0 (the first always: it has no past). Statistics are per feature (last axis),
    updated after the tick is transformed, so z_t never depends on x_t's own value or on anything
    later. Non-finite features give NaN and are not added to the statistics. Finite values
    beyond float32's range (+-3.4e38) are clamped to it, in the transform and the statistics, so
    that one absurd value cannot overflow the variance and wreck every later z.

    The floor is absolute. Right after the first value the variance is 0 (and stays tiny while a
    feature barely moves), so with the default ``warmup=1`` a change of 1e-3 at tick 1 gives
    z = 1e9: pass a warm-up of a few times ``1 / (1 - alpha)`` ticks, or clip z, where that
    matters. (The default is what the shipped signal model was trained with and what the native
    core's ``tg_signal_update`` computes.)

    Raises ValueError for alpha outside [0, 1), a floor that is not finite and > 0, a warm-up that
    is not an integer >= 1, and a series that is not 2-D or whose feature count differs from the
    one the statistics were built on; TypeError for arguments or a series that are not real
    numbers (complex, strings, bools in a number's place).
    """

    def __init__(self, alpha: float = 0.99, floor: float = 1e-12, warmup: int = 1):
        alpha = _check_alpha(alpha)
        for name, v in (("floor", floor), ("warmup", warmup)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name}: must be a real number, got {v!r}")
        if not (math.isfinite(floor) and floor > 0):
            raise ValueError(f"floor: must be finite and > 0, got {floor!r}")
        if not (math.isfinite(warmup) and int(warmup) == warmup and warmup >= 1):
            raise ValueError(f"warmup: must be an integer >= 1, got {warmup!r}")
        self.alpha, self.floor, self.warmup = alpha, float(floor), int(warmup)
        self.mean = None
        self.var = None
        self.count = None  # finite values seen, per feature

    def transform(self, series) -> np.ndarray:
        """Standardize a (T, F) series tick by tick (one row per tick); returns float64 (T, F)."""
        x = _real_batch(series, "series")
        if x.ndim != 2:
            raise ValueError(f"series: must be 2-D (ticks, features), got shape {x.shape}")
        if self.mean is not None and x.shape[1] != self.mean.shape[0]:
            raise ValueError(f"series: has {x.shape[1]} features (shape {x.shape}), the statistics "
                             f"were built on {self.mean.shape[0]}")
        out = np.zeros_like(x)
        a = self.alpha
        for t in range(x.shape[0]):
            ok = np.isfinite(x[t])
            row = np.clip(x[t], -_F32MAX, _F32MAX)
            if self.mean is None:
                out[t] = np.where(ok, 0.0, np.nan)
                self.mean = np.where(ok, row, np.nan)
                self.var = np.where(ok, 0.0, np.nan)
                self.count = ok.astype(np.int64)
                continue
            std = np.maximum(np.sqrt(np.nan_to_num(self.var, nan=0.0)), self.floor)
            z = (row - np.nan_to_num(self.mean, nan=0.0)) / std
            warm = self.count >= self.warmup   # (>= 1 means the mean is not NaN)
            out[t] = np.where(ok & warm, z, np.where(ok, 0.0, np.nan))
            self.count = self.count + ok
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

    ``scale`` (float32) and ``zero_point`` (int32) are read-only 1-D copies of what was passed, so
    neither the caller nor a reader can change parameters that are live. ``window`` is the half-open
    tick range [start, end) they were computed from; ``version`` counts updates (0 for the initial
    parameters).

    Raises
    ------
    ValueError
        A scale that is not finite and > 0 after rounding to float32 (naming its index), a zero
        point that is not an integer in int32's range, or shapes that do not broadcast.
    TypeError
        A scale or zero point that is not a real number (complex, bool, a string).
    """

    scale: np.ndarray
    zero_point: np.ndarray
    version: int
    window: tuple[int, int]

    def __post_init__(self):
        scale = np.atleast_1d(_real_bound(self.scale, "scale").astype(np.float64))   # a copy
        zp = np.atleast_1d(_real_bound(self.zero_point, "zero_point").astype(np.float64))
        if scale.ndim != 1 or zp.ndim != 1:
            raise ValueError(f"scale, zero_point: must be scalars or 1-D, got shapes {scale.shape} and {zp.shape}")
        if zp.shape[0] not in (1, scale.shape[0]) and scale.shape[0] != 1:
            raise ValueError(f"scale, zero_point: shapes {scale.shape} and {zp.shape} do not broadcast")
        with np.errstate(over="ignore"):
            s32 = scale.astype(np.float32)
        bad = ~(np.isfinite(s32) & (s32 > 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"scale[{i}]: must be finite and > 0 as a float32, got {float(scale[i])!r}")
        bad = ~np.isfinite(zp) | (zp != np.rint(zp)) | (np.abs(zp) > 2**31 - 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"zero_point[{i}]: must be an int32 integer, got {float(zp[i])!r}")
        z32 = zp.astype(np.int32)
        s32.flags.writeable = False
        z32.flags.writeable = False
        object.__setattr__(self, "scale", s32)
        object.__setattr__(self, "zero_point", z32)


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
        Parameters before the first update: scales finite and > 0, zero points integers on the
        observer's grid. Without them, the floor scale of an unready observer (so live code should
        check ``current.version > 0`` or pass ``initial``).

    A scheduled update whose window holds no finite value in some channel (a NaN gap, a halted
    feed) would give that channel the floor scale, which quantizes normal data to +-qmax. Such an
    update keeps the previous parameters of that channel; when no channel can be updated (or the
    previous parameters have another shape, as the unready initial ones of a per-channel observer
    do) the previous :class:`FrozenScales` stays in force, version unchanged.

    Each observed batch is checked before it is recorded (:meth:`Observer.check_batch`), against the
    observer from ``make_observer`` and the channel count of per-channel ``initial`` parameters or
    else of the first batch: a batch the observer would refuse (complex values, another channel
    count, a non-finite value for a strict observer) raises naming the tick and leaves the state as
    it was, so the following ticks go on as if it had not been offered.

    Raises
    ------
    TypeError
        window or every not an int (a bool, a float, a string); make_observer not a callable that
        returns an :class:`Observer`; ``initial`` not a (scale, zero_point) pair of real numbers.
    ValueError
        window or every < 1; bad ``initial`` (naming the element and the reason).
    """

    def __init__(self, make_observer, *, window: int, every: int, initial=None):
        self.window = _check_count(window, "window")
        self.every = _check_count(every, "every")
        if not callable(make_observer):
            raise TypeError(f"make_observer: must be a callable returning a fresh Observer, got {make_observer!r}")
        self.make_observer = make_observer
        probe = make_observer()
        if not isinstance(probe, Observer):
            raise TypeError(f"make_observer: must return an Observer, returned {type(probe).__name__}")
        if initial is None:
            initial = probe.qparams()
        if not isinstance(initial, (tuple, list)) or len(initial) != 2:
            raise TypeError("initial: must be a (scale, zero_point) pair, got "
                            + (f"{len(initial)} items" if isinstance(initial, (tuple, list)) else repr(initial)))
        s, z = initial
        try:
            self._current = FrozenScales(s, z, 0, (0, 0))
        except (ValueError, TypeError) as e:
            raise type(e)(f"initial: {e}") from None
        qmin, qmax = _qrange(probe.bits, probe.symmetric)
        zp = self._current.zero_point
        if zp.min() < qmin or zp.max() > qmax:
            i = int(np.flatnonzero((zp < qmin) | (zp > qmax))[0])
            raise ValueError(f"initial: zero_point[{i}]: must lie in [{qmin}, {qmax}] (the observer's "
                             f"{probe.bits}-bit grid), got {int(zp[i])}")
        self._probe = probe        # checks each batch before it is recorded
        # A per-channel observer's channel count: that of per-channel initial parameters, else of
        # the first batch
        width = max(self._current.scale.shape[0], self._current.zero_point.shape[0])
        self._channels = width if probe.axis is not None and width > 1 else None
        self._channels_from = "the initial parameters" if self._channels else "earlier ticks"
        self._past: list[np.ndarray] = []
        self.step = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> FrozenScales:
        return self._current

    def observe(self, x) -> None:
        """Record tick ``step``'s batch; refresh the scales when the schedule says so.

        Raises TypeError or ValueError, naming the tick, for a batch the observer would refuse
        (see the class docstring); nothing is recorded then and ``step`` does not advance.
        """
        probe = self._probe
        x = np.array(probe.check_batch(x, self.step, self._channels, self._channels_from), copy=True)
        if probe.axis is not None and self._channels is None:
            self._channels = x.shape[probe.axis % x.ndim]
        self._past.append(x)
        if len(self._past) > self.window:
            self._past.pop(0)
        self.step += 1
        if self.step % self.every == 0:
            self.apply(self.compute(self.step))

    def compute(self, end: int) -> FrozenScales:
        """Scales from the window [end - window, end) of recorded ticks (all strictly in the past).

        Channels without a finite value in the window keep the current parameters; with none to
        update, the current :class:`FrozenScales` itself is returned (see the class docstring).
        """
        obs = self.make_observer()
        for x in self._past:
            obs.update(x)
        s, z = obs.qparams()
        seen = obs.seen
        prev = self._current
        if not seen.all():
            if not seen.any() or prev.scale.shape != s.shape or prev.zero_point.shape != z.shape:
                return prev
            s = np.where(seen, s, prev.scale)
            z = np.where(seen, z, prev.zero_point)
        start = max(end - len(self._past), 0)
        return FrozenScales(s, z, prev.version + 1, (start, end))

    def apply(self, frozen: FrozenScales) -> None:
        """Make ``frozen`` the current parameters (one reference swap, under the lock)."""
        with self._lock:
            self._current = frozen

    def trace(self, series) -> dict[str, np.ndarray]:
        """Scales in force when each tick of ``series`` is quantized (state left unchanged).

        Returns ``scale`` and ``zero_point`` with one row per tick, all of one width (a
        per-channel observer's channel count): parameters holding one value for every channel
        (such as the unready initial ones of a per-channel observer) are repeated across the
        channels; and ``version``."""
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
        # A per-channel observer's width is known from the first batch on, whether or not an
        # update has come yet (so it does not depend on how many ticks follow)
        width = me._channels if me._channels is not None else max((len(r) for r in scale + zp), default=0)
        return {"scale": _stack_rows(scale, width), "zero_point": _stack_rows(zp, width),
                "version": np.array(version)}


def _stack_rows(rows: list, width: int) -> np.ndarray:
    """Rows of FrozenScales parameters as one (T, width) array; a one-value row covers every channel."""
    return np.array([np.broadcast_to(r, (width,)) if len(r) == 1 else r for r in rows])
