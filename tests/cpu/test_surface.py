"""tickgpu.VolSurface on the CPU backend against QuantLib's BlackVarianceSurface and a NumPy reference,
plus extrapolation, grid validation and bad queries."""
import numpy as np
import pytest

import tickgpu
from tickgpu._native import ffi, lib, ptr

from reference import surface_variance, surface_vol

ql = pytest.importorskip("QuantLib")


def random_grid(rng, nk=None, nt=None):
    """Strikes, expiries (whole days / 365) and vols with total variance increasing in t at every
    strike (QuantLib refuses a grid where it decreases)."""
    nk = nk or int(rng.integers(2, 13))
    nt = nt or int(rng.integers(1, 11))
    strikes = np.sort(rng.choice(np.arange(40.0, 200.0, 0.5), nk, replace=False))
    days = np.sort(rng.choice(np.arange(1, 3651), nt, replace=False))
    expiries = days / 365.0
    vols = rng.uniform(0.05, 1.0, (nt, nk))
    variance = vols**2 * expiries[:, None]
    for i in range(1, nt):
        variance[i] = np.maximum(variance[i], variance[i - 1] * (1 + 1e-6))
    vols = np.sqrt(variance / expiries[:, None])
    return strikes, days, expiries, vols


def quantlib_surface(strikes, days, vols):
    today = ql.Date(15, ql.June, 2026)
    ql.Settings.instance().evaluationDate = today
    matrix = ql.Matrix(len(strikes), len(days))        # QuantLib's matrix is strikes x dates
    for j in range(len(strikes)):
        for i in range(len(days)):
            matrix[j][i] = float(vols[i, j])
    flat = ql.BlackVarianceSurface.ConstantExtrapolation
    surf = ql.BlackVarianceSurface(today, ql.NullCalendar(), [today + int(d) for d in days],
                                   [float(k) for k in strikes], matrix, ql.Actual365Fixed(), flat, flat)
    surf.setInterpolation("bilinear")
    surf.enableExtrapolation()
    return surf


def quantlib_values(surf, K, t):
    variance = np.array([surf.blackVariance(float(tt), float(k)) for k, tt in zip(K, t)])
    vol = np.array([surf.blackVol(float(tt), float(k)) if tt > 0 else np.nan for k, tt in zip(K, t)])
    return variance, vol


@pytest.mark.parametrize("region", ["inside", "outside"])
def test_variance_mode_matches_quantlib(rng, region):
    for _ in range(20):
        strikes, days, expiries, vols = random_grid(rng)
        surf = tickgpu.VolSurface(strikes, expiries, vols)
        n = 200
        if region == "inside":
            K = rng.uniform(strikes[0], strikes[-1], n)
            t = rng.uniform(0, expiries[-1], n)
            K[:10], t[:10] = strikes[rng.integers(0, len(strikes), 10)], expiries[rng.integers(0, len(expiries), 10)]
        else:
            # Flat vol in strike below / above the grid and beyond the last expiry.
            K = np.where(rng.random(n) < 0.5, strikes[0] - rng.uniform(0, 50, n), strikes[-1] + rng.uniform(0, 200, n))
            t = np.where(rng.random(n) < 0.5, rng.uniform(0, expiries[-1], n), expiries[-1] * rng.uniform(1, 5, n))
        want_var, want_vol = quantlib_values(quantlib_surface(strikes, days, vols), K, t)
        got_var = surf.variance(K, t)
        np.testing.assert_allclose(got_var, want_var, rtol=1e-12, atol=1e-15)
        positive = t > 0
        np.testing.assert_allclose(surf.vol(K, t)[positive], want_vol[positive], rtol=1e-12)


@pytest.mark.parametrize("interpolation", ["variance", "vol"])
def test_matches_numpy_reference(rng, interpolation):
    for _ in range(20):
        strikes, _, expiries, vols = random_grid(rng, nk=int(rng.integers(1, 10)), nt=int(rng.integers(1, 8)))
        surf = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
        K = rng.uniform(strikes[0] - 30, strikes[-1] + 30, 300)
        t = rng.uniform(1e-6, 1.5 * expiries[-1], 300)
        np.testing.assert_allclose(surf.variance(K, t),
                                   surface_variance(strikes, expiries, vols, K, t, interpolation), rtol=1e-12)
        np.testing.assert_allclose(surf.vol(K, t), surface_vol(strikes, expiries, vols, K, t, interpolation),
                                   rtol=1e-12)


