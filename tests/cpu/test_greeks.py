"""tickgpu.greeks on the CPU backend against QuantLib, a NumPy/SciPy reference and finite differences,
plus its handling of shapes, dtypes, bad input and expiry."""
import dataclasses

import numpy as np
import pytest

import tickgpu
from tickgpu._native import ffi, lib, ptr

from greeks_tolerance import check_tail_prices_never_negative
from quantlib_oracle import FIRST_ORDER, QuantLibEuropean
from reference import bsm_greeks

NAMES = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


def random_options(rng, n, *, moneyness=(0.3, 3.0), days=(1, 3650), vol=(0.01, 3.0),
                   rates=(-0.02, 0.10)):
    """Options spread log-uniformly over moneyness K/S, maturity in whole days and vol."""
    spot = rng.uniform(50.0, 150.0, n)
    strike = spot * np.exp(rng.uniform(np.log(moneyness[0]), np.log(moneyness[1]), n))
    d = np.rint(np.exp(rng.uniform(np.log(days[0]), np.log(days[1]), n))).astype(np.int64)
    t = d / 365.0
    sigma = np.exp(rng.uniform(np.log(vol[0]), np.log(vol[1]), n))
    rate = rng.uniform(*rates, n)
    div = rng.uniform(*rates, n)
    call = rng.random(n) < 0.5
    return dict(spot=spot, strike=strike, days=d, t=t, rate=rate, vol=sigma, div=div, call=call)


def market(o):
    return o["spot"], o["strike"], o["t"], o["rate"], o["vol"], o["div"], o["call"]


def assert_close(name, got, want, rel, abs_, context=None):
    got, want = np.asarray(got, float), np.asarray(want, float)
    bad = ~(np.abs(got - want) <= np.maximum(rel * np.abs(want), abs_))
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        where = {k: np.ravel(v)[i] for k, v in (context or {}).items() if np.ndim(v)}
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got.ravel()[i]!r}, want {want.ravel()[i]!r}, inputs {where}")


# ---- external oracles ----------------------------------------------------------------------------

def test_price_and_first_order_greeks_match_quantlib(rng):
    o = random_options(rng, 800)
    ql_values = QuantLibEuropean().first_order(o["spot"], o["strike"], o["days"], o["rate"],
                                               o["vol"], o["div"], o["call"])
    g = tickgpu.greeks(*market(o), backend="cpu")
    # QuantLib's normal CDF is 0.5 (1 + erf(x / sqrt 2)), switching to an asymptotic series below
    # 1e-8: against SciPy's ndtr it is off by up to 2.5e-9 relative for x in [-5.6, -4] and 1.3e-7
    # below. Where QuantLib evaluates N there (d1 or d2 < -4) it gets that relative tolerance;
    # those elements are held to 1e-10 against the SciPy reference in the next test.
    S, K, t, r, sigma, q, _ = market(o)
    sst = sigma * np.sqrt(t)
    d1 = (np.log(S / K) + (r - q) * t) / sst + sst / 2
    ql_tail = np.minimum(d1, d1 - sst) < -4.0
    rel = np.where(ql_tail, 3e-7, 1e-10)
    assert (~ql_tail).sum() > 500
    # QuantLib's theta is -(ln(D_r) price + ln(F/S) S delta + ...)/t: the logs of discount factors
    # near 1 carry an absolute error of an ulp, divided by t (6e-12 seen at one day).
    theta_abs = 1e-12 + 5e-16 * (np.abs(g.price) + S * np.abs(g.delta)) / t
    for name in FIRST_ORDER:
        assert_close(name, getattr(g, name), ql_values[name], rel,
                     theta_abs if name == "theta" else 1e-12, o)


def test_all_greeks_match_numpy_reference(rng):
    o = random_options(rng, 20000)
    g = tickgpu.greeks(*market(o), backend="cpu")
    ref = bsm_greeks(*market(o))
    for name in NAMES:
        # vanna, volga and charm reach 1e5..1e6 for one-day options and pass through zero, so
        # near their zeros an absolute 1e-12 would be below the rounding of their terms: 1e-10.
        assert_close(name, getattr(g, name), ref[name], 1e-10, 1e-12 if name in FIRST_ORDER else 1e-10, o)


def second_order_tolerance(g, S, K, t, r, sigma, q, h):
    """|finite difference - analytic| allowed: truncation + rounding noise of the differenced
    delta or vega (a few ulps of e^{-qt} or of vega over the bump: all that is left deep in or out
    of the money). A relative bump h moves ln n(d1) by about h (1 + d1^2 + d2^2), so the central
    difference's relative truncation error is about the square of that (1e-8 near the money,
    1e-3 twelve standard deviations out). It is taken relative to the size of each greek's terms,
    since vanna, volga and charm pass through zero."""
    sst = sigma * np.sqrt(t)
    d1 = (np.log(S / K) + (r - q) * t) / sst + sst / 2
    d2 = d1 - sst
    trunc = 1e-6 + (h * (1 + d1 * d1 + d2 * d2)) ** 2
    disc_q = np.exp(-q * t)
    pdf_q = g.vega / (S * np.sqrt(t))                 # e^{-qt} n(d1)
    size = {
        "vanna": pdf_q * (1 + np.abs(d1) + np.abs(d2)) / sigma,
        "volga": g.vega * (1 + d1 * d1 + d2 * d2) / sigma,
        "charm": np.abs(q) * disc_q + pdf_q * (np.abs(r - q) / sst + (1 + np.abs(d2)) / t),
    }
    noise = {"vanna": disc_q / (h * sigma), "volga": g.vega / (h * sigma), "charm": disc_q / (h * t)}
    # 1e-200: near the underflow threshold a bumped vega or delta rounds to 0 outright.
    return {k: trunc * size[k] + 4e-16 * noise[k] + 1e-200 for k in size}


