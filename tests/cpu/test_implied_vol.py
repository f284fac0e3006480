"""tickgpu.implied_vol on the CPU backend: price round trips through an independent float64 Black
formula and QuantLib, agreement with py_lets_be_rational, the normalised Black function against
mpmath, statuses at every bound and bad input, float32, threads, and the CUDA compilability of the
shared core."""
import math
import re
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


def branch_boundaries(x):
    """The solver's branch boundaries s_l < s_c < s_u at x < 0, computed the way it computes them
    (Jaeckel's: s_c = sqrt(2|x|), the tangent at s_c meeting 0 and b_max), so that the prices
    b(x, s) at these s are its b_l, b_c and b_u to the last bit or nearly."""
    s_c = math.sqrt(-2.0 * x)
    b_max = math.exp(0.5 * x)
    v_c = b_max / math.sqrt(2.0 * math.pi)
    b_c = lib.tg_normalised_black(x, s_c, 1.0)
    return s_c - b_c / v_c, s_c, s_c + (b_max - b_c) / v_c


def test_prices_on_the_branch_boundaries_against_mpmath():
    """beta = b(x, s) at s = s_l, s_c, s_u, and a few ulps either side: the initial guess is then
    the bracket's end and the root is that end, or just beyond it where the rounding of b put
    beta on the other side of the boundary. Solved to what b's own rounding (of the exponent
    (h^2 + t^2)/2) and the conditioning b / (s b') allow, against the root of the 40-digit
    b(x, s) = beta."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    st = ffi.new("int *")

    def b_mp(X, S):
        phi = lambda z: mp.erfc(-z / mp.sqrt(2)) / 2  # noqa: E731
        return mp.e ** (X / 2) * phi(X / S + S / 2) - mp.e ** (-X / 2) * phi(X / S - S / 2)

    for x in -np.exp(np.linspace(np.log(1e-8), np.log(60.0), 120)):
        x = float(x)
        for s in branch_boundaries(x):
            b0 = lib.tg_normalised_black(x, s, 1.0)
            X = mp.mpf(x)
            root = mp.findroot(lambda v: b_mp(X, v) - mp.mpf(b0), mp.mpf(s))
            h, t = x / s, 0.5 * s
            exponent = 0.5 * (h * h + t * t)
            vega = math.exp(-exponent) / math.sqrt(2.0 * math.pi)
            tol = 8 * EPS * (1 + b0 / (s * vega)) * (1 + exponent)
            for k in (-7, -3, -1, 0, 1, 3, 7):
                beta = b0 + k * float(np.spacing(b0))
                # The root moves by (beta - b0) / b' (first order: the rest is ~1e-30 of s).
                true = float(root + (mp.mpf(beta) - mp.mpf(b0)) / vega)
                # The out-of-the-money call at x and the out-of-the-money put at -x: one problem.
                for xx, theta in ((x, 1.0), (-x, -1.0)):
                    got = lib.tg_normalised_implied_vol(beta, xx, theta, st)
                    assert st[0] == IVStatus.OK
                    assert abs(got - true) / true <= tol, (x, s, k, got, true)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_trips_on_the_branch_boundaries(rng, dtype):
    """Premiums from `greeks` at the vols where sigma sqrt(t) is s_l, s_c or s_u, calls and puts in
    and out of the money: round-off puts their normalised prices on, or an ulp either side of, the
    solver's branch boundaries (a tenth of them came back wrong, status OK, when the guess on a
    bracket end was thrown away). float32 solves the float32-rounded premium; its vol is compared
    with float64's within what that rounding allows."""
    n = 6000
    spot = 100.0
    strike = spot * np.exp(rng.uniform(-2.0, 2.0, n))
    t = np.exp(rng.uniform(np.log(0.02), np.log(5.0), n))
    rate, div = rng.uniform(-0.02, 0.08, n), rng.uniform(0.0, 0.05, n)
    call = rng.random(n) < 0.5
    x = np.log(spot / strike) + (rate - div) * t
    s = np.array([branch_boundaries(-abs(xi))[k] for k, xi in zip(rng.integers(0, 3, n), x)])
    sigma = s / np.sqrt(t)
    args = dict(spot=spot, strike=strike, t=t, rate=rate, div=div, call=call)
    price = tickgpu.greeks(vol=sigma, **args, dtype=dtype, backend="cpu").price
    vol, status = tickgpu.implied_vol(price, **args, dtype=dtype, return_status=True, backend="cpu")
    ok = status == IVStatus.OK
    assert ok.mean() > 0.95
    if dtype == np.float64:
        # Backward error: the vol found reprices the premium (in the independent float64 formula)
        # to a few ulps, cancel of them where its two terms cancel and d^2 / 2 more for the
        # rounding of d inside the normal CDF. (The forward error would also measure `greeks`.)
        repriced, _, cancel, _, _ = reference_price(args, np.where(ok, vol, sigma))
        d = np.abs(x) / s + s / 2
        tol = 32 * EPS * cancel * (1 + 0.5 * d * d)
        err = np.abs(repriced - price) / price
    else:
        # Half a float32 ulp of each of price, spot and strike, through vega.
        _, vega, _, fwd, disc_strike = reference_price(args, sigma)
        tol = 1e-6 + 2.0**-22 * (price + fwd + disc_strike) / (vega * sigma)
        err = np.abs(vol - sigma) / sigma
    assert np.all((err <= tol)[ok]), np.max((err / tol)[ok])


