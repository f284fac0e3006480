"""What a user would run without tickgpu: the baselines of the CPU suite.

- Black-Scholes-Merton price and greeks vectorized in NumPy/SciPy, float64 (``scipy.special.ndtr``);
- implied vol by a per-option loop over vollib, py_lets_be_rational and QuantLib;
- a bilinear-in-variance surface lookup in NumPy;
- an order book in pure Python (dict of levels), applying LOBSTER messages one by one.

These are written the way a careful user would write them, not deliberately slow; they are also
checked against tickgpu's results in the suite, so a fast wrong answer cannot win.
"""
from __future__ import annotations

import math

import numpy as np

SQRT_2PI = math.sqrt(2.0 * math.pi)


def numpy_greeks(spot, strike, t, rate, vol, div, call) -> dict[str, np.ndarray]:
    """Price and the ten greeks of tickgpu.greeks (same units) with NumPy/SciPy, float64.

    For t > 0 and vol > 0 only: this is a speed baseline, edge cases are not its business.
    """
    from scipy.special import ndtr

    sq = np.sqrt(t)
    vs = vol * sq
    d1 = (np.log(spot / strike) + (rate - div + 0.5 * vol * vol) * t) / vs
    d2 = d1 - vs
    dq = np.exp(-div * t)
    dr = np.exp(-rate * t)
    pdf = np.exp(-0.5 * d1 * d1) / SQRT_2PI
    sign = np.where(call, 1.0, -1.0)
    nd1 = ndtr(sign * d1)
    nd2 = ndtr(sign * d2)
    sdq = spot * dq
    kdr = strike * dr
    price = sign * (sdq * nd1 - kdr * nd2)
    delta = sign * dq * nd1
    gamma = dq * pdf / (spot * vs)
    vega = sdq * pdf * sq
    theta = -sdq * pdf * vol / (2.0 * sq) + sign * (div * sdq * nd1 - rate * kdr * nd2)
    rho = sign * kdr * t * nd2
    phi = -sign * sdq * t * nd1
    vanna = -dq * pdf * d2 / vol
    volga = vega * d1 * d2 / vol
    charm = sign * div * dq * nd1 - dq * pdf * (2.0 * (rate - div) * t - d2 * vs) / (2.0 * t * vs)
    return {"price": price, "delta": delta, "gamma": gamma, "vega": vega, "theta": theta, "rho": rho,
            "phi": phi, "vanna": vanna, "volga": volga, "charm": charm}


def vollib_iv_loop(price, spot, strike, t, rate, div, call) -> np.ndarray:
    """vollib's BSM implied vol (Let's Be Rational in Python), one option at a time."""
    from vollib.black_scholes_merton.implied_volatility import implied_volatility

    out = np.empty(len(price))
    for i in range(len(price)):
        try:
            out[i] = implied_volatility(float(price[i]), float(spot[i]), float(strike[i]), float(t[i]),
                                        float(rate[i]), float(div[i]), "c" if call[i] else "p")
        except Exception:  # vollib raises for prices outside the arbitrage bounds
            out[i] = math.nan
    return out


def lets_be_rational_iv_loop(price, spot, strike, t, rate, div, call) -> np.ndarray:
    """py_lets_be_rational on the forward (undiscounted) price, one option at a time."""
    from py_lets_be_rational import implied_volatility_from_a_transformed_rational_guess as lbr

    out = np.empty(len(price))
    for i in range(len(price)):
        ti = float(t[i])
        fwd = float(spot[i]) * math.exp((float(rate[i]) - float(div[i])) * ti)
        undiscounted = float(price[i]) * math.exp(float(rate[i]) * ti)
        out[i] = lbr(undiscounted, fwd, float(strike[i]), ti, 1.0 if call[i] else -1.0)
    return out


