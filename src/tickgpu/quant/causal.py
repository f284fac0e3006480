"""check_causal: prove by experiment that a calibration or model never looks at the future.

A function of a time series is causal when its output at tick t depends only on ticks up to t. The
check runs the function once on the series, then again with everything from a cut point c on
replaced by something else (noise, huge outliers, zeros, NaN), and once more on the series cut off
at c, and demands that every output before the cut be bit-identical. A cut c tests every dependence
that straddles it: an output at a tick t < c on a tick s >= c, or on how many ticks follow t. By
default every cut of a series of up to :data:`ALL_CUTS_MAX` + 1 ticks is checked, so a function
whose output at some tick depends on any later tick fails, as long as one of the perturbations (or
the truncation) changes that output (see :func:`check_causal` for longer series).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PERTURBATIONS = ("noise", "outliers", "zeros", "nan")
# The default checks every cut of a series with at most this many cuts (ticks - 1): 4 runs of fn a
# cut. Longer series get this many cuts in CUT_BLOCKS evenly spaced blocks of consecutive cuts.
# (1024 runs of fn at most: a per-tick Python loop over a few hundred ticks checks in seconds.)
ALL_CUTS_MAX = 256
CUT_BLOCKS = 16


class CausalityError(AssertionError):
    """An output before a cut point changed when only data at or after the cut changed."""


@dataclass
class CausalReport:
    """What :func:`check_causal` tried: cut points, perturbations, and outputs compared.

    ``checks`` counts the outputs compared after a perturbation, ``truncated_checks`` those compared
    on the series cut off at a cut point (0 with ``truncate=False``)."""

    cuts: list[int]
    perturbations: tuple[str, ...]
    outputs: list[str]
    checks: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated_checks: int = 0


def _outputs(result) -> dict[str, np.ndarray]:
    if isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = [(f"output[{i}]", r) for i, r in enumerate(result)]
    else:
        items = [("output", result)]
    # Copies: fn may return (or write into) the same buffer on every call, and a baseline that is
    # overwritten by the perturbed run would compare equal to it whatever fn does.
    return {str(k): np.array(v, copy=True) for k, v in items}


def _perturb(x: np.ndarray, kind: str, gen: np.random.Generator) -> np.ndarray | None:
    """A replacement for the future part x (same shape and dtype, not empty), or None where the kind
    does not apply to x's dtype (NaN for integers)."""
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
        # the spread in float64: float16's square sums overflow
        spread = np.nanstd(np.where(np.isfinite(x), x, np.nan).astype(np.float64)) if np.isfinite(x).any() else 1.0
        with np.errstate(over="ignore"):      # float16 ticks may round to +-inf: still a change
            return (x + gen.standard_normal(x.shape) * (10.0 * spread + 1.0)).astype(x.dtype)
    if kind == "outliers":
        big = 1e30 if float(np.finfo(x.dtype).max) > 1e30 else float(np.finfo(x.dtype).max) / 4
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


def _copy_series(series):
    if isinstance(series, np.ndarray):
        return series.copy()
    return [b.copy() for b in series]


def _replace_future(series, cut: int, kind: str, gen):
    """A copy of series with the ticks from ``cut`` on perturbed, or (None, why) where nothing could be.

    A perturbation that leaves every tick from the cut on as it was, bit for bit (zeros on zeros,
    NaN or noise on NaN), is no change: a run on it would compare outputs that nothing could alter."""
    unchanged = f"{kind!r} left the ticks from the cut on as they were (bit for bit)"
    if isinstance(series, np.ndarray):
        if series[cut:].size == 0:
            return None, "the ticks from the cut on hold no values"
        new = _perturb(series[cut:], kind, gen)
        if new is None:
            return None, f"{kind!r} does not apply to {series.dtype} ticks"
        if _same_bits(new, series[cut:]):
            return None, unchanged
        out = series.copy()
        out[cut:] = new
        return out, ""
    out = _copy_series(series)
    nonempty = changed = False
    for t in range(cut, len(out)):
        # An empty batch (a tick without trades) has nothing to perturb: leave it, perturb the rest.
        if out[t].size == 0:
            continue
        new = _perturb(out[t], kind, gen)
        if new is None:
            return None, f"{kind!r} does not apply to {out[t].dtype} ticks"
        nonempty = True
        changed = changed or not _same_bits(new, out[t])
        out[t] = new
    if not nonempty:
        return None, "every batch from the cut on is empty"
    if not changed:
        return None, unchanged
    return out, ""