@pytest.mark.parametrize("source", ["tickgpu", "quantlib"])
def test_second_order_greeks_match_finite_differences(rng, source):
    o = random_options(rng, 300, moneyness=(0.5, 2.0), days=(18, 1826), vol=(0.05, 1.5))
    S, K, t, r, sigma, q, call = market(o)
    g = tickgpu.greeks(S, K, t, r, sigma, q, call, backend="cpu")
    h = 1e-4

    if source == "tickgpu":
        def first(vol_scale=1.0, t_scale=1.0):
            return tickgpu.greeks(S, K, t * t_scale, r, sigma * vol_scale, q, call).as_dict()
    else:
        qlib = QuantLibEuropean()

        def first(vol_scale=1.0, t_scale=1.0):
            # QuantLib's t is a whole number of days; t only enters Black-Scholes-Merton as r t,
            # q t and sigma^2 t, so t (1 + e) is priced as r (1 + e), q (1 + e), sigma sqrt(1 + e).
            return qlib.first_order(S, K, o["days"], r * t_scale, sigma * vol_scale * np.sqrt(t_scale),
                                    q * t_scale, call)

    up, down = first(vol_scale=1 + h), first(vol_scale=1 - h)
    fd = {
        "vanna": (up["delta"] - down["delta"]) / (2 * h * sigma),
        "volga": (up["vega"] - down["vega"]) / (2 * h * sigma),
    }
    later, earlier = first(t_scale=1 + h), first(t_scale=1 - h)
    fd["charm"] = -(later["delta"] - earlier["delta"]) / (2 * h * t)

    tol = second_order_tolerance(g, S, K, t, r, sigma, q, h)
    for name in ("vanna", "volga", "charm"):
        got = getattr(g, name)
        bad = ~(np.abs(got - fd[name]) <= tol[name])
        assert not bad.any(), (name, got[bad][:3], fd[name][bad][:3], np.flatnonzero(bad)[:3])


def test_put_call_parity(rng):
    o = random_options(rng, 5000)
    S, K, t, r, sigma, q, _ = market(o)
    c = tickgpu.greeks(S, K, t, r, sigma, q, True)
    p = tickgpu.greeks(S, K, t, r, sigma, q, False)
    forward_value = S * np.exp(-q * t) - K * np.exp(-r * t)
    assert_close("parity", c.price - p.price, forward_value, 1e-12, 1e-11)
    assert_close("delta parity", c.delta - p.delta, np.exp(-q * t), 1e-14, 1e-15)
    np.testing.assert_array_equal(c.gamma, p.gamma)
    np.testing.assert_array_equal(c.vega, p.vega)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_prices_far_out_of_the_money_are_never_negative(rng, dtype):
    """A price whose two tails round below zero is 0 (greeks_tolerance.check_tail_prices_never_negative)."""
    check_tail_prices_never_negative(rng, dtype, "cpu")
    # One option that rounded below zero before: both legs ~1e-322.
    g = tickgpu.greeks(47.16, 56.83, 0.00766, 0.0306, 0.0559, 0.1156, backend="cpu")
    assert g.price >= 0 and not np.signbit(g.price)


def test_black76_is_div_equal_rate_on_the_forward(rng):
    from scipy.special import ndtr

    F = rng.uniform(50, 150, 200)
    K = F * rng.uniform(0.5, 2.0, 200)
    t, r, sigma = rng.uniform(0.1, 3, 200), rng.uniform(0, 0.1, 200), rng.uniform(0.05, 1, 200)
    d1 = (np.log(F / K) + 0.5 * sigma**2 * t) / (sigma * np.sqrt(t))
    d2 = d1 - sigma * np.sqrt(t)
    black76 = np.exp(-r * t) * (F * ndtr(d1) - K * ndtr(d2))
    g = tickgpu.greeks(F, K, t, r, sigma, div=r, call=True)
    assert_close("black76", g.price, black76, 1e-12, 1e-12)


# ---- float32 ---------------------------------------------------------------------------------------