def quantlib_iv_loop(price, spot, strike, t, rate, div, call) -> np.ndarray:
    """QuantLib's EuropeanOption.impliedVolatility, one option at a time (analytic engine).

    Times are whole days (Actual/365 Fixed from a fixed evaluation date), so the inputs given
    here should have t = days / 365 for the results to be comparable.
    """
    import QuantLib as ql

    today = ql.Date(21, 6, 2012)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    spot_q, r_q, q_q, v_q = ql.SimpleQuote(1.0), ql.SimpleQuote(0.0), ql.SimpleQuote(0.0), ql.SimpleQuote(0.2)
    process = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(spot_q),
        ql.YieldTermStructureHandle(ql.FlatForward(today, ql.QuoteHandle(q_q), dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, ql.QuoteHandle(r_q), dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), ql.QuoteHandle(v_q), dc)))
    out = np.empty(len(price))
    for i in range(len(price)):
        spot_q.setValue(float(spot[i]))
        r_q.setValue(float(rate[i]))
        q_q.setValue(float(div[i]))
        days = int(round(float(t[i]) * 365.0))
        payoff = ql.PlainVanillaPayoff(ql.Option.Call if call[i] else ql.Option.Put, float(strike[i]))
        option = ql.EuropeanOption(payoff, ql.EuropeanExercise(today + days))
        try:
            out[i] = option.impliedVolatility(float(price[i]), process, 1e-10, 500, 1e-4, 5.0)
        except RuntimeError:  # QuantLib throws where the root is not bracketed
            out[i] = math.nan
    return out


def numpy_surface_vol(strikes, expiries, vols, strike, t) -> np.ndarray:
    """Vol from a bilinear interpolation in total variance (zero at t = 0), NumPy.

    Flat in strike outside the grid, flat vol after the last expiry, variance linear in t
    before the first: the conventions of tickgpu.VolSurface(interpolation="variance").
    """
    k = np.clip(strike, strikes[0], strikes[-1])
    ik = np.clip(np.searchsorted(strikes, k, side="right") - 1, 0, strikes.size - 2)
    fk = (k - strikes[ik]) / (strikes[ik + 1] - strikes[ik])
    w = vols * vols * expiries[:, None]
    tt = np.clip(t, expiries[0], expiries[-1])
    it = np.clip(np.searchsorted(expiries, tt, side="right") - 1, 0, expiries.size - 2)
    ft = (tt - expiries[it]) / (expiries[it + 1] - expiries[it])
    w0 = w[it, ik] + (w[it, ik + 1] - w[it, ik]) * fk
    w1 = w[it + 1, ik] + (w[it + 1, ik + 1] - w[it + 1, ik]) * fk
    wt = w0 + (w1 - w0) * ft
    # Before the first expiry variance scales with t; after the last the vol is flat.
    var = np.where(t < expiries[0], wt * t / expiries[0], np.where(t > expiries[-1], wt / expiries[-1] * t, wt))
    return np.sqrt(var / t)


class PythonBook:
    """A price-level book in pure Python: {price: size} per side, LOBSTER event types.

    The best price of a side is cached and only searched for again when its level empties.
    """

    __slots__ = ("bids", "asks", "best_bid", "best_ask")

    def __init__(self):
        self.bids: dict[int, int] = {}
        self.asks: dict[int, int] = {}
        self.best_bid: int | None = None
        self.best_ask: int | None = None

    def apply(self, mtype: int, size: int, price: int, direction: int) -> None:
        if mtype == 1:
            if direction == 1:
                self.bids[price] = self.bids.get(price, 0) + size
                if self.best_bid is None or price > self.best_bid:
                    self.best_bid = price
            else:
                self.asks[price] = self.asks.get(price, 0) + size
                if self.best_ask is None or price < self.best_ask:
                    self.best_ask = price
        elif mtype in (2, 3, 4):
            side = self.bids if direction == 1 else self.asks
            left = side.get(price, 0) - size
            if left > 0:
                side[price] = left
            else:
                side.pop(price, None)
                if direction == 1 and price == self.best_bid:
                    self.best_bid = max(self.bids) if self.bids else None
                elif direction == -1 and price == self.best_ask:
                    self.best_ask = min(self.asks) if self.asks else None

    def set_top(self, ask_price: int, ask_size: int, bid_price: int, bid_size: int) -> None:
        """Make the best levels agree with a level-1 snapshot (what the file shows is the truth)."""
        self.asks = {p: s for p, s in self.asks.items() if p > ask_price} if ask_size > 0 else {}
        self.bids = {p: s for p, s in self.bids.items() if p < bid_price} if bid_size > 0 else {}
        if ask_size > 0:
            self.asks[ask_price] = ask_size
        if bid_size > 0:
            self.bids[bid_price] = bid_size
        self.best_ask = ask_price if ask_size > 0 else None
        self.best_bid = bid_price if bid_size > 0 else None

    def features(self) -> tuple[float, float, float]:
        """(mid, spread, imbalance at the best levels), NaN where a side is empty."""
        if self.best_bid is None or self.best_ask is None:
            return math.nan, math.nan, math.nan
        bs, as_ = self.bids[self.best_bid], self.asks[self.best_ask]
        return ((self.best_bid + self.best_ask) / 2, float(self.best_ask - self.best_bid),
                (bs - as_) / (bs + as_))