def test_variance_and_vol_modes_differ_but_agree_on_the_nodes():
    strikes, expiries = [80.0, 100.0, 120.0], [0.25, 1.0]
    vols = [[0.35, 0.25, 0.30], [0.28, 0.22, 0.24]]
    by_var = tickgpu.VolSurface(strikes, expiries, vols)
    by_vol = tickgpu.VolSurface(strikes, expiries, vols, interpolation="vol")
    K, T = np.meshgrid(strikes, expiries)
    np.testing.assert_allclose(by_var.vol(K, T), vols, rtol=1e-15)
    np.testing.assert_allclose(by_vol.vol(K, T), vols, rtol=1e-15)
    between = by_var.vol(90.0, 0.6), by_vol.vol(90.0, 0.6)
    assert abs(between[0] - between[1]) > 1e-4
    # Vol mode at (90, 0.6): bilinear in vol, by hand.
    u, v = 0.5, (0.6 - 0.25) / 0.75
    want = (1 - v) * ((1 - u) * 0.35 + u * 0.25) + v * ((1 - u) * 0.28 + u * 0.22)
    assert by_vol.vol(90.0, 0.6) == pytest.approx(want, rel=1e-14)


def test_extrapolation_rules():
    strikes, expiries = [90.0, 100.0, 110.0], [0.5, 2.0]
    vols = np.array([[0.30, 0.20, 0.25], [0.26, 0.21, 0.23]])
    for interpolation in ("variance", "vol"):
        s = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
        # Flat in strike, at and between expiries.
        assert s.vol(10.0, 0.5) == pytest.approx(0.30, rel=1e-15)
        assert s.vol(1e6, 2.0) == pytest.approx(0.23, rel=1e-15)
        assert s.vol(50.0, 1.3) == s.vol(90.0, 1.3)
        # Flat vol beyond the last expiry.
        np.testing.assert_allclose(s.vol([80.0, 100.0, 200.0], 7.0), [0.26, 0.21, 0.23], rtol=1e-15)
        np.testing.assert_allclose(s.variance(100.0, 7.0), 0.21**2 * 7.0, rtol=1e-15)
        # Before the first expiry the vol is the first expiry's (variance linear in t from 0).
        np.testing.assert_allclose(s.vol(100.0, [0.0, 1e-9, 0.1, 0.5]), 0.20, rtol=1e-14)
        assert s.variance(100.0, 0.0) == 0.0
        assert s.variance(100.0, 0.25) == pytest.approx(0.2**2 * 0.25, rel=1e-14)


def test_single_node_grid_is_flat():
    s = tickgpu.VolSurface([100.0], [1.0], [[0.2]])
    np.testing.assert_allclose(s.vol([1.0, 100.0, 1e4], [0.0, 0.5, 30.0]), 0.2, rtol=1e-15)


def test_broadcast_empty_and_scalars():
    s = tickgpu.VolSurface([90.0, 110.0], [1.0], [[0.2, 0.3]])
    out = s.vol(np.array([[90.0], [100.0], [110.0]]), np.array([0.5, 1.0]))
    assert out.shape == (3, 2)
    np.testing.assert_allclose(out[1], np.sqrt((0.2**2 + 0.3**2) / 2), rtol=1e-15)
    assert s.vol(100.0, 1.0).shape == ()
    assert s.variance(np.array([]), 1.0).shape == (0,)
    with pytest.raises(ValueError, match="t"):
        s.vol(np.ones(3), np.ones(2))


def test_bad_queries_give_nan_or_raise_with_strict():
    s = tickgpu.VolSurface([90.0, 110.0], [1.0], [[0.2, 0.3]])
    K = np.array([100.0, np.nan, 100.0, np.inf, 100.0])
    t = np.array([1.0, 1.0, -0.5, 1.0, np.nan])
    out = s.vol(K, t)
    assert np.isfinite(out[0]) and np.isnan(out[1:]).all()
    assert np.isnan(s.variance(K, t)[1:]).all()
    with pytest.raises(ValueError, match=r"strike\[1\]: must be finite"):
        s.vol(K, 1.0, strict=True)
    with pytest.raises(ValueError, match=r"t\[2\]: must be >= 0, got -0.5"):
        s.variance(100.0, t[:3], strict=True)
    with pytest.raises(ValueError, match="backend"):
        s.vol(100.0, 1.0, backend="fpga")


