"""The GPU suite's measure of how finely a price fixes its implied vol (tickgpu.bench.gpu)."""
import numpy as np

from tickgpu.bench.gpu import _iv_resolution


def _x(spot, strike, t, call):
    n = len(spot)
    return {"spot": np.asarray(spot, float), "strike": np.asarray(strike, float), "t": np.asarray(t, float),
            "rate": np.full(n, 0.02), "div": np.full(n, 0.01), "call": np.asarray(call, bool)}


def test_resolution_is_fine_at_the_money_and_coarse_deep_in_the_money():
    x = _x([100.0, 100.0, 300.0, 100.0], [100.0, 100.0, 100.0, 300.0], [1.0, 1.0, 0.01, 0.01],
           [True, False, True, False])
    r = _iv_resolution(x, np.full(4, 0.2))
    # At the money: 16 ulps of the legs (~100) over vega (~39), relative to a vol of 0.2: ~5e-14.
    assert r[0] < 1e-13 and r[1] < 1e-13
    # Deep in the money a day or so from expiry the density underflows: the price fixes no vol.
    assert np.isinf(r[2]) and np.isinf(r[3])


def test_resolution_matches_its_formula():
    from scipy.special import ndtr

    x = _x([100.0], [120.0], [0.5], [True])
    vol = np.array([0.3])
    sst = 0.3 * np.sqrt(0.5)
    d1 = (np.log(100 / 120) + 0.01 * 0.5) / sst + 0.5 * sst
    legs = 100 * np.exp(-0.005) * ndtr(d1) + 120 * np.exp(-0.01) * ndtr(d1 - sst)
    vega = 100 * np.exp(-0.005) * np.exp(-0.5 * d1 * d1) / np.sqrt(2 * np.pi) * np.sqrt(0.5)
    np.testing.assert_allclose(_iv_resolution(x, vol), 16 * 2.0**-52 * legs / vega / 0.3, rtol=1e-12)