def python_replay(types, sizes, prices, directions, orderbook=None) -> tuple[int, float]:
    """Apply every message to a PythonBook and compute its features after each one; with a
    level-1 `orderbook` (rows of ask px, ask size, bid px, bid size) resynchronise the top
    whenever it disagrees. Returns (resyncs, last mid)."""
    book = PythonBook()
    resyncs = 0
    mid = math.nan
    types, sizes, prices, directions = (list(map(int, a)) for a in (types, sizes, prices, directions))
    rows = None if orderbook is None else orderbook[:, :4].tolist()
    for i in range(len(types)):
        book.apply(types[i], sizes[i], prices[i], directions[i])
        if rows is not None:
            ap, az, bp, bz = rows[i]
            top = (book.best_ask, book.asks.get(book.best_ask, 0), book.best_bid, book.bids.get(book.best_bid, 0))
            if top != ((ap if az > 0 else None), az, (bp if bz > 0 else None), bz):
                book.set_top(ap, az, bp, bz)
                resyncs += 1
        mid = book.features()[0]
    return resyncs, mid


def synthetic_stream(n: int, seed: int = 11) -> dict[str, np.ndarray]:
    """`n` consistent LOBSTER-style messages (submit, partial cancel, delete, execute) around a
    drifting mid of $100 (ticks of $0.0001, price grid of $0.01).

    Every cancel, delete and execution refers to a live order, and no order crosses the other
    side's best price (a PythonBook follows the stream to know it), so a correct book never
    rejects a message and never crosses.
    """
    rng = np.random.default_rng(seed)
    live: dict[int, list] = {}       # order id -> [price, size, direction]
    ids: list[int] = []
    next_id = 1
    mid = 1_000_000
    book = PythonBook()
    out = {k: np.empty(n, dtype=np.int64) for k in ("type", "order_id", "size", "price", "direction")}
    out["time"] = np.linspace(34200.0, 57600.0, n)
    u = rng.random(n)
    offs = rng.integers(1, 20, n)
    qty = rng.integers(1, 10, n) * 100
    side = rng.random(n) < 0.5
    pick = rng.random(n)
    for i in range(n):
        if u[i] < 0.5 or len(ids) < 50:
            direction = 1 if side[i] else -1
            if direction == 1:
                price = mid - 100 * int(offs[i])
                if book.best_ask is not None:
                    price = min(price, book.best_ask - 100)
            else:
                price = mid + 100 * int(offs[i])
                if book.best_bid is not None:
                    price = max(price, book.best_bid + 100)
            live[next_id] = [price, int(qty[i]), direction]
            ids.append(next_id)
            row = (1, next_id, int(qty[i]), price, direction)
            next_id += 1
        else:
            j = int(pick[i] * len(ids))
            oid = ids[j]
            price, size, direction = live[oid]
            kind = 2 if (u[i] < 0.7 and size > 100) else (3 if u[i] < 0.9 else 4)
            take = 100 if (kind == 2 or (kind == 4 and size > 100 and pick[i] * 1000 % 1 < 0.5)) else size
            if take >= size:
                del live[oid]
                ids[j] = ids[-1]
                ids.pop()
            else:
                live[oid][1] = size - take
            row = (kind, oid, take, price, direction)
        book.apply(row[0], row[2], row[3], row[4])
        for k, v in zip(("type", "order_id", "size", "price", "direction"), row):
            out[k][i] = v
        if i % 1000 == 999:
            mid += 100 * int(rng.integers(-2, 3))
    return out