def test_vol_before_the_first_expiry_for_every_positive_t():
    """Variance mode: for every t in (0, T_first], subnormal included, the vol is the first expiry's
    (the variance is linear in t from 0), taken from the grid, not from w(t) / t, which
    underflowed to 0 for t = 5e-324."""
    s = tickgpu.VolSurface([90.0, 100.0], [0.25, 1.0], [[0.3, 0.2], [0.25, 0.2]])
    first = np.sqrt(0.5 * 0.3**2 + 0.5 * 0.2**2)      # at 95, halfway in variance
    assert first == pytest.approx(0.2549509756796392, rel=1e-15)
    t = np.array([5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-100, 1e-9, 0.1, 0.25, 0.0])
    np.testing.assert_allclose(s.vol(95.0, t), first, rtol=1e-15)
    np.testing.assert_allclose(s.variance(95.0, t[3:]), first**2 * t[3:], rtol=1e-14)
    assert s.variance(95.0, 5e-324) <= 5e-324
    by_vol = tickgpu.VolSurface([90.0, 100.0], [0.25, 1.0], [[0.3, 0.2], [0.25, 0.2]], interpolation="vol")
    np.testing.assert_allclose(by_vol.vol(95.0, t), 0.25, rtol=1e-15)


@pytest.mark.filterwarnings("error")
def test_strikes_spanning_more_than_the_largest_double():
    """k[1] - k[0] overflows for strikes -1e308 and 1e308: the weight is still (K - k0) / (k1 - k0),
    halfway at K = 0 (vol 0.3 bilinear in vol, sqrt((0.04 + 0.16) / 2) in variance)."""
    by_vol = tickgpu.VolSurface([-1e308, 1e308], [1.0], [[0.2, 0.4]], interpolation="vol")
    np.testing.assert_allclose(by_vol.vol([0.0, -1e308, 1e308, 5e307, -1.5e308, 1.7e308], 1.0),
                               [0.3, 0.2, 0.4, 0.35, 0.2, 0.4], rtol=1e-15)
    by_var = tickgpu.VolSurface([-1e308, 1e308], [1.0], [[0.2, 0.4]])
    assert by_var.vol(0.0, 1.0) == pytest.approx(np.sqrt(0.1), rel=1e-15)
    assert by_var.variance(0.0, 2.0) == pytest.approx(0.2, rel=1e-15)
    three = tickgpu.VolSurface([-1.5e308, 0.0, 1.5e308], [1.0], [[0.2, 0.3, 0.4]], interpolation="vol")
    np.testing.assert_allclose(three.vol([-0.75e308, 0.75e308], 1.0), [0.25, 0.35], rtol=1e-15)


@pytest.mark.parametrize("kwargs, name", [
    (dict(vols=[["0.2", "0.2"], ["0.2", "0.2"]]), "vols"),
    (dict(vols=[[0.2, 0.2 + 0j], [0.2, 0.2]]), "vols"),
    (dict(strikes=["90", "110"]), "strikes"),
    (dict(expiries=[0.5, None]), "expiries"),
])
def test_grid_values_must_be_real_numbers(kwargs, name):
    args = dict(strikes=[90.0, 110.0], expiries=[0.5, 1.0], vols=[[0.2, 0.2], [0.2, 0.2]])
    args.update(kwargs)
    with pytest.raises(TypeError, match=rf"^{name}: must be a real number"):
        tickgpu.VolSurface(**args)
    s = tickgpu.VolSurface([90.0, 110.0], [1.0], [[0.2, 0.3]])
    for strict in (False, True):
        with pytest.raises(TypeError, match=r"^strike: must be a real number"):
            s.vol("100", 1.0, strict=strict)
        with pytest.raises(TypeError, match=r"^t: must be a real number"):
            s.variance(100.0, [None], strict=strict)