def test_branch_boundary_repros_match_py_vollib():
    """Two prices exactly on the boundary b_c (sigma sqrt(t) = sqrt(2 |ln F/K|))."""
    vollib = pytest.importorskip("py_vollib.black_scholes_merton.implied_volatility")
    sigma = 0.06484146962970626
    price = float(tickgpu.greeks(100.0, 99.79, 1.0, 0.0, sigma, call=False).price)
    assert price == 2.4799888542453985
    vol, st = tickgpu.implied_vol(price, 100.0, 99.79, 1.0, 0.0, call=False, return_status=True)
    theirs = vollib.implied_volatility(price, 100.0, 99.79, 1.0, 0.0, 0.0, "p")
    assert st == IVStatus.OK
    assert abs(vol - theirs) <= 1e-12 * theirs and abs(vol - sigma) <= 1e-12 * sigma
    # x = -2, s_c = 2: the true vol is 2 to the precision of the price.
    vol = tickgpu.implied_vol(0.04491750967012714, math.exp(-2), 1.0, 1.0, 0.0)
    theirs = vollib.implied_volatility(0.04491750967012714, math.exp(-2), 1.0, 1.0, 0.0, 0.0, "c")
    assert abs(vol - 2.0) <= 1e-13 and abs(vol - theirs) <= 1e-12


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


@pytest.mark.parametrize("call, error, message", [
    ("put", TypeError, "call: must be bool or an array of bool"),
    (None, TypeError, "call: must be bool or an array of bool"),
    (2, ValueError, "call: must be True/False (or 1/0), got 2"),
    (np.array([0.5]), TypeError, "call: must be bool or an array of bool, got float64"),
    ([1, 3], ValueError, "call[1]: must be True/False (or 1/0), got 3"),
])
def test_call_flags_are_checked_as_in_greeks(call, error, message):
    """Anything but booleans (or 0/1 integers) raises, with greeks' error, instead of being read
    as a call because it is truthy."""
    for fn in (lambda c: tickgpu.greeks(100.0, 100.0, 1.0, 0.0, 0.2, 0.0, c),
               lambda c: tickgpu.implied_vol(5.0, 100.0, 100.0, 1.0, 0.0, 0.0, c)):
        with pytest.raises(error) as e:
            fn(call)
        assert message in str(e.value)
    # What is accepted: bools, numpy bools, 0/1 integers, bool and uint8 arrays, all read alike.
    put = float(tickgpu.implied_vol(3.0, 100.0, 110.0, 1.0, 0.0, 0.0, False))
    call_ = float(tickgpu.implied_vol(3.0, 100.0, 110.0, 1.0, 0.0, 0.0, True))
    for flags, want in ((np.bool_(False), put), (0, put), ([0, 1], [put, call_]),
                        (np.array([0, 1], np.uint8), [put, call_]), (np.array([False, True]), [put, call_])):
        np.testing.assert_array_equal(tickgpu.implied_vol(3.0, 100.0, 110.0, 1.0, 0.0, 0.0, flags), want)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("arg, value, message", [
    ("spot", 1e39, "spot[1]: must be finite, got 1e+39 (inf in float32)"),
    ("t", 1e-50, "t[1]: must be > 0, got 1e-50 (0.0 in float32)"),
    ("price", 1e39, "price[1]: must be finite, got 1e+39 (inf in float32)"),
])
def test_strict_names_the_argument_after_the_float32_cast(arg, value, message):
    args = dict(price=[5.0, 5.0], spot=[100.0, 100.0], strike=[100.0, 100.0], t=[1.0, 1.0], rate=0.0)
    args[arg] = [args[arg][0], value]
    with pytest.raises(ValueError) as e:
        tickgpu.implied_vol(**args, dtype=np.float32, strict=True)
    assert message in str(e.value)
    assert tickgpu.implied_vol(**args, dtype=np.float32, return_status=True)[1][1] == IVStatus.BAD_INPUT


def test_strict_bad_input_names_rate_or_div():
    """Discounting beyond a double: the message names rate (or div) and the index, not the price."""
    with pytest.raises(ValueError, match=r"^rate\[1\]: BAD_INPUT: rate \* t beyond what float64 can "
                                         r"discount: strike \* exp\(-rate \* t\) = inf .*got -1000.0$"):
        tickgpu.implied_vol(5.0, 100.0, 100.0, 1.0, np.array([0.0, -1e3]), strict=True)
    with pytest.raises(ValueError, match=r"^div: BAD_INPUT: div \* t beyond .* spot \* exp\(-div \* t\) "
                                         r"= 0.0 .*got 800.0$"):
        tickgpu.implied_vol(5.0, 100.0, 100.0, 1.0, 0.0, 800.0, strict=True)


