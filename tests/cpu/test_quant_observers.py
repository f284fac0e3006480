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
    "minmax_per_channel_int16": lambda: MinMaxObserver(axis=1, bits=16),
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
    with pytest.raises(ValueError, match="bits"):
        MinMaxObserver(bits=4)
    with pytest.raises(ValueError, match="noise_sigma"):
        AbsMaxObserver(noise_sigma=-1)


def test_qparams_from_range_edges():
    s, z = qparams_from_range(np.array([0.0, 1.0, -1e-8]), np.array([0.0, 1.0, 1e-8]))
    assert np.all(np.isfinite(s)) and np.all(s > 0)
    # a positive-only range is widened to hold 0: zero point at the bottom
    assert z[1] == -128 and s[1] == np.float32(1 / 255)
    s, z = qparams_from_range(-1e300, 1e300, symmetric=True)
    assert np.isfinite(s) and s > 0 and z == 0


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
