"""tickgpu.implied_vol on the CPU backend: price round trips through an independent float64 Black
formula and QuantLib, agreement with py_lets_be_rational, the normalised Black function against
mpmath, statuses at every bound and bad input, float32, threads, and the CUDA compilability of the
shared core."""
import math
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import tickgpu
from tickgpu import IVStatus
from tickgpu._native import ffi, lib, ptr

from reference import bsm_greeks

EPS = np.finfo(float).eps
# Condition estimates divide by vegas that underflow far from the money; those rows are filtered.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in divide:RuntimeWarning")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_hang():
    """Every test here must finish in seconds: a hang in the solver fails instead of blocking."""
    def expired(signum, frame):
        raise TimeoutError("implied_vol test exceeded 120 s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def random_options(rng, n, *, moneyness=(0.3, 3.0), t=(1 / 365, 10.0), vol=(0.01, 3.0)):
    """Options spread log-uniformly over K/S, expiry and vol, with nonzero rates and dividends."""
    spot = np.exp(rng.uniform(np.log(5.0), np.log(2000.0), n))
    strike = spot * np.exp(rng.uniform(np.log(moneyness[0]), np.log(moneyness[1]), n))
    expiry = np.exp(rng.uniform(np.log(t[0]), np.log(t[1]), n))
    sigma = np.exp(rng.uniform(np.log(vol[0]), np.log(vol[1]), n))
    rate = rng.uniform(-0.02, 0.10, n)
    div = rng.uniform(-0.02, 0.08, n)
    div[rng.random(n) < 0.1] = 0.0
    call = rng.random(n) < 0.5
    return dict(spot=spot, strike=strike, t=expiry, rate=rate, div=div, call=call), sigma


def reference_price(o, sigma):
    """Premium, vega and the cancellation factor of the float64 textbook formula."""
    g = bsm_greeks(o["spot"], o["strike"], o["t"], o["rate"], sigma, o["div"], o["call"])
    fwd = o["spot"] * np.exp(-o["div"] * o["t"])
    strike = o["strike"] * np.exp(-o["rate"] * o["t"])
    sqrt_t = np.sqrt(o["t"])
    d1 = (np.log(fwd / strike) + 0.5 * sigma**2 * o["t"]) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    from scipy.special import ndtr

    sign = np.where(o["call"], 1.0, -1.0)
    # |terms| / price: how many ulps of the larger term one ulp of the price is worth.
    gross = fwd * ndtr(sign * d1) + strike * ndtr(sign * d2)
    with np.errstate(divide="ignore", invalid="ignore"):
        cancel = gross / g["price"]
    return g["price"], g["vega"], cancel, fwd, strike


def bounds(o):
    """Discounted intrinsic value and maximum, computed as the docstring states."""
    fwd = o["spot"] * np.exp(-o["div"] * o["t"])
    strike = o["strike"] * np.exp(-o["rate"] * o["t"])
    intrinsic = np.maximum(np.where(o["call"], fwd - strike, strike - fwd), 0.0)
    return intrinsic, np.where(o["call"], fwd, strike), np.maximum(fwd, strike)


# ---- round trips ------------------------------------------------------------------------------


def test_round_trip_random_options(rng):
    n = 40_000
    o, sigma = random_options(rng, n)
    price, vega, cancel, fwd, strike = reference_price(o, sigma)
    # The reference formula loses log10(cancel) digits to cancellation, and underflows far out of
    # the money: keep what it prices to ~1e-13.
    usable = (price > 1e-250) & (cancel < 100)
    assert usable.mean() > 0.7
    o = {k: v[usable] for k, v in o.items()}
    price, vega, sigma, cancel = price[usable], vega[usable], sigma[usable], cancel[usable]

    vol, status = tickgpu.implied_vol(price, **o, return_status=True, backend="cpu")
    intrinsic, _, scale = bounds(o)
    # Deep in the money with short expiries the time value can be below the price's own rounding:
    # then (and only then) the price is at or a rounding below the intrinsic value.
    at_bound = status != IVStatus.OK
    assert np.all(np.isin(status[at_bound], [IVStatus.AT_INTRINSIC, IVStatus.BELOW_INTRINSIC]))
    assert np.all(np.abs(price - intrinsic)[at_bound] <= 8 * EPS * scale[at_bound])

    ok = ~at_bound
    repriced = reference_price(o, np.where(ok, vol, 0.2))[0]
    # Vega is meaningful where a relative change of the vol moves the price at least 1e-6 as much.
    meaningful = ok & (vega * sigma / price > 1e-6)
    rel_price = np.abs(repriced - price) / price
    print(f"usable {usable.mean():.2f}, at a bound {at_bound.mean():.2f}, "
          f"meaningful vega {meaningful.mean():.2f}")
    assert meaningful.mean() > 0.4
    assert rel_price[meaningful].max() <= 1e-12, rel_price[meaningful].max()
    # Well conditioned: the price's rounding error (cancel ulps) moves the vol by less than 1e-11.
    predicted = 16 * EPS * cancel * price / (vega * sigma)
    well = ok & (predicted < 1e-11)
    print(f"well conditioned {well.mean():.2f}")
    assert well.mean() > 0.4
    rel_vol = np.abs(vol - sigma) / sigma
    assert rel_vol[well].max() <= 1e-10, rel_vol[well].max()


def test_round_trip_through_quantlib(rng):
    """Premiums from QuantLib's AnalyticEuropeanEngine (t in whole days / 365)."""
    from quantlib_oracle import QuantLibEuropean

    n = 300
    o, sigma = random_options(rng, n, moneyness=(0.5, 2.0), vol=(0.03, 1.5))
    days = np.maximum(np.rint(o["t"] * 365), 1).astype(int)
    o["t"] = days / 365.0
    ql = QuantLibEuropean()
    price = np.empty(n)
    for i in range(n):
        ql.set_market(o["spot"][i], o["rate"][i], sigma[i], o["div"][i])
        price[i] = ql.option(o["strike"][i], days[i], o["call"][i]).NPV()
    _, vega, _, fwd, strike = reference_price(o, sigma)
    # QuantLib's premiums are accurate to ~1e-15 of the spot, not relative to small premiums:
    # keep the options where such an absolute error moves the vol by less than 1e-11.
    well = (price > 0) & (64 * EPS * (fwd + strike) / (vega * sigma) < 1e-11)
    assert well.sum() >= 40
    vol = tickgpu.implied_vol(price[well], **{k: v[well] for k, v in o.items()}, backend="cpu")
    assert np.max(np.abs(vol - sigma[well]) / sigma[well]) <= 1e-10


def test_one_day_expiries(rng):
    n = 5000
    o, sigma = random_options(rng, n, moneyness=(0.8, 1.25), t=(1 / 365, 1 / 365), vol=(0.05, 3))
    price, vega, cancel, _, _ = reference_price(o, sigma)
    well = (price > 1e-250) & (16 * EPS * cancel * price / (vega * sigma) < 1e-11)
    assert well.mean() > 0.3
    vol, status = tickgpu.implied_vol(price[well], **{k: v[well] for k, v in o.items()},
                                      return_status=True, backend="cpu")
    assert np.all(status == IVStatus.OK)
    assert np.max(np.abs(vol - sigma[well]) / sigma[well]) <= 1e-10


def test_matches_py_lets_be_rational(rng):
    """Jaeckel's algorithm as vollib ships it: same vols on undiscounted Black prices."""
    lbr = pytest.importorskip("py_lets_be_rational")
    n = 2000
    F = np.exp(rng.uniform(np.log(10), np.log(1000), n))
    x = rng.uniform(-3, 3, n)
    K = F * np.exp(-x)
    T = np.exp(rng.uniform(np.log(1 / 365), np.log(10), n))
    sigma = np.exp(rng.uniform(np.log(0.02), np.log(2.5), n))
    theta = np.where(rng.random(n) < 0.5, 1, -1)
    price = np.array([lbr.black(f, k, s, t, q) for f, k, s, t, q in zip(F, K, sigma, T, theta)])
    theirs = np.array([lbr.implied_volatility_from_a_transformed_rational_guess(p, f, k, t, q)
                       for p, f, k, t, q in zip(price, F, K, T, theta)])
    ours, status = tickgpu.implied_vol(price, F, K, T, 0.0, 0.0, theta > 0, return_status=True,
                                       backend="cpu")
    # Where |ln F/K| / (sigma sqrt T) <= 6.8 (the criterion of shared/oracles/README.md) both
    # must extract the same vol from the same price.
    reliable = (np.abs(x) / (sigma * np.sqrt(T)) <= 6.8) & (price > 0)
    assert reliable.mean() > 0.3
    assert np.all(status[reliable] == IVStatus.OK)
    assert np.max(np.abs(ours - theirs)[reliable] / theirs[reliable]) <= 1e-12
    # In the money that criterion does not make the price determine sigma (the time value is a
    # sliver of it): compare with sigma where an ulp of the price moves the vol < 1e-12.
    sd = sigma * np.sqrt(T)
    vega_sigma = F * np.exp(-0.5 * (x / sd + sd / 2) ** 2) / np.sqrt(2 * np.pi) * sd
    well = reliable & (EPS * price / vega_sigma < 1e-12)
    assert well.mean() > 0.2
    assert np.max(np.abs(ours - sigma)[well] / sigma[well]) <= 1e-10
    # Elsewhere both extract the same vol from the same (less informative) price, up to what a
    # few ulps of the price (the two compute intrinsic values differently) move the vol.
    # Subnormal premiums (a few significant bits) are left out.
    rest = ~reliable & (status == IVStatus.OK) & (theirs > 0) & (price > 1e-300)
    sd = theirs * np.sqrt(T)
    vega_sigma = F * np.exp(-0.5 * (x / sd + sd / 2) ** 2) / np.sqrt(2 * np.pi) * sd
    slack = 1e-12 + 64 * EPS * price / vega_sigma
    assert np.all((np.abs(ours - theirs) / theirs <= slack)[rest])


def test_normalised_black_against_mpmath(rng):
    """b(x, s) to full precision, deep out of the money included; the only loss allowed is the
    rounding of the exponent (h^2 + t^2)/2, which is one ulp of x or s (its condition number)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 80
    n = 400
    x = -np.exp(rng.uniform(np.log(1e-6), np.log(300), n))
    s = np.exp(rng.uniform(np.log(1e-3), np.log(40), n))
    checked = 0
    for xi, si in zip(x, s):
        X, S = mp.mpf(xi), mp.mpf(si)
        phi = lambda z: mp.erfc(-z / mp.sqrt(2)) / 2  # noqa: E731
        want = mp.e ** (X / 2) * phi(X / S + S / 2) - mp.e ** (-X / 2) * phi(X / S - S / 2)
        if want < mp.mpf("1e-300"):
            continue
        got = lib.tg_normalised_black(xi, si, 1.0)
        exponent = 0.5 * ((xi / si) ** 2 + si**2 / 4)
        # The exponent is formed with up to six roundings (x/s, two squares, a sum, a halving, and
        # the exp's own), each a relative error of eps on a quantity of size `exponent`.
        assert abs(got - want) / want <= EPS * (16 + 6 * exponent), (xi, si)
        # Put-call parity and the put side through the same call.
        assert lib.tg_normalised_black(-xi, si, -1.0) == got
        checked += 1
    assert checked > 0.6 * n


def test_deep_out_of_the_money_tiny_prices():
    """Premiums down to 1e-300: the vol that reprices them, found in mpmath to 40 digits."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    for price in (1e-300, 1e-200, 1e-100, 1e-30, 1e-8):
        for strike, call in ((300.0, True), (33.0, False), (150.0, True)):
            for t in (1 / 365, 1.0, 10.0):
                vol, st = tickgpu.implied_vol(price, 100.0, strike, t, 0.01, 0.02, call,
                                              return_status=True, backend="cpu")
                assert st == IVStatus.OK, (price, strike, t)
                S, K, T = mp.mpf(100), mp.mpf(strike), mp.mpf(t)
                F, D = S * mp.e ** (mp.mpf("-0.02") * T), K * mp.e ** (mp.mpf("-0.01") * T)

                def log_premium(v):
                    sd = v * mp.sqrt(T)
                    d1 = mp.log(F / D) / sd + sd / 2
                    n = lambda z: mp.erfc(-z / mp.sqrt(2)) / 2  # noqa: E731
                    p = F * n(d1) - D * n(d1 - sd) if call else D * n(sd - d1) - F * n(-d1)
                    return mp.log(p) - mp.log(mp.mpf(price))

                true = mp.findroot(log_premium, (mp.mpf(float(vol)) * (1 - 1e-6),
                                                 mp.mpf(float(vol)) * (1 + 1e-6)),
                                   solver="secant")
                assert abs(float(vol) - true) / true <= 2e-14, (price, strike, t)


# ---- statuses at the bounds and on bad input -------------------------------------------------


@pytest.mark.parametrize("call", [True, False])
@pytest.mark.parametrize("strike", [80.0, 100.0, 125.0])
def test_statuses_at_the_bounds(call, strike):
    S, t, r, q = 100.0, 0.75, 0.03, 0.01
    fwd, disc_strike = S * math.exp(-q * t), strike * math.exp(-r * t)
    intrinsic = max(fwd - disc_strike if call else disc_strike - fwd, 0.0)
    cap = fwd if call else disc_strike

    def solve(p):
        v, st = tickgpu.implied_vol(p, S, strike, t, r, q, call, return_status=True, backend="cpu")
        return float(v), IVStatus(int(st))

    # In the money, prices within 2^-50 max(S e^{-qt}, K e^{-rt}) of the intrinsic value (a few ulps
    # of the scale: what two correct exp implementations may disagree on) are at it, either side.
    band = 2.0**-50 * max(fwd, disc_strike)
    assert solve(intrinsic) == (0.0, IVStatus.AT_INTRINSIC)
    if intrinsic > 0:
        for p in (math.nextafter(intrinsic, -math.inf), math.nextafter(intrinsic, math.inf),
                  intrinsic - 0.9 * band, intrinsic + 0.9 * band):
            assert solve(p) == (0.0, IVStatus.AT_INTRINSIC), p - intrinsic
        for p in (intrinsic - 1.5 * band, 0.5 * intrinsic):
            v, st = solve(p)
            assert st == IVStatus.BELOW_INTRINSIC and math.isnan(v)
    else:
        v, st = solve(-1e-300)
        assert st == IVStatus.BAD_INPUT and math.isnan(v)
    if intrinsic > 0:
        v, st = solve(intrinsic + 1.5 * band)
        assert st == IVStatus.OK and 0 < v < 0.05
    else:
        # A premium of 5e-324 is below what the normalised price (premium / sqrt(F K)) can hold:
        # vol 0 at that resolution. 1e-300 is a premium with a vol.
        assert solve(5e-324) == (0.0, IVStatus.AT_INTRINSIC)
        v, st = solve(1e-300)
        assert st == IVStatus.OK and 0 < v < 0.05
    for p in (cap, math.nextafter(cap, math.inf), 2 * cap, 1e300):
        v, st = solve(p)
        assert st == IVStatus.ABOVE_MAXIMUM and math.isnan(v)
    # Just below the maximum the vol is huge but finite; within its rounding, ABOVE_MAXIMUM.
    v, st = solve(cap * (1 - 1e-12))
    assert st == IVStatus.OK and 5 < v < 100
    v, st = solve(math.nextafter(cap, 0.0))
    assert (st == IVStatus.OK and v > 5) or (st == IVStatus.ABOVE_MAXIMUM and math.isnan(v))


def test_zero_price_out_of_the_money_is_at_intrinsic():
    v, st = tickgpu.implied_vol([0.0, 0.0], 100.0, [150.0, 50.0], 1.0, 0.0, 0.0, [True, False],
                                return_status=True, backend="cpu")
    assert np.all(v == 0) and np.all(st == IVStatus.AT_INTRINSIC)


BAD = [
    ("price", np.nan), ("price", np.inf), ("price", -1.0),
    ("spot", np.nan), ("spot", -np.inf), ("spot", 0.0), ("spot", -100.0),
    ("strike", np.nan), ("strike", np.inf), ("strike", 0.0), ("strike", -5.0),
    ("t", np.nan), ("t", np.inf), ("t", 0.0), ("t", -0.5),
    ("rate", np.nan), ("rate", np.inf), ("div", np.nan), ("div", -np.inf),
]


@pytest.mark.parametrize("name,value", BAD)
def test_bad_input_status_and_strict(name, value):
    args = dict(price=np.array([10.0, 10.0, 10.0]), spot=100.0, strike=100.0, t=1.0, rate=0.01,
                div=0.0, call=True)
    args[name] = np.array([1.0, 1.0, value]) * (10.0 if name == "price" else 1.0) \
        if name == "price" else np.array([args[name], args[name], value])
    args["price"] = np.where(np.arange(3) == 2, args["price"], 10.0) if name == "price" \
        else args["price"]
    vol, st = tickgpu.implied_vol(**args, return_status=True, backend="cpu")
    assert list(st) == [IVStatus.OK, IVStatus.OK, IVStatus.BAD_INPUT]
    assert np.isfinite(vol[:2]).all() and np.isnan(vol[2])
    with pytest.raises(ValueError, match=rf"^{name}\[2\]: must be"):
        tickgpu.implied_vol(**args, strict=True, backend="cpu")


def test_discounting_overflow_is_bad_input():
    v, st = tickgpu.implied_vol(1.0, 100.0, 100.0, 1.0, -1e3, 0.0, return_status=True,
                                backend="cpu")
    assert st == IVStatus.BAD_INPUT and np.isnan(v)
    with pytest.raises(ValueError, match="BAD_INPUT"):
        tickgpu.implied_vol(1.0, 100.0, 100.0, 1.0, -1e3, 0.0, strict=True, backend="cpu")


def test_strict_names_the_bound_and_index():
    prices = np.array([[10.0, 10.0], [10.0, 200.0]])
    with pytest.raises(ValueError, match=r"price\[\(1, 1\)\]: ABOVE_MAXIMUM"):
        tickgpu.implied_vol(prices, 100.0, 100.0, 1.0, 0.0, strict=True, backend="cpu")
    with pytest.raises(ValueError, match=r"price\[1\]: BELOW_INTRINSIC"):
        tickgpu.implied_vol([30.0, 10.0], 100.0, [80.0, 50.0], 1.0, 0.0, strict=True,
                            backend="cpu")
    # At intrinsic is an answer (vol 0), not an error.
    assert tickgpu.implied_vol(20.0, 100.0, 80.0, 1.0, 0.0, strict=True, backend="cpu") == 0.0


@pytest.mark.parametrize("price,spot,strike,t,r,q", [
    (1e-300, 1e-300, 1e300, 1.0, 0.0, 0.0),
    (1e300, 1e300, 1e-300, 1.0, 0.0, 0.0),
    (5e-324, 1.0, 1.0, 1.0, 0.0, 0.0),
    (1.0, 1e308, 1e308, 1e-300, 0.0, 0.0),
    (1e-10, 1.0, 1.0, 1e300, 0.0, 0.0),
    (0.5, 1.0, 1.0, 1e-300, 0.0, 0.0),
    (0.3, 1.0, 1.2, 2.0, 300.0, -300.0),
    (1e-5, 100.0, 100.0 * (1 + 1e-15), 1.0, 0.0, 0.0),
])
def test_extreme_inputs_give_an_answer_or_a_status(price, spot, strike, t, r, q):
    """Far outside any market, but never a crash, hang or silent garbage."""
    start = time.perf_counter()
    for call in (True, False):
        v, st = tickgpu.implied_vol(price, spot, strike, t, r, q, call, return_status=True,
                                    backend="cpu")
        v, st = float(v), IVStatus(int(st))
        if st == IVStatus.OK:
            assert np.isfinite(v) and v > 0
            sd = v * math.sqrt(t)
            x = math.log(spot / strike) + (r - q) * t
            b = lib.tg_normalised_black(x, sd, 1.0 if call else -1.0)
            scale = math.sqrt(spot * math.exp(-q * t)) * math.sqrt(strike * math.exp(-r * t))
            assert math.isclose(b * scale, price, rel_tol=1e-9, abs_tol=1e-300)
        elif st == IVStatus.AT_INTRINSIC:
            assert v == 0
        else:
            assert math.isnan(v)
    assert time.perf_counter() - start < 1.0


# ---- shapes, dtypes, backends ------------------------------------------------------------------


def test_shapes_and_broadcasting():
    price = np.array([[5.0], [10.0], [15.0]])
    strike = np.array([[90.0, 100.0, 110.0, 120.0]])
    vol = tickgpu.implied_vol(price, 100.0, strike, 1.0, 0.02, backend="cpu")
    assert vol.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            one = tickgpu.implied_vol(price[i, 0], 100.0, strike[0, j], 1.0, 0.02, backend="cpu")
            assert np.array_equal(one, vol[i, j], equal_nan=True)
    assert tickgpu.implied_vol(10.0, 100.0, 100.0, 1.0, 0.0).shape == ()
    assert tickgpu.implied_vol([10.0], 100.0, 100.0, 1.0, 0.0).shape == (1,)
    v, st = tickgpu.implied_vol(np.empty(0), 100.0, 100.0, 1.0, 0.0, return_status=True)
    assert v.shape == st.shape == (0,) and st.dtype == np.int8
    assert tickgpu.implied_vol(np.empty((0, 3)), 100.0, [90.0, 100.0, 110.0], 1.0, 0.0).shape \
        == (0, 3)
    with pytest.raises(ValueError, match="strike"):
        tickgpu.implied_vol(np.ones(3), 100.0, np.ones(4), 1.0, 0.0)
    with pytest.raises(ValueError, match="call"):
        tickgpu.implied_vol(np.ones(3), 100.0, 100.0, 1.0, 0.0, 0.0, [True, False])
    # Non-contiguous and integer inputs are accepted (copied once).
    p = np.array([10.0, 0.0, 12.0, 0.0])[::2]
    assert np.allclose(tickgpu.implied_vol(p, 100, 100, 1, 0), tickgpu.implied_vol([10.0, 12.0], 100, 100, 1, 0))


def test_argument_checks():
    with pytest.raises(TypeError, match="dtype"):
        tickgpu.implied_vol(10.0, 100.0, 100.0, 1.0, 0.0, dtype=np.int32)
    with pytest.raises(ValueError, match="backend"):
        tickgpu.implied_vol(10.0, 100.0, 100.0, 1.0, 0.0, backend="tpu")


def test_status_enum_mirrors_c():
    for st in IVStatus:
        assert getattr(lib, "TG_IV_" + st.name) == st.value


# ---- float32 -----------------------------------------------------------------------------------


def test_float32_follows_float64(rng):
    """Ordinary options: float32 within 1e-5 of float64; on the same float32-rounded inputs the two
    paths differ only by the final rounding to float32."""
    n = 20_000
    o, sigma = random_options(rng, n, moneyness=(0.7, 1.4), t=(0.05, 3.0), vol=(0.08, 1.0))
    price = reference_price(o, sigma)[0]
    v64 = tickgpu.implied_vol(price, **o, backend="cpu")
    v32, st32 = tickgpu.implied_vol(price, **o, dtype=np.float32, return_status=True,
                                    backend="cpu")
    assert v32.dtype == np.float32
    rounded = {k: (v.astype(np.float32).astype(np.float64) if v.dtype != bool else v)
               for k, v in o.items()}
    price32 = price.astype(np.float32).astype(np.float64)
    v64r, st64r = tickgpu.implied_vol(price32, **rounded, return_status=True, backend="cpu")
    # The PRECISION rule, recomputed from the docstring on the float32 values.
    intrinsic, cap, scale = bounds(rounded)
    flagged = (((intrinsic > 0) & (price32 - intrinsic < 2.0**-21 * scale))
               | (cap - price32 < 2.0**-21 * scale))
    assert np.array_equal(st32 == IVStatus.PRECISION, flagged & (st64r == IVStatus.OK))
    ok = st32 == IVStatus.OK
    assert np.array_equal(ok, (st64r == IVStatus.OK) & ~flagged)
    assert ok.mean() > 0.9
    # Same float32 inputs: the two paths differ only by the final rounding to float32.
    assert np.array_equal(v32[ok], v64r[ok].astype(np.float32))
    # Ordinary options (vega * vol at least 1% of the price scale, so float32 rounding of the
    # inputs moves the vol by < 1e-5): float32 within 1e-5 of float64 on the original inputs.
    _, vega, _, fwd, strike = reference_price(o, sigma)
    ordinary = ok & (vega * sigma > 0.01 * (fwd + strike))
    assert ordinary.mean() > 0.5
    assert np.max(np.abs(v32[ordinary] - v64[ordinary]) / v64[ordinary]) <= 1e-5


def test_float32_precision_status():
    """PRECISION where the time value (in the money) or the room below the maximum is under
    2^-21 max(S e^{-qt}, K e^{-rt}); the same price in float64 has a vol."""
    S, K = np.float32(100.0), np.float32(80.0)       # r = q = 0: intrinsic 20 exactly
    resolution = 2.0**-21 * 100.0
    ulp20 = float(np.spacing(np.float32(20.0)))
    for k, expect in ((4, IVStatus.PRECISION), (24, IVStatus.PRECISION), (26, IVStatus.OK),
                      (1000, IVStatus.OK)):
        price = np.float32(20.0 + k * ulp20)
        assert (k * ulp20 < resolution) == (expect == IVStatus.PRECISION)
        v, st = tickgpu.implied_vol(price, S, K, 0.5, 0.0, dtype=np.float32, return_status=True)
        assert st == expect, k
        assert np.isnan(v) == (expect == IVStatus.PRECISION)
        v64, st64 = tickgpu.implied_vol(float(price), 100.0, 80.0, 0.5, 0.0, return_status=True)
        assert st64 == IVStatus.OK and v64 > 0
    # Near the maximum: a put on strike 100 is worth at most 100.
    ulp100 = float(np.spacing(np.float32(100.0)))
    v, st = tickgpu.implied_vol(np.float32(100.0 - 4 * ulp100), S, np.float32(100.0), 0.5, 0.0,
                                call=False, dtype=np.float32, return_status=True)
    assert st == IVStatus.PRECISION and np.isnan(v)
    # Out of the money a small premium is fine in float32.
    v, st = tickgpu.implied_vol(np.float32(1e-20), S, np.float32(200.0), 0.5, 0.0,
                                dtype=np.float32, return_status=True)
    assert st == IVStatus.OK and 0 < v < 1
    with pytest.raises(ValueError, match=r"price: PRECISION"):
        tickgpu.implied_vol(np.float32(20.0 + 4 * ulp20), S, K, 0.5, 0.0, dtype=np.float32,
                            strict=True)


# ---- threads and the C entry points ------------------------------------------------------------


def call_c(o, price, nthreads, dtype=np.float64):
    n = price.size
    keep = []
    inputs = ffi.new("tg_iv_inputs *")
    for name, a in (("price", price), ("spot", o["spot"]), ("strike", o["strike"]), ("t", o["t"]),
                    ("rate", o["rate"]), ("div", o["div"])):
        a = np.ascontiguousarray(a, dtype=dtype)
        keep.append(a)
        setattr(inputs, name, ptr(a))
        setattr(inputs, "s_" + name, 1)
    calls = np.ascontiguousarray(o["call"], dtype=np.uint8)
    keep.append(calls)
    inputs.call, inputs.s_call = ptr(calls, "uint8_t *"), 1
    vol = np.full(n, -1.0, dtype=dtype)
    status = np.full(n, -1, dtype=np.int8)
    solve = lib.tg_implied_vol_f64 if dtype == np.float64 else lib.tg_implied_vol_f32
    ctype = "double *" if dtype == np.float64 else "float *"
    assert solve(n, inputs, ptr(vol, ctype), ptr(status, "int8_t *"), nthreads) == lib.TG_OK
    return vol, status


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threads_match_single_thread_bit_for_bit(rng, dtype):
    n = 100_003
    o, sigma = random_options(rng, n)
    price = reference_price(o, sigma)[0]
    price[rng.random(n) < 0.01] = np.nan
    one, st1 = call_c(o, price, 1, dtype)
    for nthreads in (0, 3, 8):
        many, stn = call_c(o, price, nthreads, dtype)
        assert np.array_equal(one.view(np.uint8), many.view(np.uint8))
        assert np.array_equal(st1, stn)
    assert np.all(st1 >= 0)


def test_c_rejects_bad_calls():
    inputs = ffi.new("tg_iv_inputs *")
    out = np.empty(1)
    assert lib.tg_implied_vol_f64(1, ffi.NULL, ptr(out, "double *"), ffi.NULL, 0) == lib.TG_EINVAL
    assert lib.tg_implied_vol_f64(1, inputs, ptr(out, "double *"), ffi.NULL, 0) == lib.TG_EINVAL
    assert lib.tg_implied_vol_f64(-1, inputs, ptr(out, "double *"), ffi.NULL, 0) == lib.TG_EINVAL
    assert lib.tg_implied_vol_f64(0, inputs, ffi.NULL, ffi.NULL, 0) == lib.TG_OK


# ---- the shared core compiles as CUDA C ---------------------------------------------------------


KERNEL = r"""
#include "cpu/lbr_core.h"
extern "C" __global__ void iv_check(const double *price, double *vol, int *status, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int st;
        vol[i] = tg_lbr_implied_black_vol(price[i], 100.0, 110.0, 0.5, 1.0, &st);
        status[i] = st;
        float v32 = tg_lbr_implied_vol_bsm_f32((float)price[i], 100.f, 110.f, 0.5f, 0.01f, 0.f,
                                               -1.f, &st);
        vol[i] += v32 + tg_lbr_normalised_black(-0.1, 0.2, 1.0);
    }
}
"""


def test_lbr_core_compiles_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH: the CUDA C compilability of lbr_core.h is unchecked")
    src = tmp_path / "iv_check.cu"
    src.write_text(KERNEL)
    out = tmp_path / "iv_check.cubin"
    proc = subprocess.run([nvcc, "-x", "cu", "-arch=sm_90", "-cubin", "-Werror", "all-warnings",
                           "-I", str(ROOT / "csrc"), "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