def test_float32_within_1e5_of_float64_on_ordinary_inputs(rng):
    from scipy.special import ndtr

    o = random_options(rng, 100000, moneyness=(0.8, 1.25), days=(37, 730), vol=(0.1, 0.6),
                       rates=(0.0, 0.08))
    inputs = [np.asarray(x, np.float32) for x in market(o)[:-1]]
    call = o["call"]
    g32 = tickgpu.greeks(*inputs, call, dtype=np.float32)
    g64 = tickgpu.greeks(*(x.astype(np.float64) for x in inputs), call)
    assert g32.price.dtype == np.float32
    S, K, t, r, sigma, q = (x.astype(np.float64) for x in inputs)
    sst = sigma * np.sqrt(t)
    a = (np.log(S / K) + (r - q) * t) / sst
    pdf = np.exp(-0.5 * (a + sst / 2) ** 2) / np.sqrt(2 * np.pi)
    disc_q = np.exp(-q * t)
    # Price (out of the money), theta, vanna, volga and charm are differences of terms that nearly
    # cancel somewhere in this range: their error is judged against the size of those terms, the
    # others' against their value.
    w = np.where(call, 1.0, -1.0)
    scale = {
        "price": S * disc_q * ndtr(w * (a + sst / 2)) + K * np.exp(-r * t) * ndtr(w * (a - sst / 2)),
        "theta": S * disc_q * pdf * sigma / (2 * np.sqrt(t)) + np.abs(r) * K + np.abs(q) * S,
        "vanna": disc_q * pdf * (np.abs(a) + sst / 2) / sigma,
        "volga": g64.vega * (np.abs(a) + sst / 2) ** 2 / sigma,
        "charm": np.abs(q) * disc_q + disc_q * pdf * (2 * np.abs(r - q) * t + (np.abs(a) + sst) * sst) / (2 * t * sst),
    }
    # Far in a tail (a short-dated option far from the money at low vol: |d| of 6 and more) the
    # inputs themselves limit any float32 result: d, computed in float32, carries a few ulps of the
    # terms it sums (|a| + sigma sqrt t), and N(d), phi(d) turn an absolute error in d into a
    # relative one |d| times as large. Where that bound, 8 ulps x (|a| + sigma sqrt t)^2, exceeds
    # 1e-5 it is the tolerance (seed 978819378: a call at d2 = -6.36 had rho 1.01e-5 off).
    rtol = np.maximum(1e-5, 8 * 2.0**-24 * (np.abs(a) + sst) ** 2)
    for name in NAMES:
        want = getattr(g64, name)
        err = np.abs(getattr(g32, name).astype(np.float64) - want)
        bad = np.flatnonzero(~(err <= rtol * scale.get(name, np.abs(want))))
        assert bad.size == 0, (name, bad[:5], err[bad[:5]], want[bad[:5]], rtol[bad[:5]])


# ---- shapes, dtypes, call flags ------------------------------------------------------------------

def test_scalars_give_0d_arrays():
    g = tickgpu.greeks(100.0, 100.0, 1.0, 0.05, 0.2)
    for name in NAMES:
        v = getattr(g, name)
        assert isinstance(v, np.ndarray) and v.shape == () and v.dtype == np.float64
    assert set(g.as_dict()) == set(NAMES)
    ref = bsm_greeks(100.0, 100.0, 1.0, 0.05, 0.2)
    assert abs(float(g.price) - float(ref["price"])) < 1e-12
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.price = np.array(0.0)


def test_broadcast_2d_equals_elementwise():
    spot = np.array([[90.0], [100.0], [110.0]])
    strike = np.array([80.0, 95.0, 105.0, 130.0])
    call = np.array([True, False, True, False])
    g = tickgpu.greeks(spot, strike, 0.75, 0.03, 0.25, 0.01, call)
    assert g.price.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            one = tickgpu.greeks(spot[i, 0], strike[j], 0.75, 0.03, 0.25, 0.01, bool(call[j]))
            for name in NAMES:
                assert getattr(g, name)[i, j] == getattr(one, name), (name, i, j)


def test_call_flags_bool_and_integer_arrays():
    k = np.array([90.0, 100.0, 110.0])
    as_bool = tickgpu.greeks(100, k, 1, 0.05, 0.2, call=np.array([True, False, True]))
    as_int = tickgpu.greeks(100, k, 1, 0.05, 0.2, call=np.array([1, 0, 1]))
    ref = bsm_greeks(100, k, 1, 0.05, 0.2, 0.0, np.array([True, False, True]))
    np.testing.assert_array_equal(as_bool.price, as_int.price)
    np.testing.assert_allclose(as_bool.price, ref["price"], rtol=1e-13)
    puts = tickgpu.greeks(100, k, 1, 0.05, 0.2, call=False)
    assert np.all(puts.delta < 0)
    with pytest.raises(ValueError, match=r"call\[1\]"):
        tickgpu.greeks(100, k, 1, 0.05, 0.2, call=np.array([1, 2, 0]))
    with pytest.raises(TypeError, match="call"):
        tickgpu.greeks(100, k, 1, 0.05, 0.2, call=np.array([0.5, 1.0, 0.0]))
    with pytest.raises(TypeError, match="call"):
        tickgpu.greeks(100, k, 1, 0.05, 0.2, call="put")


def test_empty_and_size_one():
    g = tickgpu.greeks(np.array([]), 100.0, 1.0, 0.05, 0.2)
    assert all(getattr(g, n).shape == (0,) for n in NAMES)
    g = tickgpu.greeks(np.zeros((0, 3)), np.ones(3), 1.0, 0.05, 0.2, dtype=np.float32)
    assert g.delta.shape == (0, 3) and g.delta.dtype == np.float32
    g = tickgpu.greeks(np.array([100.0]), 100.0, 1.0, 0.05, 0.2)
    assert g.price.shape == (1,)
    assert g.price[0] == tickgpu.greeks(100.0, 100.0, 1.0, 0.05, 0.2).price


