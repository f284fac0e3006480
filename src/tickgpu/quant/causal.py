"""check_causal: prove by experiment that a calibration or model never looks at the future.

A function of a time series is causal when its output at tick t depends only on ticks up to t. The
check runs the function once on the series, then again with everything from a random cut point on
replaced by something else (noise, huge outliers, zeros, NaN), and demands that every output before
the cut be bit-identical. A function that peeks even one tick ahead fails at some cut.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PERTURBATIONS = ("noise", "outliers", "zeros", "nan")


class CausalityError(AssertionError):
    """An output before a cut point changed when only data at or after the cut changed."""


@dataclass
class CausalReport:
    """What :func:`check_causal` tried: cut points, perturbations, and outputs compared."""

    cuts: list[int]
    perturbations: tuple[str, ...]
    outputs: list[str]
    checks: int = 0
    skipped: list[str] = field(default_factory=list)


def _outputs(result) -> dict[str, np.ndarray]:
    if isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = [(f"output[{i}]", r) for i, r in enumerate(result)]
    else:
        items = [("output", result)]
    return {str(k): np.asarray(v) for k, v in items}


def _perturb(x: np.ndarray, kind: str, gen: np.random.Generator) -> np.ndarray | None:
    """A replacement for the future part x (same shape and dtype), or None where not applicable."""
    if x.size == 0:
        return None
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        if kind == "noise":
            return (x.astype(np.int64) + gen.integers(-3, 4, x.shape)).clip(info.min, info.max).astype(x.dtype)
        if kind == "outliers":
            return np.where(gen.random(x.shape) < 0.5, info.max, info.min).astype(x.dtype)
        if kind == "zeros":
            return np.zeros_like(x)
        return None
    if kind == "noise":
        spread = np.nanstd(np.where(np.isfinite(x), x, np.nan)) if np.isfinite(x).any() else 1.0
        return (x + gen.standard_normal(x.shape) * (10.0 * spread + 1.0)).astype(x.dtype)
    if kind == "outliers":
        big = 1e30 if np.finfo(x.dtype).max > 1e30 else float(np.finfo(x.dtype).max) / 4
        pick = gen.random(x.shape) < 0.3
        pick.flat[0] = True  # at least one outlier, right at the cut
        sign = np.where(gen.random(x.shape) < 0.5, -1.0, 1.0)
        return np.where(pick, sign * big, x).astype(x.dtype)
    if kind == "zeros":
        return np.zeros_like(x)
    if kind == "nan":
        pick = gen.random(x.shape) < 0.5
        pick.flat[0] = True
        return np.where(pick, np.nan, x).astype(x.dtype)
    raise ValueError(f"perturbation: must be one of {PERTURBATIONS}, got {kind!r}")


def _replace_future(series, cut: int, kind: str, gen):
    if isinstance(series, np.ndarray):
        new = _perturb(series[cut:], kind, gen)
        if new is None:
            return None
        out = series.copy()
        out[cut:] = new
        return out
    out = [np.array(b, copy=True) for b in series]
    for t in range(cut, len(out)):
        new = _perturb(out[t], kind, gen)
        if new is None:
            return None
        out[t] = new
    return out


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and (
        np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def check_causal(fn, series, *, cuts: int | list[int] = 8,
                 perturbations: tuple[str, ...] = PERTURBATIONS, seed: int = 0,
                 strict: bool = False) -> CausalReport:
    """Assert that ``fn(series)`` up to each cut point does not change when the future changes.

    Parameters
    ----------
    fn : callable
        ``fn(series)`` returns an array, a tuple/list of arrays or a dict of arrays, each with one row
        per tick along axis 0 (e.g. scales, zero points and quantized outputs at each tick). It must
        build any state it needs from scratch on each call.
    series : ndarray or list of ndarray
        Ticks along axis 0 (or a list of per-tick batches, which may differ in shape).
    cuts : int or list of int
        Number of random cut points in [1, T), or the cut points themselves.
    perturbations : tuple of str
        What replaces ticks from the cut on: "noise" (Gaussian, ten times the series' spread),
        "outliers" (+-1e30 at random places), "zeros", "nan" (NaN at random places; skipped for
        integer series).
    seed : int
        Seed of the cut points and perturbations.
    strict : bool
        Also require the output *at* the cut to be unchanged, i.e. that the output at tick t uses
        ticks strictly before t (what scales frozen for live inference must satisfy).

    Returns
    -------
    CausalReport

    Raises
    ------
    CausalityError
        Naming the output, the cut, the perturbation and the first tick whose output changed.
    ValueError
        ``series`` has fewer than 2 ticks or ``fn``'s outputs do not have one row per tick.
    """
    if isinstance(series, np.ndarray):
        n = series.shape[0] if series.ndim else 0
    else:
        series = [np.asarray(b) for b in series]
        n = len(series)
    if n < 2:
        raise ValueError(f"series: needs at least 2 ticks, got {n}")
    gen = np.random.default_rng(seed)
    if isinstance(cuts, int):
        pool = np.arange(1, n)
        cut_list = sorted(int(c) for c in gen.choice(pool, size=min(cuts, pool.size), replace=False))
    else:
        cut_list = [int(c) for c in cuts]
        bad = [c for c in cut_list if not 1 <= c < n]
        if bad:
            raise ValueError(f"cuts: must lie in [1, {n}), got {bad}")
    base = _outputs(fn(series))
    for name, arr in base.items():
        if arr.ndim == 0 or arr.shape[0] != n:
            raise ValueError(f"fn: output {name!r} must have one row per tick ({n}), got shape {arr.shape}")
    report = CausalReport(cut_list, tuple(perturbations), list(base))
    for cut in cut_list:
        for kind in perturbations:
            changed = _replace_future(series, cut, kind, gen)
            if changed is None:
                report.skipped.append(f"{kind}@{cut}")
                continue
            got = _outputs(fn(changed))
            keep = cut + 1 if strict else cut
            for name, ref in base.items():
                if name not in got:
                    raise CausalityError(f"output {name!r} vanished when the future changed (cut {cut}, {kind})")
                new = got[name]
                if not _same_bits(ref[:keep], new[:keep]):
                    first = next((t for t in range(min(keep, len(new)))
                                  if not _same_bits(ref[t], new[t])), keep)
                    raise CausalityError(
                        f"output {name!r} at tick {first} changed when ticks >= {cut} were replaced by "
                        f"{kind}: it depends on the future" + (" (or on its own tick)" if strict else "")
                    )
                report.checks += 1
    return report