@pytest.mark.parametrize("value", ["5.0", None, 5 + 0j, ["5.0"]], ids=repr)
def test_inputs_must_be_real_numbers(value):
    for strict in (False, True):
        with pytest.raises(TypeError, match=r"^price: must be a real number"):
            tickgpu.implied_vol(value, 100.0, 100.0, 1.0, 0.0, strict=strict)
        with pytest.raises(TypeError, match=r"^strike: must be a real number"):
            tickgpu.implied_vol(5.0, 100.0, value, 1.0, 0.0, strict=strict, dtype=np.float32)


@pytest.mark.parametrize("value, what", [("5.0", "str"), (None, "NoneType"), (5 + 0j, "complex"), (False, "bool"),
                                         (np.True_, "bool"), (["5.0"], "an array of <U3"), ([True], "an array of bool")],
                         ids=repr)
def test_strict_names_the_type_a_value_was_passed_as(value, what):
    """strict=True says what the caller passed, as the call without it does ("got bool" for div=False,
    not "got an array of bool")."""
    for strict in (False, True):
        with pytest.raises(TypeError, match=rf"^div: must be a real number or an array of real numbers, "
                                            rf"got {re.escape(what)}$"):
            tickgpu.implied_vol(5.0, 100.0, 100.0, 1.0, 0.0, value, strict=strict, backend="cpu")


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
    for dtype in ("banana", 5):     # not a dtype at all: NumPy's own error named no argument
        with pytest.raises(TypeError, match=rf"^dtype: must be float64 or float32, got {dtype!r}$"):
            tickgpu.implied_vol(10.0, 100.0, 100.0, 1.0, 0.0, dtype=dtype)
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
    # The PRECISION rule, recomputed from the docstring on the float32 values: a time value below
    # the resolution in magnitude (so a price a rounding below the intrinsic value too, where
    # float64 says BELOW_INTRINSIC), or a room below the maximum under it.
    intrinsic, cap, scale = bounds(rounded)
    flagged = (((intrinsic > 0) & (np.abs(price32 - intrinsic) < 2.0**-21 * scale))
               | (cap - price32 < 2.0**-21 * scale))
    assert np.array_equal(st32 == IVStatus.PRECISION,
                          flagged & np.isin(st64r, [IVStatus.OK, IVStatus.BELOW_INTRINSIC]))
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


def test_float32_prices_rounded_below_intrinsic_are_precision(rng):
    """A correctly rounded float32 premium may land just below the intrinsic value (the rounding of
    price, spot and strike): within 2^-21 max(S e^{-qt}, K e^{-rt}) below it the status is
    PRECISION, as just above it, not BELOW_INTRINSIC; further below, BELOW_INTRINSIC."""
    n = 50_000
    o, sigma = random_options(rng, n, t=(1e-3, 3.0))
    o = {k: (v.astype(np.float32).astype(np.float64) if v.dtype != bool else v) for k, v in o.items()}
    sigma = sigma.astype(np.float32).astype(np.float64)
    price32 = reference_price(o, sigma)[0].astype(np.float32)   # the float64 price, rounded once
    _, st = tickgpu.implied_vol(price32, **o, dtype=np.float32, return_status=True, backend="cpu")
    assert not np.any(st == IVStatus.BELOW_INTRINSIC)
    assert np.mean(st == IVStatus.PRECISION) > 0.05          # the case is common, not contrived
    # The review's example: float64 on the unrounded inputs says AT_INTRINSIC.
    args = (4.723861217498779, 2.7935664653778076, 0.15625156462192535, -0.013916019350290298,
            0.026435257866978645, True)
    v, st = tickgpu.implied_vol(np.float32(1.9047419086366473), *args, dtype=np.float32,
                                return_status=True)
    assert st == IVStatus.PRECISION and np.isnan(v)
    assert tickgpu.implied_vol(1.9047419086366473, *args, return_status=True)[1] \
        == IVStatus.AT_INTRINSIC
    # The band's edges, r = q = 0: intrinsic 20 exactly, resolution 2^-21 * 100 = 25 ulps of 20.
    ulp = float(np.spacing(np.float32(20.0)))
    for k, expect in ((-1, IVStatus.PRECISION), (-24, IVStatus.PRECISION),
                      (-25, IVStatus.BELOW_INTRINSIC), (-1000, IVStatus.BELOW_INTRINSIC)):
        v, st = tickgpu.implied_vol(np.float32(20.0 + k * ulp), np.float32(100.0), np.float32(80.0),
                                    0.5, 0.0, dtype=np.float32, return_status=True)
        assert st == expect, k
        assert np.isnan(v)
    # float64 keeps its own, far narrower band: one float32 ulp below is below.
    assert tickgpu.implied_vol(20.0 - ulp, 100.0, 80.0, 0.5, 0.0, return_status=True)[1] \
        == IVStatus.BELOW_INTRINSIC


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