def test_mismatched_shapes_always_raise():
    with pytest.raises(ValueError, match="strike"):
        tickgpu.greeks(np.ones(3), np.ones(4), 1.0, 0.05, 0.2)
    with pytest.raises(ValueError, match="call"):
        tickgpu.greeks(np.ones(3), 100.0, 1.0, 0.05, 0.2, call=np.array([True, False]))


def test_bad_dtype_and_backend():
    with pytest.raises(TypeError, match="dtype"):
        tickgpu.greeks(100, 100, 1, 0.05, 0.2, dtype=np.float16)
    for dtype in ("banana", 5, "float64x"):     # not a dtype at all: NumPy's own error named no argument
        with pytest.raises(TypeError, match=rf"^dtype: must be float64 or float32, got {dtype!r}$"):
            tickgpu.greeks(100, 100, 1, 0.05, 0.2, dtype=dtype)
    with pytest.raises(ValueError, match="backend"):
        tickgpu.greeks(100, 100, 1, 0.05, 0.2, backend="tpu")


def test_backend_gpu_without_gpu_raises():
    from tickgpu import dispatch

    if dispatch.gpu_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(tickgpu.BackendUnavailable):
        tickgpu.greeks(100, 100, 1, 0.05, 0.2, backend="gpu")


def test_non_contiguous_and_foreign_dtype_inputs(rng):
    o = random_options(rng, 64)
    S, K, t, r, sigma, q, call = market(o)
    want = tickgpu.greeks(S, K, t, r, sigma, q, call)
    wide = np.empty((64, 3))
    wide[:, 1] = K
    strided_strike = wide[:, 1]                    # stride of 3 elements
    assert not strided_strike.flags.c_contiguous
    big_endian_vol = sigma.astype(">f8")
    reversed_t = t[::-1].copy()[::-1]              # negative stride view
    got = tickgpu.greeks(S, strided_strike, reversed_t, r, big_endian_vol, q, call)
    for name in NAMES:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    grid = np.asfortranarray(np.stack([S, S]))     # 2-D, column-major
    got = tickgpu.greeks(grid, K, t, r, sigma, q, call)
    np.testing.assert_array_equal(got.price[1], want.price)
    ints = tickgpu.greeks(np.array([100, 110]), np.array([100, 100]), 1, 0, 0.2)
    np.testing.assert_array_equal(ints.price, tickgpu.greeks([100.0, 110.0], 100.0, 1, 0, 0.2).price)


# ---- bad elements ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arg, value, message", [
    ("spot", np.nan, "spot[2]: must be finite"),
    ("spot", 0.0, "spot[2]: must be > 0"),
    ("strike", -5.0, "strike[2]: must be > 0"),
    ("t", -0.1, "t[2]: must be >= 0"),
    ("t", np.inf, "t[2]: must be finite"),
    ("rate", np.inf, "rate[2]: must be finite"),
    ("vol", 0.0, "vol[2]: must be > 0"),
    ("vol", -0.1, "vol[2]: must be > 0, got -0.1"),
    ("div", np.nan, "div[2]: must be finite"),
])
def test_strict_names_argument_index_and_reason(arg, value, message):
    args = dict(spot=np.full(4, 100.0), strike=np.full(4, 100.0), t=np.full(4, 1.0),
                rate=np.full(4, 0.05), vol=np.full(4, 0.2), div=np.full(4, 0.0))
    args[arg][2] = value
    with pytest.raises(ValueError) as e:
        tickgpu.greeks(**args, strict=True)
    assert message in str(e.value)
    # Without strict the same call answers, with NaN at index 2 only.
    g = tickgpu.greeks(**args)
    for name in NAMES:
        v = getattr(g, name)
        assert np.isnan(v[2]) and not np.isnan(v[[0, 1, 3]]).any(), name


def test_strict_2d_index_and_scalar():
    vol = np.full((2, 3), 0.2)
    vol[1, 2] = -1.0
    with pytest.raises(ValueError, match=r"vol\[\(1, 2\)\]: must be > 0"):
        tickgpu.greeks(100.0, 100.0, 1.0, 0.05, vol, strict=True)
    with pytest.raises(ValueError, match=r"^spot: must be > 0, got -1"):
        tickgpu.greeks(-1.0, 100.0, 1.0, 0.05, 0.2, strict=True)
    # Valid input passes strict checks unchanged.
    g = tickgpu.greeks(100.0, 100.0, np.array([0.0, 1.0]), 0.05, 0.2, strict=True)
    assert np.isfinite(g.price).all()


def test_nan_elements_leave_the_others_unchanged(rng):
    o = random_options(rng, 1000)
    S, K, t, r, sigma, q, call = (np.array(x) for x in market(o))
    clean = tickgpu.greeks(S, K, t, r, sigma, q, call)
    bad = rng.choice(1000, 60, replace=False)
    for k, (arr, value) in enumerate([(S, -1.0), (K, 0.0), (t, -1e-9), (sigma, 0.0), (r, np.nan),
                                      (q, np.inf), (S, np.inf), (sigma, np.nan)]):
        arr[bad[k::8]] = value
    g = tickgpu.greeks(S, K, t, r, sigma, q, call, dtype=np.float64)
    g32 = tickgpu.greeks(S, K, t, r, sigma, q, call, dtype=np.float32)
    ok = np.ones(1000, bool)
    ok[bad] = False
    for name in NAMES:
        assert np.isnan(getattr(g, name)[bad]).all() and np.isnan(getattr(g32, name)[bad]).all()
        np.testing.assert_array_equal(getattr(g, name)[ok], getattr(clean, name)[ok])