def _default_cuts(n: int) -> list[int]:
    """Every cut in [1, n) when there are at most ALL_CUTS_MAX, else CUT_BLOCKS evenly spaced blocks
    of ALL_CUTS_MAX // CUT_BLOCKS consecutive cuts, the first starting at 1 and the last ending at n - 1."""
    if n - 1 <= ALL_CUTS_MAX:
        return list(range(1, n))
    width = ALL_CUTS_MAX // CUT_BLOCKS
    starts = np.linspace(1, n - width, CUT_BLOCKS).round().astype(np.int64)
    return sorted({int(c) for a in starts for c in range(a, a + width)})


# Output dtypes whose bits mean their values (an object array's bytes are pointers)
_BIT_KINDS = set("biufc")


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and (
        np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def _first_change(ref: np.ndarray, new: np.ndarray, keep: int) -> int | None:
    """The first tick t < keep whose output row differs bit for bit between ref and new (a row
    missing from new counts as different), or None where all agree."""
    if new.ndim == 0 or new.dtype != ref.dtype or new.shape[1:] != ref.shape[1:]:
        return 0   # every row changed type or shape (see _how_changed)
    rows = min(keep, new.shape[0])
    if rows == keep and _same_bits(ref[:keep], new[:keep]):
        return None
    return next((t for t in range(rows) if not _same_bits(ref[t], new[t])), rows)


def _how_changed(ref: np.ndarray, new: np.ndarray) -> str:
    if new.dtype != ref.dtype:
        return f" (its dtype changed from {ref.dtype} to {new.dtype})"
    if new.shape[1:] != ref.shape[1:]:
        return f" (its rows changed shape from {ref.shape[1:]} to {new.shape[1:]})"
    return ""


def _run(fn, series, what: str) -> dict[str, np.ndarray]:
    """fn's outputs on a perturbed or truncated copy; an exception names the copy it was raised on."""
    try:
        return _outputs(fn(series))
    except Exception as e:
        raise RuntimeError(f"fn raised on the series {what}: {type(e).__name__}: {e}") from e


def _check_baseline(fn, series, n: int) -> dict[str, np.ndarray]:
    """fn's outputs on the series, checked: numeric, one row per tick, and the same bits on a second
    run (a function that is not deterministic would otherwise be reported as a leak)."""
    base = _outputs(fn(_copy_series(series)))
    if not base:
        raise ValueError("fn: returned no outputs: nothing would be compared")
    for name, arr in base.items():
        if arr.dtype.kind not in _BIT_KINDS:
            raise TypeError(f"fn: output {name!r} must be a numeric or bool array, got dtype {arr.dtype}: "
                            "its bits are compared, and those of an object array are pointers")
        if arr.ndim == 0 or arr.shape[0] != n:
            raise ValueError(f"fn: output {name!r} must have one row per tick ({n}), got shape {arr.shape}")
    again = _outputs(fn(_copy_series(series)))
    for name, arr in base.items():
        other = again.get(name)
        first = 0 if other is None else _first_change(arr, other, n)
        if first is not None:
            raise ValueError(f"fn: is not deterministic: output {name!r} at tick {first} differs between "
                             "two runs on the same series, so a change could not be told from a leak "
                             "(seed any randomness from a fixed seed and the tick)")
    return base


def _truncate(series, cut: int):
    if isinstance(series, np.ndarray):
        return series[:cut].copy()
    return [b.copy() for b in series[:cut]]


def check_causal(fn, series, *, cuts: int | list[int] | None = None,
                 perturbations: tuple[str, ...] = PERTURBATIONS, seed: int = 0,
                 strict: bool = False, truncate: bool = True) -> CausalReport:
    """Assert that ``fn(series)`` up to each cut point does not change when the future changes.

    A cut c compares the outputs at ticks t < c (t <= c with ``strict``) of a run on the series with
    those of runs in which the ticks from c on are perturbed, so it catches any dependence of such an
    output on a tick s >= c. A leak is therefore found exactly when some checked cut lies in
    (t, s] (in (t - 1, s] with ``strict``) and some perturbation changes the output at t.

    With ``truncate`` (the default) each cut c also runs ``fn(series[:c])`` and demands that its c
    rows equal the first c rows of the run on the whole series, bit for bit: this catches an output
    that depends on how many ticks follow it (``s * t / len(s)``, a centred window that shrinks at
    the end), which no perturbation of the values can reveal. ``fn`` must therefore accept a series
    as short as the smallest cut; for one that needs at least m ticks, pass the cuts from m on
    (``cuts=list(range(m, T))``), or ``truncate=False``. Every library observer and
    :class:`~tickgpu.quant.EmaStandardizer` accept a series of one tick.

    Cut points:

    - default (``cuts=None``): every cut of a series of up to ``ALL_CUTS_MAX + 1`` (257) ticks,
      so any look-ahead, even of one tick at one tick, fails. A longer series gets 256 cuts in 16
      evenly spaced blocks of 16 consecutive cuts (the first block at the start, the last at the
      end): a look-ahead fails when it reaches into a block, which every look-ahead that recurs at
      least once every 16 ticks, or that spans more than the gap between blocks, does; a one-off
      look-ahead elsewhere can pass. Pass ``cuts=list(range(1, T))`` to check them all.
    - an int n: n random cuts, which catch a global or frequent leak but can miss a sparse one.
    - a list: those cuts.

    Each cut runs ``fn`` once per perturbation, on a fresh copy of the series, and once on the
    truncated series: the default costs up to 1280 runs of ``fn``, so check a slow function on a
    prefix of its series, or pass an int for a quick spot check. ``fn`` first runs twice on the
    series itself: the two must agree bit for bit, or it is not deterministic and nothing it
    returns could tell a leak from chance.

    Parameters
    ----------
    fn : callable
        ``fn(series)`` returns an array, a tuple/list of arrays or a dict of arrays, each with one row
        per tick along axis 0 (e.g. scales, zero points and quantized outputs at each tick), of a
        numeric or bool dtype. It must build any state it needs from scratch on each call and be
        deterministic. Its outputs are copied as they come back, so a function that returns (or
        writes into) one buffer on every call is still checked.
    series : ndarray or list of ndarray
        Ticks along axis 0 (or a list of per-tick batches, which may differ in shape; an empty batch
        is left as it is and the non-empty ones after the cut are perturbed).
    cuts : None, int or list of int
        None (default): all cuts, or the blocks above for long series; an int >= 1: that many
        random cut points in [1, T); a list: the cut points themselves.
    perturbations : tuple of str
        What replaces ticks from the cut on: "noise" (Gaussian, ten times the series' spread),
        "outliers" (+-1e30 at random places), "zeros", "nan" (NaN at random places; skipped for
        integer series).
    seed : int
        Seed of the random cut points and of the perturbations.
    strict : bool
        Also require the output *at* the cut to be unchanged, i.e. that the output at tick t uses
        ticks strictly before t (what scales frozen for live inference must satisfy).
    truncate : bool
        Also run ``fn`` on the series cut off at each cut point (see above).

    Returns
    -------
    CausalReport
        ``checks`` (outputs compared after a perturbation) is always > 0; ``truncated_checks``
        counts those compared on truncated series; ``skipped`` lists the "kind@cut" pairs that
        could not be run (NaN on integers; only empty batches after the cut) or that changed
        nothing (a perturbation that left every tick from the cut on bit for bit as it was:
        zeros on zeros, NaN or noise on NaN).

    Raises
    ------
    CausalityError
        Naming the output, the cut, the perturbation (or "truncated") and the first tick whose
        output changed.
    ValueError
        ``series`` has fewer than 2 ticks, ``fn``'s outputs do not have one row per tick (on the
        series or a truncated one), ``fn`` is not deterministic (two runs on the series differ),
        ``cuts`` or ``perturbations`` are empty or invalid, or nothing at all was compared (every
        perturbation skipped, or no outputs): a check that compared nothing proves nothing.
    TypeError
        An output of ``fn`` that is not a numeric or bool array (an object array, say); ``fn`` not
        callable; a cut or the seed that is not an int.
    RuntimeError
        ``fn`` raised on a perturbed or truncated copy of the series, naming the copy (the cut and
        the perturbation); the original exception is its ``__cause__``. A function that rejects
        NaN by design is checked with the other perturbations.
    """
    if not callable(fn):
        raise TypeError(f"fn: must be a callable of the series, got {fn!r}")
    if isinstance(series, np.ndarray):
        n = series.shape[0] if series.ndim else 0
    elif isinstance(series, (list, tuple)):
        series = [np.asarray(b) for b in series]
        n = len(series)
    else:
        raise TypeError(f"series: must be an array of ticks or a list of batches, got {type(series).__name__}")
    kinds = {np.asarray(b).dtype.kind for b in (series if isinstance(series, list) else [series])}
    if not kinds <= set("iuf"):
        raise TypeError(f"series: must hold real numbers (float or integer), got dtype kinds {sorted(kinds)}")
    if n < 2:
        raise ValueError(f"series: needs at least 2 ticks, got {n}")
    if isinstance(perturbations, str):
        raise TypeError(f"perturbations: must be a tuple of names, got the string {perturbations!r} "
                        f"(write ({perturbations!r},))")
    perturbations = tuple(perturbations)
    if not perturbations:
        raise ValueError("perturbations: must name at least one perturbation, got none: nothing would be compared")
    unknown = [k for k in perturbations if k not in PERTURBATIONS]
    if unknown:
        raise ValueError(f"perturbations: must be among {PERTURBATIONS}, got {unknown}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: must be an int, got {seed!r}")
    gen = np.random.default_rng(seed)
    if cuts is None:
        cut_list = _default_cuts(n)
    elif isinstance(cuts, (int, np.integer)) and not isinstance(cuts, bool):
        if cuts < 1:
            raise ValueError(f"cuts: must be >= 1 (or None for the default), got {cuts}: nothing would be compared")
        pool = np.arange(1, n)
        cut_list = sorted(int(c) for c in gen.choice(pool, size=min(int(cuts), pool.size), replace=False))
    else:
        if isinstance(cuts, (bool, np.bool_, str)) or not hasattr(cuts, "__iter__"):
            raise TypeError(f"cuts: must be None, an int or a list of ints, got {cuts!r}")
        cut_list = list(cuts)
        odd = [c for c in cut_list if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer))]
        if odd:
            raise TypeError(f"cuts: must be None, an int or a list of ints, got elements {odd}")
        cut_list = [int(c) for c in cut_list]
        if not cut_list:
            raise ValueError("cuts: must hold at least one cut point, got none: nothing would be compared")
        bad = [c for c in cut_list if not 1 <= c < n]
        if bad:
            raise ValueError(f"cuts: must lie in [1, {n}), got {bad}")
    base = _check_baseline(fn, series, n)
    report = CausalReport(cut_list, perturbations, list(base))
    why_skipped: dict[str, None] = {}
    for cut in cut_list:
        for kind in perturbations:
            changed, why = _replace_future(series, cut, kind, gen)
            if changed is None:
                report.skipped.append(f"{kind}@{cut}")
                why_skipped[why] = None
                continue
            got = _run(fn, changed, f"perturbed by {kind!r} from cut {cut}")
            keep = cut + 1 if strict else cut
            for name, ref in base.items():
                if name not in got:
                    raise CausalityError(f"output {name!r} vanished when the future changed (cut {cut}, {kind})")
                first = _first_change(ref, got[name], keep)
                if first is not None:
                    raise CausalityError(
                        f"output {name!r} at tick {first} changed when ticks >= {cut} were replaced by "
                        f"{kind}: it depends on the future" + (" (or on its own tick)" if strict else "")
                        + _how_changed(ref, got[name]))
                report.checks += 1
    if report.checks == 0:
        raise ValueError(
            f"check_causal: nothing was compared: all {len(report.skipped)} (perturbation, cut) pairs "
            f"were skipped ({'; '.join(why_skipped)}), so causality is unproven")
    if truncate:
        for cut in cut_list:
            _check_truncated(fn, series, cut, base, report)
    return report


def _check_truncated(fn, series, cut: int, base: dict[str, np.ndarray], report: CausalReport) -> None:
    """Outputs of fn on the first ``cut`` ticks against the first ``cut`` rows of the baseline."""
    got = _run(fn, _truncate(series, cut), f"truncated at cut {cut} (ticks >= {cut} removed)")
    for name, ref in base.items():
        if name not in got:
            raise CausalityError(f"output {name!r} vanished when the series was truncated at cut {cut}")
        new = got[name]
        if new.ndim == 0 or new.shape[0] != cut:
            raise ValueError(f"fn: output {name!r} must have one row per tick, on the series truncated at "
                             f"cut {cut} too ({cut} ticks), got shape {new.shape}")
        first = _first_change(ref, new, cut)
        if first is not None:
            raise CausalityError(
                f"output {name!r} at tick {first} changed when the series was truncated at cut {cut} "
                f"(ticks >= {cut} removed): it depends on the future (on how many ticks follow)"
                + _how_changed(ref, new))
        report.truncated_checks += 1
