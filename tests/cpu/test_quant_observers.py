"""Causal calibration: every observer passes check_causal, leaky ones fail it; EMA values against a
plain recursion; degenerate data never gives a zero, inf or NaN scale."""
import numpy as np
import pytest

from tickgpu.quant import (
    EPS,
    AbsMaxObserver,
    CausalityError,
    EmaStandardizer,
    FrozenScales,
    MinMaxObserver,
    ScheduledScales,
    calibration_noise,
    check_causal,
    qparams_from_range,
)


def _series(rng, t=60, width=7):
    # regime changes and fat tails, so a leak would show
    scale = np.repeat(np.exp(rng.uniform(-3, 3, t // 10 + 1)), 10)[:t, None]
    return rng.standard_t(3, (t, width)) * scale


OBSERVERS = {
    "minmax_ema": lambda: MinMaxObserver(),
    "minmax_running": lambda: MinMaxObserver(alpha=None),
    "absmax_ema": lambda: AbsMaxObserver(alpha=0.9),
    "absmax_per_channel": lambda: AbsMaxObserver(axis=-1),
    "minmax_per_channel_int16": lambda: MinMaxObserver(axis=0, bits=16),
    "minmax_noisy": lambda: MinMaxObserver(noise_sigma=0.5, seed=7),
    "absmax_symmetric16_noisy": lambda: AbsMaxObserver(bits=16, noise_sigma=0.1, seed=3),
}


@pytest.mark.parametrize("name", sorted(OBSERVERS))
def test_every_observer_is_causal(rng, name):
    make = OBSERVERS[name]
    series = _series(rng)
    report = check_causal(lambda s: make().trace(s), series, cuts=10, seed=int(rng.integers(1 << 30)))
    assert report.checks == 10 * 4 * 4  # cuts x perturbations x outputs


def test_observer_trace_on_a_list_of_batches_is_causal(rng):
    batches = [rng.standard_normal((int(rng.integers(1, 9)), 5)) for _ in range(30)]
    check_causal(lambda s: AbsMaxObserver(axis=-1).trace(s), batches, cuts=6)


def test_scheduled_scales_use_only_the_strict_past(rng):
    series = _series(rng, t=80)

    def fn(s):
        sched = ScheduledScales(lambda: AbsMaxObserver(alpha=None), window=12, every=5, initial=(1.0, 0))
        return sched.trace(s)

    check_causal(fn, series, cuts=12, strict=True)


def test_standardizer_is_causal(rng):
    check_causal(lambda s: EmaStandardizer(0.95).transform(s), _series(rng), cuts=10)


# -- check_causal must catch leaks ---------------------------------------------------------------

def _leaky_global_max(s):
    # normalizes with the max of the whole series: the classic look-ahead bug
    return np.abs(s) / np.abs(s).max()


def _leaky_one_tick_ahead(s):
    out = []
    for t in range(len(s)):
        window = s[max(0, t - 5): t + 2]  # t + 1 is the future
        out.append(np.abs(window).max())
    return np.array(out)


def _uses_its_own_tick(s):
    return AbsMaxObserver(alpha=None).trace(s)["scale"]  # the scale at t includes x_t


@pytest.mark.parametrize("leaky", [_leaky_global_max, _leaky_one_tick_ahead])
def test_check_causal_fails_on_leaky_functions(rng, leaky):
    with pytest.raises(CausalityError, match="depends on the future"):
        check_causal(leaky, _series(rng), cuts=5)


def test_check_causal_strict_catches_use_of_the_current_tick(rng):
    series = _series(rng)
    check_causal(_uses_its_own_tick, series, cuts=5)  # causal...
    with pytest.raises(CausalityError):                # ...but not strictly past
        check_causal(_uses_its_own_tick, series, cuts=5, strict=True)


def test_check_causal_catches_a_leak_only_one_perturbation_reveals(rng):
    # a function whose past output only reacts to a NaN in the future
    def nan_peeker(s):
        return np.full(len(s), float(np.isnan(s).any()))

    with pytest.raises(CausalityError, match="nan"):
        check_causal(nan_peeker, _series(rng), cuts=3)


def test_check_causal_argument_errors(rng):
    with pytest.raises(ValueError, match="at least 2"):
        check_causal(lambda s: s, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="one row per tick"):
        check_causal(lambda s: s.sum(), np.zeros((5, 3)))
    with pytest.raises(ValueError, match="cuts"):
        check_causal(lambda s: s, np.zeros((5, 3)), cuts=[0])
    ints = rng.integers(-5, 5, (20, 3)).astype(np.int32)
    report = check_causal(lambda s: np.cumsum(s, axis=0), ints, cuts=4)
    assert len(report.skipped) == 4  # no NaN for integers


# -- values ----------------------------------------------------------------------------------------

def test_ema_minmax_matches_a_plain_recursion(rng):
    series = _series(rng, t=40)
    alpha = 0.97
    tr = MinMaxObserver(alpha=alpha).trace(series)
    lo, hi = series[0].min(), series[0].max()
    for t in range(len(series)):
        if t:
            lo = alpha * lo + (1 - alpha) * series[t].min()
            hi = alpha * hi + (1 - alpha) * series[t].max()
        assert tr["lo"][t][0] == pytest.approx(lo, rel=1e-12)
        assert tr["hi"][t][0] == pytest.approx(hi, rel=1e-12)
        lo0, hi0 = min(lo, 0.0), max(hi, 0.0)
        s = np.float32((hi0 - lo0) / 255)
        assert tr["scale"][t][0] == s
        assert tr["zero_point"][t][0] == np.clip(-128 - np.rint(lo0 / np.float64(s)), -128, 127)
        # the range maps onto the grid: lo -> about -128, hi -> about 127
        z = tr["zero_point"][t][0]
        assert -128.5 <= lo0 / s + z and hi0 / s + z <= 127.5


def test_running_absmax_per_channel(rng):
    series = _series(rng, t=25, width=4)
    tr = AbsMaxObserver(alpha=None, axis=-1).trace(series)
    want = np.maximum.accumulate(np.abs(series), axis=0)
    assert np.allclose(tr["hi"], want, rtol=0, atol=0)
    assert np.array_equal(tr["scale"], (want / 127).astype(np.float32))
    assert np.all(tr["zero_point"] == 0)


@pytest.mark.parametrize("make", [MinMaxObserver, AbsMaxObserver])
def test_degenerate_data_never_gives_bad_scales(make):
    cases = {
        "constant": np.full((5, 4), 2.5),
        "all_zero": np.zeros((5, 4)),
        "tiny_range": 1.0 + 1e-8 * np.arange(20.0).reshape(5, 4),
        "range_1e-8": 1e-8 * np.arange(20.0).reshape(5, 4),
        "huge": np.full((5, 4), 1e300),
        "inf_and_nan": np.array([[np.nan] * 4, [np.inf, -np.inf, 1.0, np.nan]] + [[1.0] * 4] * 3),
        "all_nan": np.full((5, 4), np.nan),
    }
    for name, series in cases.items():
        for axis in (None, -1):
            for bits in (8, 16):
                tr = make(axis=axis, bits=bits).trace(series)
                s = tr["scale"]
                assert np.all(np.isfinite(s)) and np.all(s > 0), (name, axis, bits, s)
                assert np.all(np.abs(tr["zero_point"]) <= 2 ** (bits - 1)), name


def test_nonfinite_values_are_masked_and_counted_or_rejected():
    obs = MinMaxObserver(alpha=None)
    obs.update([[1.0, np.nan], [-2.0, np.inf]])
    assert obs.n_nonfinite == 2
    lo, hi = obs.range
    assert lo[0] == -2.0 and hi[0] == 1.0
    with pytest.raises(ValueError, match=r"tick 0\) at index \(0, 1\): must be finite"):
        MinMaxObserver(strict=True).update([[1.0, np.nan]])
    fresh = AbsMaxObserver()
    fresh.update([np.nan, np.nan])
    assert not fresh.ready
    s, _ = fresh.qparams()
    assert s[0] == np.float32(float(EPS) / 127)
    fresh.update([0.5, -3.0])  # the first finite tick initializes the EMA, it is not averaged with 0
    assert fresh.ready and fresh.range[1][0] == 3.0


def test_observer_argument_errors():
    with pytest.raises(ValueError, match="alpha"):
        MinMaxObserver(alpha=1.0)
    for bad in (4, 8.0, True, None):
        with pytest.raises(ValueError, match="bits: must be the integer 8 or 16"):
            MinMaxObserver(bits=bad)
        with pytest.raises(ValueError, match="bits: must be the integer 8 or 16"):
            qparams_from_range(np.zeros(2), np.ones(2), bits=bad)
    assert MinMaxObserver(bits=np.int32(16)).bits == 16 and type(MinMaxObserver(bits=np.int32(16)).bits) is int
    with pytest.raises(ValueError, match="noise_sigma"):
        AbsMaxObserver(noise_sigma=-1)


def test_qparams_from_range_edges():
    s, z = qparams_from_range(np.array([0.0, 1.0, -1e-8]), np.array([0.0, 1.0, 1e-8]))
    assert np.all(np.isfinite(s)) and np.all(s > 0)
    # a positive-only range is widened to hold 0: zero point at the bottom
    assert z[1] == -128 and s[1] == np.float32(1 / 255)
    s, z = qparams_from_range(-1e300, 1e300, symmetric=True)
    assert np.isfinite(s) and s > 0 and z == 0


def test_qparams_from_range_refuse_bounds_that_do_not_fit_or_are_not_numbers():
    with pytest.raises(ValueError, match=r"^lo, hi: shapes \(3,\) and \(2,\) do not broadcast"):
        qparams_from_range(np.zeros(3), np.ones(2))
    for bad in (1j, "a", True, np.array([0.0, 1.0], complex), [None]):
        with pytest.raises(TypeError, match=r"^lo: must be real numbers"):
            qparams_from_range(bad, 2.0)
        with pytest.raises(TypeError, match=r"^hi: must be real numbers"):
            qparams_from_range(-2.0, bad)
    # per-channel bounds against one shared bound, integers and Python ints past int64 are numbers
    s, z = qparams_from_range(np.array([0.0, -2.0]), 2**70)
    assert s.shape == z.shape == (2,) and np.all(np.isfinite(s))
    assert qparams_from_range([0, -1], [1, 2])[0][1] == np.float32(3 / 255)


def test_calibration_noise_is_seeded_and_keyed_by_tick():
    x = np.zeros((3, 4))
    a = calibration_noise(x, 0.1, seed=1, step=5)
    assert np.array_equal(a, calibration_noise(x, 0.1, seed=1, step=5))
    assert not np.array_equal(a, calibration_noise(x, 0.1, seed=2, step=5))
    assert not np.array_equal(a, calibration_noise(x, 0.1, seed=1, step=6))
    assert 0.02 < a.std() < 0.3
    assert calibration_noise(x, 0.0, seed=1, step=0) is x


def test_noise_changes_the_statistics_reproducibly(rng):
    series = _series(rng)
    a = MinMaxObserver(noise_sigma=1.0, seed=11).trace(series)["scale"]
    b = MinMaxObserver(noise_sigma=1.0, seed=11).trace(series)["scale"]
    c = MinMaxObserver().trace(series)["scale"]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_scheduled_scales_schedule_window_and_values(rng):
    series = _series(rng, t=23, width=3)
    sched = ScheduledScales(lambda: AbsMaxObserver(alpha=None), window=4, every=5, initial=(2.0, 0))
    tr = sched.trace(series)
    assert sched.current.version == 0  # trace leaves the object alone
    assert list(tr["version"]) == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5 + [4] * 3
    assert np.all(tr["scale"][:5] == np.float32(2.0))
    for t in (5, 10, 15, 20):
        want = np.float32(np.abs(series[t - 4:t]).max() / 127)
        assert tr["scale"][t][0] == want
    for t, x in enumerate(series[:10]):
        sched.observe(x)
    cur = sched.current
    assert isinstance(cur, FrozenScales) and cur.window == (6, 10) and cur.version == 2
    with pytest.raises(Exception):
        cur.version = 5  # frozen: live readers can hold it safely


def test_standardizer_values(rng):
    x = rng.standard_normal((50, 3)) * 4 + 10
    z = EmaStandardizer(alpha=0.9).transform(x)
    assert np.all(z[0] == 0)
    mean, var = x[0].copy(), np.zeros(3)
    for t in range(1, 50):
        std = np.maximum(np.sqrt(var), 1e-12)
        # x - mean cancels: compare on the scale of the operands, not of the difference
        np.testing.assert_allclose(z[t], (x[t] - mean) / std, rtol=1e-12,
                                   atol=float(np.max(1e-14 * (np.abs(x[t]) + np.abs(mean)) / std)))
        d = x[t] - mean
        mean = mean + 0.1 * d
        var = 0.9 * (var + 0.1 * d * d)


# -- check_causal must not pass what it did not check -----------------------------------------------

def test_check_causal_catches_a_leak_written_into_a_reused_buffer(rng):
    # the baseline and the perturbed run return the same array: it must be copied as it comes back
    series = _series(rng)
    buf = np.empty_like(series)

    def leaky_into_buffer(s):
        buf[:] = s - s.mean(axis=0)    # a global normalization
        return buf

    with pytest.raises(CausalityError, match="depends on the future"):
        check_causal(leaky_into_buffer, series, cuts=4)
    scales = {"scale": np.empty(len(series))}

    def leaky_dict(s):
        scales["scale"][:] = np.abs(s).max()
        return scales

    with pytest.raises(CausalityError, match="'scale'"):
        check_causal(leaky_dict, series, cuts=4)


def test_check_causal_perturbs_past_empty_batches(rng):
    # a list series whose last tick had no trades: the cuts before it must still be checked
    batches = [rng.standard_normal((3, 2)) for _ in range(100)]
    batches[-1] = np.zeros((0, 2))
    batches[40] = np.zeros((0, 2))

    def leaky(ticks):
        g = np.mean(np.concatenate([t for t in ticks if t.size]))   # global mean, future included
        return np.array([t.mean() - g if t.size else 0.0 for t in ticks])

    with pytest.raises(CausalityError, match="depends on the future"):
        check_causal(leaky, batches, cuts=8)
    # an empty batch at the cut (40) or after it (99) is left alone, the others are perturbed
    causal = check_causal(lambda s: AbsMaxObserver(axis=-1).trace(s), batches, cuts=[40, 98])
    assert causal.checks == 2 * 4 * 4 and causal.skipped == []
    only_empty = check_causal(lambda s: AbsMaxObserver().trace(s)["scale"], batches, cuts=[41, 99])
    assert only_empty.skipped == [f"{k}@99" for k in ("noise", "outliers", "zeros", "nan")]


def test_check_causal_raises_when_nothing_was_compared(rng):
    series = _series(rng)
    with pytest.raises(ValueError, match="cuts: must be >= 1.*nothing would be compared"):
        check_causal(_leaky_global_max, series, cuts=0)
    with pytest.raises(ValueError, match="cuts: must hold at least one.*nothing would be compared"):
        check_causal(_leaky_global_max, series, cuts=[])
    with pytest.raises(ValueError, match="perturbations: must name at least one"):
        check_causal(_leaky_global_max, series, perturbations=())
    with pytest.raises(ValueError, match="perturbations: must be among"):
        check_causal(_leaky_global_max, series, perturbations=("noise", "typo"))
    with pytest.raises(ValueError, match="fn: returned no outputs"):
        check_causal(lambda s: {}, series, cuts=3)
    ints = rng.integers(0, 10, (50, 2))
    with pytest.raises(ValueError, match=r"nothing was compared.*'nan' does not apply to int64"):
        check_causal(lambda s: s - s.mean(), ints, perturbations=("nan",))
    batches = [rng.standard_normal((2, 2)), np.zeros((0, 2)), np.zeros((0, 2))]
    with pytest.raises(ValueError, match="nothing was compared.*every batch from the cut on is empty"):
        check_causal(lambda s: np.zeros(len(s)), batches, cuts=[1, 2])


def _sparse_one_tick_ahead(s):
    out = s[:, 0].copy()
    out[:-1:50] = s[1::50, 0]      # every 50th tick peeks at the next one
    return out


def _lone_peek_at_150(s):
    out = s[:, 0].copy()
    out[150] = s[151, 0]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_check_causal_default_catches_a_sparse_one_tick_lookahead(rng, seed):
    series = rng.standard_normal((1000, 1))
    with pytest.raises(CausalityError) as caught:
        check_causal(_sparse_one_tick_ahead, series, seed=seed)
    import re
    tick, cut = map(int, re.search(r"at tick (\d+) changed when ticks >= (\d+)", str(caught.value)).groups())
    assert tick % 50 == 0 and cut == tick + 1    # the one cut that reveals it
    # a long series: the blocks of consecutive cuts each hold a tick that peeks
    with pytest.raises(CausalityError):
        check_causal(_sparse_one_tick_ahead, rng.standard_normal((20_000, 1)), seed=seed)
    report = check_causal(lambda s: np.cumsum(s, axis=0), series[:257], seed=seed)
    assert report.cuts == list(range(1, 257)) and report.checks == 256 * 4
    with pytest.raises(CausalityError) as caught:     # every cut of a short series: one lone peek
        check_causal(_lone_peek_at_150, series[:257], seed=seed)
    assert "at tick 150 changed when ticks >= 151" in str(caught.value)


def test_check_causal_default_cuts_on_long_series():
    from tickgpu.quant.causal import ALL_CUTS_MAX, CUT_BLOCKS

    report = check_causal(lambda s: np.cumsum(s, axis=0), np.zeros((5000, 1)), perturbations=("zeros", "nan"))
    cuts = np.array(report.cuts)
    width = ALL_CUTS_MAX // CUT_BLOCKS
    assert len(cuts) == ALL_CUTS_MAX and cuts[0] == 1 and cuts[-1] == 4999
    runs = np.split(cuts, np.flatnonzero(np.diff(cuts) != 1) + 1)
    assert len(runs) == CUT_BLOCKS and all(len(r) == width for r in runs)


# -- scheduled scales: bad windows, bad initial parameters, frozen means frozen ----------------------

def test_scheduled_update_from_an_all_nan_window_keeps_the_scales(rng):
    sched = ScheduledScales(lambda: AbsMaxObserver(alpha=None), window=5, every=5)
    good = rng.standard_normal((10, 4))
    for x in good:
        sched.observe(x)
    before = sched.current
    assert before.version == 2 and before.scale[0] == np.float32(np.abs(good[5:]).max() / 127)
    for _ in range(5):
        sched.observe(np.full(4, np.nan))          # a halted feed
    assert sched.current is before                 # not the floor scale, and no new version
    x = rng.standard_normal(4)
    assert np.abs(np.rint(x / sched.current.scale[0])).max() < 127 * 4
    for x in good[:5]:
        sched.observe(x)
    assert sched.current.version == 3 and sched.current.window == (15, 20)


def test_scheduled_update_keeps_the_channels_without_data(rng):
    sched = ScheduledScales(lambda: AbsMaxObserver(axis=-1, alpha=None), window=5, every=5)
    first = rng.standard_normal((5, 3))
    for x in first:
        sched.observe(x)
    for _ in range(5):
        sched.observe(np.array([np.nan, 1.0, -2.0]))   # channel 0 goes dark
    cur = sched.current
    assert cur.version == 2
    assert cur.scale[0] == np.float32(np.abs(first[:, 0]).max() / 127)      # kept
    assert list(cur.scale[1:]) == [np.float32(1 / 127), np.float32(2 / 127)]
    # no usable earlier scales (the unready initial ones are per tensor): nothing is installed
    dark = ScheduledScales(lambda: AbsMaxObserver(axis=-1), window=5, every=5)
    for _ in range(5):
        dark.observe(np.array([np.nan, 1.0, -2.0]))
    assert dark.current.version == 0


def test_scheduled_trace_of_a_per_channel_observer_without_initial_scales(rng):
    """The unready initial parameters are one value for every channel, the scheduled ones one per
    channel: trace gives rows of one width (it raised NumPy's inhomogeneous-shape error)."""
    series = rng.standard_normal((12, 3))
    series[3:6, 1] = np.nan

    def fn(s):
        return ScheduledScales(lambda: MinMaxObserver(alpha=0.9, axis=-1), window=3, every=2).trace(s)

    tr = fn(series)
    assert tr["scale"].shape == tr["zero_point"].shape == (12, 3)
    np.testing.assert_array_equal(tr["scale"][:2], np.float32(EPS / 255))     # the unready floor
    assert list(tr["version"]) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    sched = ScheduledScales(lambda: MinMaxObserver(alpha=0.9, axis=-1), window=3, every=2)
    for t, x in enumerate(series):
        np.testing.assert_array_equal(tr["scale"][t], np.broadcast_to(sched.current.scale, (3,)))
        np.testing.assert_array_equal(tr["zero_point"][t], np.broadcast_to(sched.current.zero_point, (3,)))
        sched.observe(x)
    check_causal(fn, series, strict=True)


@pytest.mark.parametrize("initial,match", [
    ((0.0, 0), r"scale\[0\]: must be finite and > 0"), ((np.nan, 0), r"scale\[0\]: must be finite"),
    ((np.inf, 0), r"scale\[0\]"), ((-1.0, 0), r"scale\[0\]"), (([1.0, 1e39], 0), r"scale\[1\].*1e\+39"),
    ((1e-50, 0), r"scale\[0\]"), ((1.0, 0.5), r"zero_point\[0\]: must be an int32 integer"),
    ((1.0, [0, 128]), r"zero_point\[1\]: must lie in \[-127, 127\]"),
    (([1.0, 2.0], [0, 0, 0]), r"scale, zero_point: shapes \(2,\) and \(3,\) do not broadcast")])
def test_scheduled_scales_validate_initial(initial, match):
    with pytest.raises(ValueError, match="initial: " + match):
        ScheduledScales(lambda: AbsMaxObserver(), window=5, every=5, initial=initial)


@pytest.mark.parametrize("initial,match", [
    (1.0, r"initial: must be a \(scale, zero_point\) pair, got 1.0"),
    ((1.0, 0, 3), r"initial: must be a \(scale, zero_point\) pair, got 3 items"),
    ((1.0 + 2j, 0), r"initial: scale: must be real numbers, got dtype complex128"),
    ((True, 0), r"initial: scale: must be real numbers, got dtype bool"),
    (("1.0", 0), r"initial: scale: must be real numbers"),
    ((1.0, np.zeros(1, complex)), r"initial: zero_point: must be real numbers")])
def test_scheduled_scales_refuse_initial_parameters_that_are_not_a_pair_of_numbers(initial, match):
    # a complex scale lost its imaginary part, a bool was a scale of 1, the others raised from unpacking
    with pytest.raises(TypeError, match="^" + match):
        ScheduledScales(lambda: AbsMaxObserver(), window=5, every=5, initial=initial)
    if isinstance(initial, tuple) and len(initial) == 2:
        with pytest.raises(TypeError, match="^" + match[len("initial: "):]):
            FrozenScales(*initial, 0, (0, 0))


def test_scheduled_scales_refuse_a_make_observer_that_makes_no_observer():
    with pytest.raises(TypeError, match=r"^make_observer: must be a callable returning a fresh Observer, got 3"):
        ScheduledScales(3, window=5, every=5)
    with pytest.raises(TypeError, match=r"^make_observer: must return an Observer, returned int"):
        ScheduledScales(lambda: 3, window=5, every=5)


def test_frozen_scales_cannot_be_changed_in_place():
    mine = np.array([1.0, 2.0])
    sched = ScheduledScales(lambda: AbsMaxObserver(axis=-1), window=2, every=2, initial=(mine, 0))
    cur = sched.current
    mine[0] = 99.0                                 # the caller's array is copied...
    assert cur.scale[0] == 1.0
    with pytest.raises(ValueError, match="read-only"):
        cur.scale[0] = 123.0                       # ...and the live one is read-only
    with pytest.raises(ValueError, match="read-only"):
        cur.zero_point[:] = 5
    assert cur.scale.dtype == np.float32 and cur.zero_point.dtype == np.int32
    with pytest.raises(ValueError, match=r"scale\[0\]"):
        FrozenScales(np.array([0.0]), np.array([0]), 1, (0, 1))


# -- ranges past float32: zero points, clamping, channel counts --------------------------------------

def _representable(scale, zp, bits=8):
    qmin, qmax = (-128, 127) if bits == 8 else (-32768, 32767)
    s = float(scale)
    return (qmin - int(zp)) * s, (qmax - int(zp)) * s


@pytest.mark.parametrize("lo,hi", [(-1e300, 1e300), (-np.inf, np.inf), (-1.7e308, 1.7e308),
                                   (-1e43, 3e43), (-3e43, 1e43), (-1.0, 1e300), (-1e300, 1.0)])
@pytest.mark.parametrize("bits", [8, 16])
def test_capped_scale_keeps_the_zero_point_where_the_range_puts_it(lo, hi, bits):
    s, z = qparams_from_range(lo, hi, bits=bits)
    assert s == np.finfo(np.float32).max
    rlo, rhi = _representable(s, z, bits)
    assert rlo <= 0 <= rhi
    # 0 sits at the same fraction of the grid as of the range (to half a code)
    frac_range = -max(min(lo, 0), -1.79e308) / 2 / (min(hi, 1.79e308) / 2 - max(lo, -1.79e308) / 2)
    steps = 255 if bits == 8 else 65535
    assert abs((int(z) - (-128 if bits == 8 else -32768)) - frac_range * steps) <= 0.5 + 1e-9
    if lo < -1 and hi > 1:
        assert rlo < 0 < rhi                       # both signs representable
    # an uncapped range is untouched: the exact formula
    s2, z2 = qparams_from_range(-1.0, 3.0, bits=bits)
    assert z2 == (-128 if bits == 8 else -32768) - np.rint(-1.0 / np.float64(s2))


def test_symmetric_huge_range_has_its_zero_point_in_the_middle():
    s, z = qparams_from_range(np.array([-1e300, -1.0]), np.array([1e300, 1.0]))
    assert z[0] == 0 and np.all(np.isfinite(s))
    assert z[1] == -128 - np.rint(-1.0 / np.float64(s[1]))


def test_ema_of_float64_extremes_does_not_overflow():
    big = np.finfo(np.float64).max
    o = MinMaxObserver()
    for _ in range(3):
        o.update(np.array([-big, big]))
    lo, hi = o.range
    assert np.isfinite(lo).all() and np.isfinite(hi).all() and hi[0] == np.finfo(np.float32).max
    s, z = o.qparams()
    assert np.isfinite(s).all() and z[0] == 0   # symmetric data: zero point in the middle
    o = MinMaxObserver(strict=True)
    o.update(np.array([-1.0, 1e39]))              # finite float64: observed (clamped), not an error
    assert o.n_nonfinite == 0 and o.range[1][0] == np.finfo(np.float32).max


def test_per_channel_observer_refuses_a_new_channel_count():
    o = MinMaxObserver(axis=-1)
    o.update(np.array([[5.0]]))
    with pytest.raises(ValueError, match=r"tick 1.*3 channels along axis -1 \(shape \(1, 3\)\).*has 1"):
        o.update(np.array([[1.0, 2.0, 3.0]]))
    o = AbsMaxObserver(axis=-1)
    o.update(np.zeros((0, 4)))                    # an empty batch still fixes the channel count
    o.update(np.ones((2, 4)))
    assert o.ready
    with pytest.raises(ValueError, match="5 channels"):
        o.update(np.ones((2, 5)))


def test_standardizer_warmup_and_arguments():
    x = np.array([[1.0], [1.001], [np.nan], [1.002], [0.9]])
    assert EmaStandardizer().transform(x[:2])[1, 0] == pytest.approx(1e9)   # the documented hazard
    z = EmaStandardizer(alpha=0.5, warmup=3).transform(x)
    assert z[0, 0] == 0 and z[1, 0] == 0 and np.isnan(z[2, 0]) and z[3, 0] == 0
    ref = EmaStandardizer(alpha=0.5).transform(x)
    assert z[4, 0] == ref[4, 0] != 0                # same statistics, only the output is held back
    with pytest.raises(ValueError, match="warmup"):
        EmaStandardizer(warmup=0)
    with pytest.raises(ValueError, match="floor"):
        EmaStandardizer(floor=0.0)
    st = EmaStandardizer()
    st.transform(np.ones((3, 2)))
    with pytest.raises(ValueError, match="series: has 3 features.*built on 2"):
        st.transform(np.ones((3, 3)))


@pytest.mark.parametrize("kwargs,error,match", [
    ({"alpha": [0.5]}, TypeError, r"alpha: must be a real number in \[0, 1\) or None, got \[0.5\]"),
    ({"alpha": "0.5"}, TypeError, r"alpha: must be a real number"),
    ({"alpha": np.array([0.5, 0.6])}, TypeError, r"alpha: must be a real number"),
    ({"alpha": False}, TypeError, r"alpha: must be a real number"),
    ({"alpha": 1.0}, ValueError, r"alpha: must be in \[0, 1\) or None, got 1.0"),
    ({"seed": "a"}, TypeError, r"seed: must be an int, got 'a'"),
    ({"seed": 1.5}, TypeError, r"seed: must be an int, got 1.5"),
    ({"symmetric": "no"}, TypeError, r"symmetric: must be a bool, got 'no'"),
    ({"strict": "no"}, TypeError, r"strict: must be a bool, got 'no'")])
def test_observer_arguments_of_the_wrong_type_are_named(kwargs, error, match):
    # before: bare float() errors, a seed of 1.5 silently 1, symmetric="no" silently True
    with pytest.raises(error, match="^" + match):
        MinMaxObserver(**kwargs)
    assert MinMaxObserver(alpha=np.float32(0.5), seed=np.int64(3), strict=np.bool_(True)).alpha == 0.5


@pytest.mark.parametrize("kwargs,error,match", [
    ({"alpha": None}, TypeError, r"alpha: must be a real number in \[0, 1\), got None"),
    ({"alpha": "0.5"}, TypeError, r"alpha: must be a real number"),
    ({"alpha": np.array([0.5, 0.6])}, TypeError, r"alpha: must be a real number"),
    ({"floor": "x"}, TypeError, r"floor: must be a real number, got 'x'"),
    ({"warmup": float("nan")}, ValueError, r"warmup: must be an integer >= 1, got nan"),
    ({"warmup": float("inf")}, ValueError, r"warmup: must be an integer >= 1, got inf"),
    ({"warmup": True}, TypeError, r"warmup: must be a real number, got True")])
def test_standardizer_arguments_of_the_wrong_type_are_named(kwargs, error, match):
    with pytest.raises(error, match="^" + match):
        EmaStandardizer(**kwargs)
    assert EmaStandardizer(warmup=3.0).warmup == 3


def test_standardizer_refuses_a_series_that_is_not_real_numbers():
    # a complex series lost its imaginary parts silently; strings raised NumPy's conversion error
    for bad in (np.ones((3, 2), complex), [["a", "b"]]):
        with pytest.raises(TypeError, match=r"^series: must be real numbers"):
            EmaStandardizer().transform(bad)
    np.testing.assert_array_equal(EmaStandardizer().transform([[1, 2], [1, 2]]), np.zeros((2, 2)))


def test_observer_axis_and_input_checks():
    x = np.arange(6.0).reshape(2, 3)
    for axis in (2, 5, -3):
        with pytest.raises(ValueError, match=rf"axis: {axis} is out of range for tick 0's batch of shape \(2, 3\)"):
            MinMaxObserver(axis=axis).update(x)
    for axis in (1.5, "a", True):
        with pytest.raises(TypeError, match="axis: must be an int or None"):
            MinMaxObserver(axis=axis)
    with pytest.raises(ValueError, match=r"x \(tick 0\): a per-channel observer \(axis=-1\) needs at least 1-D"):
        MinMaxObserver(axis=-1).update(np.float64(3.0))
    with pytest.raises(TypeError, match="must be real numbers"):
        MinMaxObserver().update(np.array([1 + 2j]))
    lo, hi = MinMaxObserver(axis=np.int64(0), alpha=None).update(x).range
    np.testing.assert_array_equal(lo, [0, 3])
    np.testing.assert_array_equal(hi, [2, 5])


def test_qparams_refuse_an_inverted_range():
    with pytest.raises(ValueError, match=r"^lo, hi: the range is inverted, lo 5.0 > hi -5.0"):
        qparams_from_range(5.0, -5.0)
    with pytest.raises(ValueError, match=r"^lo\[1\], hi\[1\]: the range is inverted"):
        qparams_from_range(np.array([0.0, 5.0]), np.array([1.0, -5.0]))


def test_standardizer_survives_one_absurd_value():
    """A finite 1e200 once: clamped to float32's range, so the variance stays finite and later ticks
    standardize to ordinary values again (before, d * d overflowed and every later z was ~-7e44)."""
    x = np.ones((200, 2))
    x[:, 0] = np.arange(200) % 3
    x[10, 0] = 1e200
    z = EmaStandardizer(alpha=0.9).transform(x)
    assert np.isfinite(z).all()
    assert np.abs(z[-50:, 0]).max() < 5


def test_check_causal_argument_errors_name_the_argument():
    f = lambda s: np.cumsum(s, axis=0)   # noqa: E731
    with pytest.raises(TypeError, match=r"^series: must hold real numbers"):
        check_causal(f, np.array([True, False, True]))
    with pytest.raises(TypeError, match=r"^series: must be an array of ticks or a list of batches, got float64"):
        check_causal(f, np.float64(3.0))
    with pytest.raises(TypeError, match=r"^cuts: must be None, an int or a list of ints, got True"):
        check_causal(f, np.arange(10.0), cuts=True)
    with pytest.raises(TypeError, match=r"^perturbations: must be a tuple of names, got the string 'noise'"):
        check_causal(f, np.arange(10.0), perturbations="noise")
    assert check_causal(f, np.arange(10)).checks > 0      # integer series are fine


# -- scheduled scales: a bad batch is refused before it is recorded ------------------------------------

def test_scheduled_scales_refuse_a_bad_batch_and_go_on(rng):
    sched = ScheduledScales(lambda: MinMaxObserver(axis=-1, alpha=None), window=3, every=1)
    good = rng.standard_normal((6, 2, 3))
    sched.observe(good[0])
    with pytest.raises(ValueError, match=r"x \(tick 1\): has 4 channels along axis -1 \(shape \(1, 4\)\).*has 3"):
        sched.observe(np.ones((1, 4)))
    assert sched.step == 1 and len(sched._past) == 1 and sched.current.version == 1
    for t, x in enumerate(good[1:], start=1):          # the good ticks after it are unaffected
        sched.observe(x)
    ref = ScheduledScales(lambda: MinMaxObserver(axis=-1, alpha=None), window=3, every=1)
    for x in good:
        ref.observe(x)
    assert sched.step == 6 and sched.current.window == ref.current.window == (3, 6)
    np.testing.assert_array_equal(sched.current.scale, ref.current.scale)
    # every=4: the bad tick falls between updates and is still refused, naming the real tick
    sparse = ScheduledScales(lambda: MinMaxObserver(axis=-1), window=4, every=4)
    for x in good[:5]:
        sparse.observe(x)
    with pytest.raises(ValueError, match=r"x \(tick 5\): has 2 channels"):
        sparse.observe(np.ones((1, 2)))
    # per-channel initial parameters fix the channel count from the start
    init = ScheduledScales(lambda: MinMaxObserver(axis=-1), window=4, every=4,
                           initial=(np.ones(3), np.zeros(3)))
    with pytest.raises(ValueError, match=r"x \(tick 0\): has 4 channels.*has 3 from the initial parameters"):
        init.observe(np.ones((1, 4)))
    assert init.step == 0 and init._past == []


def test_scheduled_scales_refuse_complex_and_strict_nonfinite_batches(rng):
    sched = ScheduledScales(lambda: MinMaxObserver(alpha=None), window=2, every=1)
    with pytest.raises(TypeError, match=r"x \(tick 0\): must be real numbers, got complex128"):
        sched.observe(np.array([1 + 100j, -1 + 0j]))
    with pytest.raises(TypeError, match=r"x \(tick 0\): must be real numbers, got <U"):
        sched.observe(np.array(["1.0"]))
    assert sched.step == 0
    strict = ScheduledScales(lambda: AbsMaxObserver(alpha=None, strict=True), window=3, every=3)
    strict.observe(np.ones(2))
    with pytest.raises(ValueError, match=r"x \(tick 1\) at index \(1,\): must be finite"):
        strict.observe(np.array([1.0, np.nan]))
    strict.observe(np.ones(2))
    strict.observe(np.full(2, 4.0))
    assert strict.current.version == 1 and strict.current.scale[0] == np.float32(4.0 / 127)


@pytest.mark.parametrize("arg,value,error,match", [
    ("window", 1.5, TypeError, r"window: must be an int >= 1, got 1.5"),
    ("window", float("nan"), TypeError, r"window: must be an int >= 1, got nan"),
    ("window", "3", TypeError, r"window: must be an int >= 1, got '3'"),
    ("window", True, TypeError, r"window: must be an int >= 1, got True"),
    ("window", 0, ValueError, r"window: must be >= 1, got 0"),
    ("every", 2.0, TypeError, r"every: must be an int >= 1, got 2.0"),
    ("every", -1, ValueError, r"every: must be >= 1, got -1")])
def test_scheduled_scales_integer_arguments(arg, value, error, match):
    kwargs = {"window": 3, "every": 2, arg: value}
    with pytest.raises(error, match="^" + match):
        ScheduledScales(lambda: AbsMaxObserver(), **kwargs)
    assert ScheduledScales(lambda: AbsMaxObserver(), window=np.int64(3), every=np.int32(2)).window == 3


# -- calibration noise: keys, sigma ----------------------------------------------------------------

def test_calibration_noise_keeps_its_values_for_existing_seeds():
    # results computed with these seeds before the key was built as uint64 words must not change
    x = np.zeros(3)
    pinned = {(0, 0): [0.15929546600623282, -1.7741885208017214, 1.3265118818830892],
              (7, 3): [-2.3662085691511003, -1.391050781996294, -0.7264621797154692],
              (2**53, 5): [-0.6540705509703741, 0.2879883174853349, 0.10165216911009296],
              (12345, 2**40): [0.679526180060861, 1.60446279438176, -1.7514098711063155]}
    for (seed, step), want in pinned.items():
        assert calibration_noise(x, 1.0, seed, step).tolist() == want
    # and the same as a Philox stream keyed by the plain list, the old construction, for any such seed
    rng = np.random.default_rng(5)
    for seed in [int(s) for s in rng.integers(0, 2**53, 20)]:
        step = int(rng.integers(0, 2**31))
        old = np.random.Generator(np.random.Philox(key=[seed, step])).standard_normal(4)
        np.testing.assert_array_equal(calibration_noise(np.zeros(4), 1.0, seed, step), old)


def test_calibration_noise_distinct_seeds_give_distinct_noise():
    x = np.zeros(4)
    seeds = [0, 1, -1, -2, -1000, 2**53 + 1, 2**63, 2**63 + 1, 2**64 - 3]
    draws = [calibration_noise(x, 1.0, s, 0).tobytes() for s in seeds]
    assert len(set(draws)) == len(seeds)
    # a seed is taken mod 2**64: -1 and 2**64 - 1 are one key
    np.testing.assert_array_equal(calibration_noise(x, 1.0, -1, 3), calibration_noise(x, 1.0, 2**64 - 1, 3))


@pytest.mark.parametrize("sigma,error", [(-0.1, ValueError), (np.inf, ValueError), (np.nan, ValueError),
                                         ("0.1", TypeError), (None, TypeError), (True, TypeError),
                                         (1j, TypeError)])
def test_noise_levels_are_checked(sigma, error):
    with pytest.raises(error, match="^sigma: must be"):
        calibration_noise(np.zeros(2), sigma, 0, 0)
    with pytest.raises(error, match="^noise_sigma: must be"):
        MinMaxObserver(noise_sigma=sigma)
    assert MinMaxObserver(noise_sigma=np.float32(0.5)).noise_sigma == 0.5


@pytest.mark.parametrize("make", [lambda: MinMaxObserver(axis=-1), lambda: AbsMaxObserver(axis=0)])
def test_a_per_channel_observer_refuses_a_batch_of_no_channel(make):
    """A first batch of shape (5, 0) fixed the observer at no channel ('ready', with empty scales)
    and refused every real batch after it; it is refused, and the observer stays as it was."""
    obs = make()
    empty = np.empty((5, 0)) if obs.axis == -1 else np.empty((0, 5))
    with pytest.raises(ValueError, match=r"^x \(tick 0\): a per-channel observer .* needs at least one channel"):
        obs.update(empty)
    assert not obs.ready and obs.step == 0
    obs.update(np.arange(15.0).reshape(5, 3) if obs.axis == -1 else np.arange(15.0).reshape(3, 5))
    assert obs.ready and obs.range[0].shape == (3,)