# ---- expiry ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_at_expiry_intrinsic_value_and_limit_greeks(dtype):
    S = np.array([110.0, 90.0, 110.0, 90.0, 100.0, 100.0])
    call = np.array([True, True, False, False, True, False])
    K, r, sigma, q = 100.0, 0.05, 0.3, 0.02
    g = tickgpu.greeks(S, K, 0.0, r, sigma, q, call, dtype=dtype)
    np.testing.assert_array_equal(g.price, [10, 0, 0, 10, 0, 0])
    np.testing.assert_array_equal(g.delta, [1, 0, 0, -1, 0.5, -0.5])
    np.testing.assert_array_equal(g.gamma, [0, 0, 0, 0, np.inf, np.inf])
    np.testing.assert_array_equal(g.vega, 0)
    np.testing.assert_allclose(g.theta[:4], [q * 110 - r * K, 0, 0, r * K - q * 90], rtol=1e-6)
    assert g.theta[4] == -np.inf and g.theta[5] == -np.inf
    np.testing.assert_array_equal(g.rho, 0)
    np.testing.assert_array_equal(g.phi, 0)
    np.testing.assert_array_equal(g.vanna, 0)
    np.testing.assert_array_equal(g.volga, 0)
    np.testing.assert_allclose(g.charm[:4], [q, 0, 0, -q], rtol=1e-6)
    assert g.charm[4] == -np.inf and g.charm[5] == -np.inf     # r - q + sigma^2/2 > 0

    # Away from the money the t == 0 values are the limits of the t > 0 ones.
    near = tickgpu.greeks(S[:4], K, 1e-10, r, sigma, q, call[:4], dtype=np.float64)
    for name in ("price", "delta", "gamma", "vega", "theta", "vanna", "volga", "charm"):
        np.testing.assert_allclose(getattr(g, name)[:4], getattr(near, name), rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_short_expiries_stay_finite_and_tend_to_intrinsic():
    t = np.logspace(-12, -1, 50)
    for call in (True, False):
        g = tickgpu.greeks(100.0, 100.0, t, 0.05, 0.2, 0.0, call)
        for name in NAMES:
            assert np.isfinite(getattr(g, name)).all(), name
        assert np.all(np.diff(g.price) > 0)         # ATM value grows with t
    deep = tickgpu.greeks(100.0, 300.0, t, 0.05, 0.2, 0.0, True)
    assert np.all(deep.price >= 0) and deep.price[0] == 0.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_valid_inputs_over_a_wide_domain_never_give_nan(rng, dtype):
    """Spot 1e-6..1e9, K/S 0.01..100 (and exactly 1), t 0 or 1e-12..100 years, vol 1e-6..50,
    rates -50%..50%: every output defined, and finite for t > 0."""
    n = 200_000
    S = 10.0 ** rng.uniform(-6, 9, n)
    K = S * 10.0 ** rng.uniform(-2, 2, n)
    K[::7] = S[::7]
    t = np.where(rng.random(n) < 0.1, 0.0, 10.0 ** rng.uniform(-12, 2, n))
    sigma = 10.0 ** rng.uniform(-6, 1.7, n)
    r, q = rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)
    inputs = [x.astype(dtype) for x in (S, K, t, r, sigma, q)]
    g = tickgpu.greeks(*inputs, rng.random(n) < 0.5, dtype=dtype)
    live = inputs[2] > 0
    for name in NAMES:
        v = getattr(g, name)
        assert not np.isnan(v).any(), name
        assert np.isfinite(v[live]).all(), name


# ---- edges of the domain: -0.0, float32 conversion, discounting, extreme moneyness and vols ----

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_t_minus_zero_is_t_zero(dtype):
    """t = -0.0 passes t >= 0 and must give exactly the t = +0.0 values (the t -> 0 limits):
    sqrt(-0.0) = -0.0 once made 1/(sigma sqrt t) = -inf and the price 0, gamma/theta NaN."""
    S = np.array([110.0, 90.0, 100.0] * 2)
    call = np.array([True] * 3 + [False] * 3)
    plus = tickgpu.greeks(S, 100.0, 0.0, 0.05, 0.2, 0.01, call, dtype=dtype)
    minus = tickgpu.greeks(S, 100.0, -0.0, 0.05, 0.2, 0.01, call, dtype=dtype)
    for name in NAMES:
        assert getattr(minus, name).tobytes() == getattr(plus, name).tobytes(), name
    np.testing.assert_array_equal(minus.price, [10.0, 0.0, 0.0, 0.0, 10.0, 0.0])
    assert float(tickgpu.greeks(110.0, 100.0, -0.0, 0.05, 0.2, dtype=dtype).price) == 10.0
    # strict accepts it too
    tickgpu.greeks(110.0, 100.0, -0.0, 0.05, 0.2, dtype=dtype, strict=True)