@pytest.mark.parametrize("kwargs, message", [
    (dict(strikes=[100.0, 90.0]), r"strikes\[1\]: must be > strikes\[0\] \(strictly increasing\), got 90.0"),
    (dict(strikes=[90.0, np.nan]), r"strikes\[1\]: must be finite"),
    (dict(strikes=[]), r"strikes: must be a 1-D array of at least one value"),
    (dict(expiries=[0.0, 1.0]), r"expiries\[0\]: must be > 0, got 0.0"),
    (dict(expiries=[1.0, 1.0]), r"expiries\[1\]: must be > expiries\[0\]"),
    (dict(expiries=[[0.5, 1.0]]), r"expiries: must be a 1-D array"),
    (dict(vols=[[0.2, -0.1], [0.2, 0.2]]), r"vols\[\(0, 1\)\]: must be >= 0, got -0.1"),
    (dict(vols=[[0.2, 0.2], [np.inf, 0.2]]), r"vols\[\(1, 0\)\]: must be finite"),
    (dict(vols=[[0.2, 0.2]]), r"vols: must have shape \(len\(expiries\), len\(strikes\)\) = \(2, 2\), got \(1, 2\)"),
    (dict(interpolation="cubic"), r"interpolation: must be 'variance' or 'vol'"),
    (dict(vols=[[0.2, 0.2], [0.2]]), r"^vols: not an array of one shape \("),
    (dict(strikes=[90.0, [110.0, 120.0]]), r"^strikes: not an array of one shape \("),
    (dict(expiries=[[0.5], 1.0]), r"^expiries: not an array of one shape \("),
])
def test_grid_validation_messages(kwargs, message):
    args = dict(strikes=[90.0, 110.0], expiries=[0.5, 1.0], vols=[[0.2, 0.2], [0.2, 0.2]])
    args.update(kwargs)
    interpolation = args.pop("interpolation", "variance")
    with pytest.raises(ValueError, match=message):
        tickgpu.VolSurface(**args, interpolation=interpolation)


def test_attributes_are_read_only_copies():
    vols = np.array([[0.2, 0.3]])
    s = tickgpu.VolSurface([90, 110], [1], vols)
    vols[0, 0] = 5.0                               # the surface keeps its own copy
    assert s.vols[0, 0] == 0.2 and s.strikes.dtype == np.float64 and s.interpolation == "variance"
    with pytest.raises(ValueError):
        s.vols[0, 0] = 1.0
    with pytest.raises(AttributeError):
        s.interpolation = "vol"


def native_eval(nk, nt, strikes, expiries, vols, mode=0, what=0, n=1):
    """tg_surface_eval called directly, bypassing the Python checks."""
    grid = ffi.new("tg_surface *")
    grid.nk, grid.nt, grid.mode = nk, nt, mode
    keep = [np.ascontiguousarray(a, dtype=np.float64) for a in (strikes, expiries, vols)]
    grid.strikes, grid.expiries, grid.vols = (ptr(a, "double *") for a in keep)
    K, t, out = np.full(n, 100.0), np.full(n, 1.0), np.full(n, -1.0)
    status = lib.tg_surface_eval(grid, n, ptr(K, "double *"), 0, ptr(t, "double *"), 0,
                                 ptr(out, "double *"), what, 0)
    return status, out


def test_native_grid_validation():
    good = ([90.0, 110.0], [0.5, 1.0], [0.2, 0.2, 0.2, 0.2])
    assert native_eval(2, 2, *good)[0] == lib.TG_OK
    assert native_eval(0, 2, *good)[0] == lib.TG_EINVAL
    assert native_eval(2, -1, *good)[0] == lib.TG_EINVAL
    assert native_eval(2, 2, [110.0, 90.0], *good[1:])[0] == lib.TG_EINVAL
    assert native_eval(2, 2, good[0], [0.0, 1.0], good[2])[0] == lib.TG_EINVAL
    assert native_eval(2, 2, good[0], [1.0, 0.5], good[2])[0] == lib.TG_EINVAL
    assert native_eval(2, 2, *good[:2], [0.2, np.nan, 0.2, 0.2])[0] == lib.TG_EINVAL
    assert native_eval(2, 2, *good[:2], [0.2, -0.2, 0.2, 0.2])[0] == lib.TG_EINVAL
    assert native_eval(2, 2, *good, mode=2)[0] == lib.TG_EINVAL
    assert native_eval(2, 2, *good, what=3)[0] == lib.TG_EINVAL
    assert lib.tg_surface_eval(ffi.NULL, 0, ffi.NULL, 0, ffi.NULL, 0, ffi.NULL, 0, 0) == lib.TG_EINVAL


def test_multithreaded_equals_single_threaded(rng):
    strikes, _, expiries, vols = random_grid(rng, nk=15, nt=9)
    s = tickgpu.VolSurface(strikes, expiries, vols)
    K = rng.uniform(0, 250, 70_001)
    t = rng.uniform(0, 12, 70_001)
    many = s.variance(K, t)                        # above TG_PARALLEL_MIN: all cores
    one = np.concatenate([s.variance(K[i:i + 10_000], t[i:i + 10_000]) for i in range(0, 70_001, 10_000)])
    assert many.tobytes() == one.tobytes()


@pytest.mark.parametrize("expiries,vols", [([1.0, 2.0], [[1e155], [1e155]]), ([1.0, 2.0], [[1e-170], [1e-170]]),
                                           ([5e-324, 1e-323], [[0.1], [0.2]])])
