"""What a float32 or float64 greek can be known to where its formula cancels: shared by the GPU
tests that compare greeks with the CPU backend (test_gpu_ops.py, test_mailbox_gpu.py,
test_pipeline_streams_gpu.py through test_gpu_ops)."""
import numpy as np


def cancelling_scale(args):
    """Per option, the magnitude whose rounding sets the error of vanna, volga, price, theta and charm.

    Both are proportional to d2 = d1 - sigma sqrt(t), which cancels near the at-the-money-forward
    point ((r - q) t close to sigma^2 t / 2): any implementation's d2 carries a few ulps of
    |d1| + sigma sqrt(t), not of d2. So vanna = -e^{-qt} phi(d1) d2 / sigma is known to
    e^{-qt} phi(d1) (|d1| + sigma sqrt t) / sigma times the working precision, and volga = vega d1 d2 / sigma
    to vega (|d1| + sigma sqrt t)^2 / sigma times it. (An edge case: S = K = 100, t = 1, sigma = 0.2,
    r = 0.03, q = 0.01 in float32 has d2 = -5.2e-9 from the float32-rounded inputs, against roundings
    of ~1e-8; its vanna, 1.0e-8 in float64, came out 2.9e-8 on the CPU and -0.0 on the GPU, both
    correct to float32 resolution.)

    Price, theta and charm are sums of terms of opposite signs, each computed to a few ulps of
    itself: price = w (S e^{-qt} N(w d1) - K e^{-rt} N(w d2)) is known to the sum of its two legs
    times the working precision, theta to the sum of its three terms' magnitudes, charm = w q e^{-qt}
    N(w d1) - e^{-qt} phi(d1) (2 (r - q) t - d2 sigma sqrt t) / (2 t sigma sqrt t) to the sum of its
    two terms' magnitudes (the second's d2 taken as the span above). (A deep out-of-the-money float32
    price of 0.0042 with legs near 0.07 came out 0.00421684 on the GPU against 0.00421701 on the
    CPU: 1.7e-7 apart, 2.5 ulps of the legs. A float32 charm of S = 198.7, K = 180.43, t = 2.18,
    sigma = 0.565, r = 0.0625, q = 0.0383, -1.407832e-4 in float64 from terms of 0.0255 each, came
    out -1.407828e-4 on the GPU and -1.407862e-4 on the CPU: 2.2 ulps of the terms.) Bad inputs and
    t = 0 get 0 (the plain tolerance)."""
    import math

    erfc = np.vectorize(math.erfc, otypes=[np.float64])

    def ndtr(x):
        return 0.5 * erfc(-x / np.sqrt(2.0))

    a = {k: np.asarray(v, dtype=np.float64) for k, v in args.items() if k != "call"}
    w = np.where(np.asarray(args.get("call", True), dtype=bool), 1.0, -1.0)
    with np.errstate(all="ignore"):
        sst = a["vol"] * np.sqrt(a["t"])
        d1 = (np.log(a["spot"] / a["strike"]) + (a["rate"] - a["div"]) * a["t"]) / sst + 0.5 * sst
        pdf_q = np.exp(-a["div"] * a["t"] - 0.5 * d1 * d1) / np.sqrt(2 * np.pi)
        span = np.abs(d1) + sst
        vanna = pdf_q * span / a["vol"]
        volga = a["spot"] * pdf_q * np.sqrt(a["t"]) * span * span / a["vol"]
        leg_s = a["spot"] * np.exp(-a["div"] * a["t"]) * ndtr(w * d1)
        leg_k = a["strike"] * np.exp(-a["rate"] * a["t"]) * ndtr(w * (d1 - sst))
        price = leg_s + leg_k
        theta = a["spot"] * pdf_q * a["vol"] / (2 * np.sqrt(a["t"])) + np.abs(a["rate"]) * leg_k \
            + np.abs(a["div"]) * leg_s
        charm = np.abs(a["div"]) * leg_s / a["spot"] \
            + pdf_q * (2 * np.abs(a["rate"] - a["div"]) * a["t"] + span * sst) / (2 * a["t"] * sst)
    return {k: np.nan_to_num(v, nan=0.0, posinf=0.0)
            for k, v in (("vanna", vanna), ("volga", volga), ("price", price), ("theta", theta), ("charm", charm))}


def tail_conditioning(args):
    """Per option, how much the rounding of d1 is magnified in a greek that carries the normal
    density phi(d1) (gamma, vega, vanna, volga, charm; and the far tails of price, delta, theta,
    rho and phi, where N(-|d1|) ~ phi(d1) / |d1|).

    d ln phi(d1) / d d1 = -d1, and any implementation's d1 carries a few ulps of its terms'
    magnitudes, |ln(S/K)| / (sigma sqrt t) + |(r - q) t| / (sigma sqrt t) + sigma sqrt(t) / 2 (each
    of ln, sqrt, the products and the quotient rounds once), so such a greek is known to |d1| times
    that span, times the working precision, relative: the float32 gamma of S = 6.2, K = 100,
    t = 0.5, sigma = 0.3, r = 0.03, q = 0.01 (d1 = -12.95, a span of 13.3, so kappa = 172) came out
    1.08838784e-37 on the GPU and 1.0884292e-37 on the CPU against 1.08842221e-37 in float64: 530
    and 108 ulps of the result, 3.1 and 0.63 times kappa (the GPU's ln and reciprocal are the
    hardware's approximations). 0 where the density underflows in float64 (|d1| > 38) or an input
    is bad: there the results are limits, held to the plain tolerance."""
    a = {k: np.asarray(v, dtype=np.float64) for k, v in args.items() if k != "call"}
    with np.errstate(all="ignore"):
        sst = a["vol"] * np.sqrt(a["t"])
        terms = (np.abs(np.log(a["spot"] / a["strike"])) + np.abs((a["rate"] - a["div"]) * a["t"])) / sst + 0.5 * sst
        d1 = (np.log(a["spot"] / a["strike"]) + (a["rate"] - a["div"]) * a["t"]) / sst + 0.5 * sst
        kappa = np.abs(d1) * terms
    return np.where(np.isfinite(kappa) & (np.abs(d1) <= 38.0), kappa, 0.0)


def check_tail_prices_never_negative(rng, dtype, backend, n=200_000):
    """Far out of the money a price is the difference of two tails of a few ulps each (or
    subnormal), which rounds either way: `backend` must give 0 where it rounds below (never
    -2e-322, nor -0.0 for a put whose legs both underflow), and implied_vol must take every price
    greeks gives (no BAD_INPUT)."""
    import tickgpu

    S, K = rng.uniform(20, 200, n), rng.uniform(20, 200, n)
    t, vol = rng.uniform(1e-4, 0.05, n), rng.uniform(0.01, 0.1, n)
    r, q, call = rng.uniform(0, 0.1, n), rng.uniform(0, 0.2, n), rng.random(n) < 0.5
    price = tickgpu.greeks(S, K, t, r, vol, q, call, dtype=dtype, backend=backend).price
    assert not np.signbit(price).any(), price[np.signbit(price)][:5]
    assert (price == 0).sum() > n // 10                    # the sweep does reach the tails
    _, status = tickgpu.implied_vol(price, S, K, t, r, q, call, dtype=dtype, backend=backend, return_status=True)
    assert not (status == int(tickgpu.IVStatus.BAD_INPUT)).any()