@pytest.mark.parametrize("arg, value, message", [
    ("spot", 1e39, "spot[1]: must be finite, got 1e+39 (inf in float32)"),
    ("strike", 1e-50, "strike[1]: must be > 0, got 1e-50 (0.0 in float32)"),
    ("vol", 1e-50, "vol[1]: must be > 0, got 1e-50 (0.0 in float32)"),
    ("rate", -1e39, "rate[1]: must be finite, got -1e+39 (-inf in float32)"),
    ("t", 1e39, "t[1]: must be finite, got 1e+39 (inf in float32)"),
])
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_strict_judges_values_after_the_float32_cast(arg, value, message):
    """strict raises for what the float32 kernel would turn into NaN: values that overflow or
    underflow in the cast. float64 takes the same values (they are valid doubles)."""
    args = dict(spot=[100.0, 100.0], strike=[100.0, 100.0], t=[1.0, 1.0], rate=[0.05, 0.05],
                vol=[0.2, 0.2], div=[0.0, 0.0])
    args[arg] = [args[arg][0], value]
    with pytest.raises(ValueError) as e:
        tickgpu.greeks(**args, dtype=np.float32, strict=True)
    assert message in str(e.value)
    g = tickgpu.greeks(**args, dtype=np.float32)
    for name in NAMES:
        v = getattr(g, name)
        assert np.isnan(v[1]) and not np.isnan(v[0]), name
    if arg in ("spot", "strike", "vol"):   # valid doubles (t = 1e39, rate = -1e39 cannot discount)
        assert not np.isnan(tickgpu.greeks(**args, strict=True).price).any()
    # a float32 subnormal vol is still > 0: valid
    tickgpu.greeks(100.0, 100.0, 1.0, 0.05, 1e-40, dtype=np.float32, strict=True)


@pytest.mark.parametrize("dtype, rate, div", [
    (np.float64, -1000.0, 0.0), (np.float64, 1000.0, 0.0), (np.float64, 0.0, -800.0),
    (np.float64, 0.0, 800.0), (np.float32, -100.0, 0.0), (np.float32, 0.0, 120.0),
])
def test_discounting_out_of_range_is_nan_in_every_output(dtype, rate, div):
    """strike e^{-rt} or spot e^{-qt} that is 0 or overflows in the dtype: the option is out of
    range, NaN in all ten outputs (not NaN in some and 0 in others); strict names rate or div,
    the index and the discounted value; implied_vol calls the same options BAD_INPUT."""
    r, q = np.array([0.05, rate]), np.array([0.0, div])
    g = tickgpu.greeks(100.0, 100.0, 1.0, r, 0.2, q, dtype=dtype)
    for name in NAMES:
        v = getattr(g, name)
        assert np.isnan(v[1]) and np.isfinite(v[0]), name
    name = "rate" if rate else "div"
    with pytest.raises(ValueError, match=rf"^{name}\[1\]: {name} \* t beyond what {np.dtype(dtype)} can "
                                         rf"discount: (strike|spot) \* exp"):
        tickgpu.greeks(100.0, 100.0, 1.0, r, 0.2, q, dtype=dtype, strict=True)
    if dtype == np.float64:
        st = tickgpu.implied_vol(5.0, 100.0, 100.0, 1.0, r, q, return_status=True)[1]
        assert list(st) == [tickgpu.IVStatus.OK, tickgpu.IVStatus.BAD_INPUT]
    else:   # float32 greeks discount in float32; the same rates are fine in float64
        assert np.isfinite(tickgpu.greeks(100.0, 100.0, 1.0, r, 0.2, q).price).all()


NON_REAL = ["100", None, 100 + 1j, ["100"], np.array([100.0 + 0j])]


@pytest.mark.parametrize("value", NON_REAL, ids=repr)
def test_inputs_must_be_real_numbers(value):
    """Strings are not parsed, complex is not truncated, None is not NaN: TypeError naming the
    argument, with or without strict."""
    for strict in (False, True):
        with pytest.raises(TypeError, match=r"^spot: must be a real number"):
            tickgpu.greeks(value, 100.0, 1.0, 0.05, 0.2, strict=strict)
        with pytest.raises(TypeError, match=r"^vol: must be a real number"):
            tickgpu.greeks(100.0, 100.0, 1.0, 0.05, value, strict=strict, dtype=np.float32)


BOOLEANS = [True, False, np.bool_(True), np.array([True, False, True]), [False, True, False]]


@pytest.mark.parametrize("value", BOOLEANS, ids=repr)
def test_booleans_are_not_numbers(value):
    """A boolean in a number's place (``greeks(S, K, t, r, vol, False)`` meant as a put is a
    dividend yield of 0) is refused, naming the argument; as call flags they are the values."""
    S = np.array([90.0, 100.0, 110.0])
    for strict in (False, True):
        for dtype in (np.float64, np.float32):
            with pytest.raises(TypeError, match=r"^div: must be a real number or an array of real numbers, got"):
                tickgpu.greeks(S, 100.0, 1.0, 0.05, 0.2, value, strict=strict, dtype=dtype)
            with pytest.raises(TypeError, match=r"^spot: must be a real number"):
                tickgpu.greeks(value, 100.0, 1.0, 0.05, 0.2, strict=strict, dtype=dtype)
        with pytest.raises(TypeError, match=r"^rate: must be a real number"):
            tickgpu.implied_vol(5.0, S, 100.0, 1.0, value, strict=strict)
    surf = tickgpu.VolSurface([90.0, 110.0], [0.5, 1.0], [[0.2, 0.25], [0.22, 0.24]])
    with pytest.raises(TypeError, match=r"^t: must be a real number"):
        surf.vol(100.0, value)
    # The flag takes them, and integers stay numbers.
    want = tickgpu.greeks(S, 100.0, 1.0, 0.05, 0.2, 0.0, call=False)
    np.testing.assert_array_equal(tickgpu.greeks(S, 100, 1, 0, 0.2, 0, call=np.bool_(False)).price,
                                  tickgpu.greeks(S, 100.0, 1.0, 0.0, 0.2, 0.0, call=False).price)
    assert np.all(want.delta < 0)