def test_variance_interpolation_refuses_variances_a_double_cannot_hold(expiries, vols):
    """vol^2 t overflowing (inf vols) or underflowing (vols read as 0) would be silent garbage;
    interpolation in vol takes the same grid."""
    with pytest.raises(ValueError, match=r"^vols\[0, 0\]: total variance vol\^2 t = .* use interpolation='vol'"):
        tickgpu.VolSurface([100.0], expiries, vols)
    s = tickgpu.VolSurface([100.0], expiries, vols, interpolation="vol")
    np.testing.assert_array_equal(s.vol(100.0, expiries), np.asarray(vols)[:, 0])
    assert tickgpu.VolSurface([100.0], [1.0, 2.0], [[0.0], [1e150]]).vol(100.0, 2.0) == 1e150   # 0 and big: fine


@pytest.mark.parametrize("interpolation", ["variance", "vol"])
def test_vols_of_any_memory_order_are_stored_row_major(rng, interpolation):
    """A Fortran-ordered vols array (e.g. a strike-major grid transposed) used to construct and
    then fail every CPU evaluation with 'ndarray is not C-contiguous'."""
    strikes, _, expiries, vols = random_grid(rng, nk=int(rng.integers(2, 13)), nt=int(rng.integers(2, 11)))
    ref = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
    for given in (np.asfortranarray(vols), np.ascontiguousarray(vols.T).T, np.repeat(vols, 2, axis=1)[:, ::2]):
        surf = tickgpu.VolSurface(strikes, expiries, given, interpolation=interpolation)
        assert surf.vols.flags.c_contiguous
        np.testing.assert_array_equal(surf.vols, vols)
        K = rng.uniform(strikes[0] - 10, strikes[-1] + 10, 300)
        t = rng.uniform(0, 1.5 * expiries[-1], 300)
        np.testing.assert_array_equal(surf.vol(K, t, backend="cpu"), ref.vol(K, t, backend="cpu"))
        np.testing.assert_array_equal(surf.variance(K, t, backend="cpu"), ref.variance(K, t, backend="cpu"))
    np.testing.assert_allclose(ref.variance(K, t, backend="cpu"),
                               surface_variance(strikes, expiries, vols, K, t, interpolation), rtol=1e-13)


def test_flat_vol_beyond_the_last_expiry_for_huge_t(rng):
    """w(t) = w(T_last) t / T_last overflows for a huge t (or a huge vol): the vol is still the last
    expiry's (it came out inf), and the variance w(T_last) (t / T_last) where that is finite."""
    surf = tickgpu.VolSurface([100.0], [1.0], [[1e100]])
    t = np.array([1.0, 2.0, 1e100, 1e200, 1e300, np.finfo(np.float64).max])
    np.testing.assert_array_equal(surf.vol(100.0, t, backend="cpu"), np.full(t.size, 1e100))
    strikes, _, expiries, vols = random_grid(rng)
    vols[-1] = rng.uniform(1.0, 3.0, vols.shape[1])       # w(T_last) > 1: w t overflows near DBL_MAX
    surf = tickgpu.VolSurface(strikes, expiries, vols)
    K = rng.uniform(strikes[0] - 10, strikes[-1] + 10, 200)
    at_last = surf.vol(K, expiries[-1], backend="cpu")
    for huge in (1e300, 1e307, np.finfo(np.float64).max):
        got = surf.vol(K, huge, backend="cpu")
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, at_last, rtol=1e-14)
    # The variance: exact where w t overflows but w (t / T_last) does not.
    surf = tickgpu.VolSurface([100.0], [4.0], [[2.0]])        # w(T_last) = 16, the vol^2 4
    assert surf.variance(100.0, 4e307, backend="cpu") == 16.0 * (4e307 / 4.0)
    assert surf.variance(100.0, 1e308, backend="cpu") == np.inf       # 4e308: really beyond a double
    assert surf.vol(100.0, 1e308, backend="cpu") == 2.0
    # Ordinary t beyond the last expiry: bit for bit what sqrt(w t / T_last / t) gives (and the GPU).
    strikes, _, expiries, vols = random_grid(rng)
    surf = tickgpu.VolSurface(strikes, expiries, vols)
    t = expiries[-1] * rng.uniform(1.0, 1e6, 200)
    w = surface_variance(strikes, expiries, vols, np.full(200, strikes[0]), np.full(200, expiries[-1]), "variance")
    np.testing.assert_array_equal(surf.vol(strikes[0], t, backend="cpu"), np.sqrt(w * t / expiries[-1] / t))