def mp_greeks(S, K, t, r, sig, q, call):
    """The ten outputs from Haug's formulas in 60-digit mpmath (QuantLib's units)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    S, K, t, r, sig, q = (mp.mpf(float(x)) for x in (S, K, t, r, sig, q))
    w = 1 if call else -1
    # mpmath's ncdf cannot take |x| ~ 1e300; there N is 0 or 1 and the density 0 to any precision
    N = lambda x: mp.mpf(0) if x < -1e8 else mp.mpf(1) if x > 1e8 else mp.ncdf(x)  # noqa: E731
    n = lambda x: mp.mpf(0) if abs(x) > 1e8 else mp.npdf(x)  # noqa: E731
    sst = sig * mp.sqrt(t)
    d1 = (mp.log(S / K) + (r - q) * t) / sst + sst / 2
    d2 = d1 - sst
    Dq, Dr = mp.exp(-q * t), mp.exp(-r * t)
    vega = S * Dq * n(d1) * mp.sqrt(t)
    return dict(
        price=w * (S * Dq * N(w * d1) - K * Dr * N(w * d2)),
        delta=w * Dq * N(w * d1),
        gamma=Dq * n(d1) / (S * sst),
        vega=vega,
        theta=-S * Dq * n(d1) * sig / (2 * mp.sqrt(t)) + w * (q * S * Dq * N(w * d1) - r * K * Dr * N(w * d2)),
        rho=w * t * K * Dr * N(w * d2),
        phi=-w * t * S * Dq * N(w * d1),
        vanna=-Dq * n(d1) * d2 / sig,
        volga=vega * d1 * d2 / sig,
        charm=w * q * Dq * N(w * d1) - Dq * n(d1) * (2 * (r - q) * t - d2 * sst) / (2 * t * sst),
    )


def test_extreme_moneyness_and_vols_against_mpmath():
    """S/K from 1e-600 to 1e600 and vols from 1e-308 to 1e200 (the review's cases among them: a
    vanishing spot, where log1p((S - K)/K) was -inf; sigma 1e-308, where d1 is inf; sigma 1e200,
    where sst d2 overflows): no NaN, and every output within 1e-11 of the 60-digit value. The
    absolute slack, 1e-280 of the inputs' scale, only admits results that underflow on the way
    (a price of 1e-215 from S N(d1) with N(d1) below 1e-308)."""
    cases = [(1e-15, 100.0, 1.0, 0.05, 0.2, 0.0), (1e6, 1.0, 1.0, 0.0, 1e-308, 0.0),
             (100.0, 100.0, 1.0, 0.05, 1e200, 0.0), (1.0, 1e10, 1.0, 0.0, 5.0, 0.0)]
    for S in (1e-300, 1e-15, 1e-8, 1.0, 100.0, 1e8, 1e300):
        for K in (1e-300, 1e-10, 1.0, 100.0, 1e10, 1e300):
            for sig in (1e-308, 1e-3, 0.2, 5.0, 1e200):
                cases.append((S, K, 1.5, 0.05, sig, 0.02))
    a = np.array(cases).T
    checked = 0
    for call in (True, False):
        g = tickgpu.greeks(*a, call)
        for i, c in enumerate(cases):
            ref = mp_greeks(*c, call)
            scale = 1e-280 * max(1.0, c[0], c[1], 1.0 / c[0])
            for name in NAMES:
                got, want = float(getattr(g, name)[i]), ref[name]
                assert not np.isnan(got), (name, c, call)
                assert abs(got - want) <= 1e-11 * abs(want) + scale, (name, c, call, got, float(want))
                checked += abs(want) > 1e-250
    assert checked > 1500


# ---- threads and the C entry point -------------------------------------------------------------

def run_native(arrays, call, n, nthreads, outputs=NAMES):
    inputs = ffi.new("tg_bsm_inputs *")
    for name, a in zip(("spot", "strike", "t", "rate", "vol", "div"), arrays):
        setattr(inputs, name, ptr(a))
        setattr(inputs, "s_" + name, 1 if a.size > 1 else 0)
    inputs.call = ptr(call, "uint8_t *")
    inputs.s_call = 1
    result = {name: np.full(n, -7.0) for name in outputs}
    out = ffi.new("tg_greeks_outputs *")
    for name, a in result.items():
        setattr(out, name, ptr(a))
    assert lib.tg_greeks_f64(n, inputs, out, nthreads) == lib.TG_OK
    return result


def test_multithreaded_equals_single_threaded_bit_for_bit(rng):
    n = 100_003                                    # above TG_PARALLEL_MIN, not a multiple of anything
    o = random_options(rng, n)
    o["vol"][::97] = np.nan                        # invalid elements in every chunk
    o["t"][::101] = 0.0
    arrays = [np.ascontiguousarray(o[k], dtype=np.float64) for k in ("spot", "strike", "t", "rate", "vol", "div")]
    call = o["call"].astype(np.uint8)
    one = run_native(arrays, call, n, 1)
    for threads in (2, 3, 8):
        many = run_native(arrays, call, n, threads)
        for name in NAMES:
            assert one[name].tobytes() == many[name].tobytes(), (name, threads)
    public = tickgpu.greeks(*arrays, o["call"])
    for name in NAMES:
        assert getattr(public, name).tobytes() == one[name].tobytes(), name


def test_unwanted_outputs_may_be_null(rng):
    o = random_options(rng, 1000)
    arrays = [np.ascontiguousarray(o[k]) for k in ("spot", "strike", "t", "rate", "vol", "div")]
    call = o["call"].astype(np.uint8)
    full = run_native(arrays, call, 1000, 1)
    some = run_native(arrays, call, 1000, 1, outputs=("gamma", "charm"))
    np.testing.assert_array_equal(some["gamma"], full["gamma"])
    np.testing.assert_array_equal(some["charm"], full["charm"])


def test_native_rejects_bad_calls():
    out = ffi.new("tg_greeks_outputs *")
    inputs = ffi.new("tg_bsm_inputs *")
    assert lib.tg_greeks_f64(-1, inputs, out, 0) == lib.TG_EINVAL
    assert lib.tg_greeks_f64(5, inputs, out, 0) == lib.TG_EINVAL      # NULL input pointers
    assert lib.tg_greeks_f32(5, ffi.NULL, out, 0) == lib.TG_EINVAL
    assert lib.tg_greeks_f64(0, inputs, out, 0) == lib.TG_OK           # nothing to do


def test_inputs_numpy_cannot_take_are_named():
    """A Python int beyond float64, a ragged nesting of lists and an unhashable option each get an
    error naming the argument (they were OverflowError, NumPy's bare ValueError and TypeError)."""
    big = 10**400
    for call in (lambda: tickgpu.greeks(big, 100.0, 1.0, 0.03, 0.2),
                 lambda: tickgpu.greeks(big, 100.0, 1.0, 0.03, 0.2, strict=True),
                 lambda: tickgpu.greeks([big, 100], 100.0, 1.0, 0.03, 0.2)):
        with pytest.raises(ValueError, match=r"^spot: an integer beyond float64's range"):
            call()
    with pytest.raises(ValueError, match=r"^strike: an integer beyond float64's range"):
        tickgpu.implied_vol(5.0, 100.0, big, 1.0, 0.03)
    with pytest.raises(ValueError, match=r"^strike: an integer beyond float64's range"):
        tickgpu.VolSurface([90.0, 110.0], [1.0], [[0.2, 0.3]]).vol(big, 1.0)
    want = tickgpu.greeks([1e30, 100.0], 100.0, 1.0, 0.03, 0.2).price
    np.testing.assert_array_equal(tickgpu.greeks([10**30, 100], 100.0, 1.0, 0.03, 0.2).price, want)
    with pytest.raises(ValueError, match=r"^spot: not an array of one shape"):
        tickgpu.greeks([[100, 110], [1]], 100.0, 1.0, 0.0, 0.2)
    with pytest.raises(ValueError, match=r"^backend: must be one of"):
        tickgpu.greeks(100.0, 100.0, 1.0, 0.0, 0.2, backend=["cpu"])
    with pytest.raises(ValueError, match=r"^interpolation: must be 'variance' or 'vol'"):
        tickgpu.VolSurface([90.0, 110.0], [1.0], [[0.2, 0.3]], interpolation=["vol"])


def test_python_ints_beyond_int64_beside_floats_are_numbers():
    """[2**64, 1.5e19] is an object array to NumPy, as [2**64, 2**65] is: both are numbers (the
    first was refused as "an array of object" while the second was taken); a bool, None or a string
    beside them is still refused, and object arrays of floats are numbers too."""
    want = tickgpu.greeks(np.array([2.0**64, 1.5e19, 100.0]), 1e19, 1.0, 0.0, 0.2, backend="cpu").price
    for spot in ([2**64, 1.5e19, 100.0], [2**64, 1.5e19, 100], np.array([2**64, 1.5e19, 100.0], dtype=object),
                 np.array([np.float32(2.0**64), np.float64(1.5e19), np.int64(100)], dtype=object)):
        np.testing.assert_array_equal(tickgpu.greeks(spot, 1e19, 1.0, 0.0, 0.2, backend="cpu").price, want)
    v = tickgpu.implied_vol([2**64, 1.5e18], 1e19, 1e19, 1.0, 0.0, backend="cpu")
    assert np.isnan(v[0]) and 0 < v[1] < 1      # 2**64 is above the maximum; 1.5e18 an ordinary premium
    for odd in (True, None, "1", 1j):
        with pytest.raises(TypeError, match=r"^spot: must be a real number or an array of real numbers, "
                                            r"got an array of object"):
            tickgpu.greeks([2**64, odd], 1e19, 1.0, 0.0, 0.2, backend="cpu")
    with pytest.raises(ValueError, match=r"^spot: an integer beyond float64's range"):
        tickgpu.greeks([10**400, 1.5], 100.0, 1.0, 0.0, 0.2, backend="cpu")
