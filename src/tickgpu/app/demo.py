"""`tickgpu demo`: a market maker's loop over a day of real order-book messages.

Every LOBSTER message updates the book and its features, and the shipped quantized signal
model's twelve causal features (:mod:`tickgpu.app.signal`). On every *underlying tick* -- a
message after which the book's mid price differs from the mid before it (both sides quoted) --
the signal model predicts the mid change over the next 50 events (W8A16; on the GPU, a step bound
to the features' array), and an option chain on the underlying is repriced:

1. surface: each option's vol from a :class:`tickgpu.VolSurface` whose strike axis is moneyness
   K / mid, built once with a skew and a smile around the opening mid (sticky moneyness);
2. greeks: price and the full set of greeks with :func:`tickgpu.greeks`;
3. quotes: a simulated market quote per option, the model price moved by a deterministic fraction
   of a half-spread (not library work, timed so that the total adds up);
4. implied vol: :func:`tickgpu.implied_vol` solves the vols back from those quotes.

The solved vols are checked against the model vols plus the first-order effect of the quote's
offset (offset / vega), so a solver error cannot hide behind the noise; the signal's predictions are
scored against the mid changes that followed them (their correlation, the information coefficient).
Every stage is timed with
``time.perf_counter_ns`` and the report (table, JSON, HTML with histograms) says which backend ran
each operation.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import time
from importlib import resources
from pathlib import Path

import numpy as np

import tickgpu
from tickgpu import dispatch

SECONDS_PER_YEAR = 365.0 * 86400.0     # calendar time, the unit of t and theta
RATE, DIV = 0.0025, 0.0                # mid-2012 USD short rate; AMZN paid no dividend
HALF_SPREAD = 0.05                     # dollars: a typical equity-option half-spread
QUOTE_OFFSET_CAP = 0.01                # offset at most 1 % of the time value, so quotes stay arbitrage-free
DEFAULT_MESSAGES = "AMZN_2012-06-21_34200000_57600000_message_1.csv"
STAGES = ("book", "features", "signal", "surface", "greeks", "quotes", "implied_vol", "tick_total")
SIGNAL_SCHEME = "w8a16"
UNDERLYING_TICK = ("a message after which the book's mid price ((best bid + best ask) / 2) differs from the "
                   "mid before it, both sides quoted")
# Vols solved from quotes must match vol + offset/vega to this many vol points once the
# second-order term is removed (the rest is third order in the offset and the solver's error).
IV_CHECK_TOL = 1e-6


# ---- data -----------------------------------------------------------------------------------------

class DataError(ValueError):
    """The input files cannot be replayed (unreadable, malformed, inconsistent or empty) or give
    nothing to reprice (no underlying tick, prices too small for a chain to the cent). The
    message names the file and, where there is one, the line or orderbook row; `tickgpu demo`
    prints it and exits 2, as for a missing file."""


def bundled_data(name: str) -> Path:
    """Path of a LOBSTER sample shipped in tickgpu/data."""
    p = Path(str(resources.files("tickgpu").joinpath("data", name)))
    if not p.is_file():
        raise FileNotFoundError(f"bundled data file {name} is missing from {p.parent}")
    return p


def resolve_data(message: str | None, orderbook: str | None) -> tuple[Path, Path | None]:
    """The message file (bundled AMZN day by default) and its orderbook file.

    Without --orderbook the orderbook file is looked for beside the message file under LOBSTER's
    naming (``_message_`` -> ``_orderbook_``); None if it is not there.
    """
    msg = _input_file("--data", Path(message)) if message else bundled_data(DEFAULT_MESSAGES)
    if orderbook:
        return msg, _input_file("--orderbook", Path(orderbook))
    guess = msg.with_name(msg.name.replace("_message_", "_orderbook_"))
    if guess == msg or not guess.is_file():
        return msg, None
    return msg, _input_file("the orderbook file beside --data", guess)


def _input_file(option: str, path: Path) -> Path:
    """`path` if it is a file this process can read; else an OSError saying what it is instead
    (FileNotFoundError, IsADirectoryError) or why it cannot be read, naming `option`."""
    from tickgpu.cli import unreadable_file

    why = unreadable_file(path)
    if why is not None:
        raise why[0](f"{option}: {why[1]}")
    return path


# ---- the option chain and its surface -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OptionChain:
    """A listed chain, one row per option: strike ($), expiry at the open (years), call flag."""

    strike: np.ndarray
    expiry: np.ndarray
    call: np.ndarray
    n_expiries: int
    n_strikes: int

    @property
    def size(self) -> int:
        return int(self.strike.size)


def build_chain(open_mid: float, n_expiries: int, n_strikes: int) -> OptionChain:
    """Strikes from 70 % to 130 % of the opening mid (to the cent), expiries from one week to two
    years (geometric), each strike as a call and a put."""
    strikes = np.round(np.linspace(0.7, 1.3, n_strikes) * open_mid, 2)
    expiries = np.geomspace(7.0 / 365.0, 2.0, n_expiries)
    e, k, c = np.meshgrid(expiries, strikes, np.array([True, False]), indexing="ij")
    return OptionChain(np.ascontiguousarray(k.ravel()), np.ascontiguousarray(e.ravel()),
                       np.ascontiguousarray(c.ravel()), n_expiries, n_strikes)


def smile_vol(moneyness: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A single-name equity smile: ATM term structure falling from ~40 % to ~28 %, a put skew
    that flattens with maturity, and a little curvature. Moneyness is K / S."""
    x = np.log(moneyness)
    atm = 0.28 + 0.12 * np.exp(-t / 0.25)
    skew = -0.25 / np.sqrt(1.0 + t / 0.25)
    return np.maximum(atm + skew * x + 0.35 * x * x, 0.05)


def build_surface() -> tickgpu.VolSurface:
    """The day's surface in moneyness: 31 moneyness points x 10 expiries, variance-interpolated."""
    m = np.linspace(0.5, 1.6, 31)
    t = np.array([1, 2, 4, 8, 13, 26, 39, 52, 78, 104], dtype=np.float64) * 7.0 / 365.0
    vols = smile_vol(m[None, :], t[:, None])
    return tickgpu.VolSurface(m, t, vols, interpolation="variance")


# ---- the book -------------------------------------------------------------------------------------

class BookFeed:
    """The book, fed one message at a time, with its features after each message.

    A level-L LOBSTER file cannot carry everything a book needs (the opening book; a level that
    moves into the window from outside it), so where an orderbook file is given each message is
    followed by a check of the book's L-level window against the file's row, and a resync from
    the row where they differ (counted). A message the book rejects is counted, not fatal.
    """

    def __init__(self, data):
        self.book = tickgpu.Book()
        self.orderbook_path = data.orderbook_path
        m = data.messages
        self.n = len(m)
        # Python lists: indexing a NumPy array per message costs more than the book update.
        self._fields = [m[k].tolist() for k in ("type", "size", "price", "direction")]
        self._time = m["time"].tolist()
        self.rows = data.orderbook
        self.levels = int(data.levels) if data.orderbook is not None else 0
        # The file's level-1 columns (ask, ask size, bid, bid size) as floats, for the signal feed.
        self._level1 = (None if data.orderbook is None else
                        [data.orderbook[:, k].astype(np.float64).tolist() for k in range(4)])
        self.resyncs = 0
        self.rejected = 0
        self.last = None

    def step(self, i: int) -> float:
        """Apply message i, check the book against the file's row and compute the features (one
        native call, `Book.step`); return the mid in dollars (NaN if a side is empty)."""
        ty, size, price, direction = self._fields
        try:
            self.last, code, resynced = self.book.step(ty[i], size[i], price[i], direction[i],
                                                       self.rows[i] if self.levels else None)
        except ValueError as e:   # the orderbook row is not a book (the message's own faults are codes)
            raise DataError(f"{self.orderbook_path}, orderbook row {i}: {str(e).removeprefix('row: ')}") from e
        if code:
            self.rejected += 1
        if resynced:
            self.resyncs += 1
        return float(self.last.mid)

    def time_of(self, i: int) -> float:
        return self._time[i]

    def level1(self, i: int) -> tuple[float, float, float, float]:
        """(ask, ask size, bid, bid size) after message i, prices in LOBSTER's units (1e-4): the
        orderbook file's row where there is one, else the replayed book's best levels."""
        if self._level1 is not None:
            a, az, b, bz = self._level1
            return a[i], az[i], b[i], bz[i]
        ask, ask_size, bid, bid_size = self.book.snapshot(1)[0].tolist()   # LOBSTER's own row encoding
        return float(ask), float(ask_size), float(bid), float(bid_size)

    def signal_update(self, feed, i: int) -> None:
        """Message i and the level-1 book after it into the signal model's features."""
        ty, size, _, direction = self._fields
        feed.update(self._time[i], ty[i], size[i], direction[i], *self.level1(i))


# ---- the loop -------------------------------------------------------------------------------------

@dataclasses.dataclass
class DemoResult:
    report: dict
    samples_ns: dict[str, np.ndarray]


def _check_times(path: Path, t: np.ndarray) -> None:
    """DataError unless the message times are in order and within one day: LOBSTER's times are
    seconds after midnight of one trading day. Times that run backwards, or jump past the chain's
    first expiry (a week), would reprice options at the wrong (or a negative) time to expiry, and
    the vol check would fail on the file rather than on the library."""
    back = np.flatnonzero(t[1:] < t[:-1])
    if back.size:
        k = int(back[0]) + 1       # 0-based index of the first message earlier than the one before it
        raise DataError(f"{path}: message {k + 1:,} is at {t[k]:.9g} s, before message {k:,} at {t[k - 1]:.9g} s "
                        "(LOBSTER times are seconds after midnight, in order)")
    span = float(t[-1] - t[0])
    if span > 86400.0:
        raise DataError(f"{path}: its message times span {span:,.0f} s, more than a day (LOBSTER times are seconds "
                        "after midnight of one trading day)")


def _check_accumulate(acc: dict, iv: np.ndarray, status: np.ndarray, vol: np.ndarray, offset: np.ndarray,
                      g) -> None:
    """Compare solved vols with vol + offset/vega - 1/2 volga/vega (offset/vega)^2."""
    dv = offset / g.vega
    predicted = vol + dv - 0.5 * g.volga / g.vega * dv * dv
    ok = status == int(tickgpu.IVStatus.OK)
    acc["non_ok"] += int(ok.size - np.count_nonzero(ok))
    if np.any(ok):
        acc["max_abs_vol_error"] = max(acc["max_abs_vol_error"], float(np.max(np.abs(iv[ok] - vol[ok]))))
        acc["max_abs_residual"] = max(acc["max_abs_residual"], float(np.max(np.abs(iv[ok] - predicted[ok]))))
    acc["checked"] += int(ok.size)


def run_demo(message_path: Path, orderbook_path: Path | None, *, backend: str = "auto", ticks: int = 2000,
             n_strikes: int = 100, n_expiries: int = 12, progress=None) -> DemoResult:
    """Replay, reprice on every underlying tick, and time each stage; see the module docstring.

    `ticks` underlying ticks are replayed (0: the whole file). `progress(done, total)` is called
    now and then. Raises BackendUnavailable if `backend` is "gpu" and no GPU is usable, and
    DataError if the files cannot be read or replayed, the message times run backwards or span
    more than a day, the book never has both sides quoted, the prices are so small that the
    chain's strikes round to $0.00, or the file has no underlying tick.
    """
    # Decided first: an unusable backend should fail before any data is read.
    n_opt = n_expiries * n_strikes * 2
    backends = {"book": "cpu", "features": "cpu",
                "surface": dispatch.choose("surface", n_opt, backend),
                "greeks": dispatch.choose("greeks", n_opt, backend),
                "implied_vol": dispatch.choose("implied_vol", n_opt, backend),
                "signal": dispatch.choose("quant_mlp", 1, backend)}
    try:
        data = tickgpu.read_lobster(str(message_path), str(orderbook_path) if orderbook_path else None)
    except (OSError, ValueError) as e:
        raise DataError(str(e)) from e
    if len(data) == 0:
        raise DataError(f"{message_path}: no messages")
    _check_times(message_path, data.messages["time"])
    feed = BookFeed(data)

    # The opening mid sets the listed strikes and the surface's moneyness axis: find it by
    # running the book until both sides are quoted, then start the replay from the top.
    open_mid = math.nan
    probe = BookFeed(data)
    for i in range(feed.n):
        open_mid = probe.step(i)
        if math.isfinite(open_mid):
            break
    if not math.isfinite(open_mid):
        raise DataError(f"{message_path}: the book never has both sides quoted")
    del probe
    chain = build_chain(open_mid, n_expiries, n_strikes)
    if chain.strike.min() <= 0.0:
        # A zero strike has no Black vol: every solved vol would be NaN and the check fail.
        raise DataError(f"{message_path}: the opening mid ${open_mid:.6g} is too small for a chain listed to the "
                        f"cent: its lowest strikes (70 % of the mid) round to $0.00 (prices are read as "
                        f"dollars x {feed.book.price_scale:,.0f}, LOBSTER's units)")
    surface = build_surface()
    assert chain.size == n_opt

    if "gpu" in backends.values() and hasattr(tickgpu, "warmup"):
        tickgpu.warmup()

    # The signal model reads the features' (1, 12) array in place: on the GPU a step bound to it.
    from tickgpu.app import signal

    features = signal.SignalFeed()
    model = signal.load_model(SIGNAL_SCHEME, backend=backends["signal"])
    if backends["signal"] == "gpu":
        predict = model.bind(features.x, check=False)
    else:
        def predict():
            return model(features.x, check=False)

    # Buffers reused on every tick, so the loop times the library rather than allocation.
    strike, call = chain.strike, chain.call
    put = ~call
    tau = np.empty(n_opt)
    moneyness = np.empty(n_opt)
    unit = np.empty(n_opt)               # deterministic offsets in [-1, 1)
    base_phase = np.modf(np.arange(1, n_opt + 1) * 0.6180339887498949)[0]
    intrinsic = np.empty(n_opt)
    offset = np.empty(n_opt)
    quote = np.empty(n_opt)
    disc_q, disc_r = np.empty(n_opt), np.empty(n_opt)
    # Forward intrinsic value w (S e^{-q tau} - K e^{-r tau}), tau = expiry - elapsed: the discount
    # factors at the open, made once; a tick scales them by e^{q elapsed} and e^{r elapsed}.
    open_q = np.exp(-DIV * chain.expiry)
    open_rk = strike * np.exp(-RATE * chain.expiry)
    sign = np.where(call, 1.0, -1.0)
    t0_day = feed.time_of(0)

    def reprice(mid: float, elapsed_s: float, tick: int):
        np.subtract(chain.expiry, elapsed_s / SECONDS_PER_YEAR, out=tau)
        c0 = time.perf_counter_ns()
        np.divide(strike, mid, out=moneyness)
        vol = surface.vol(moneyness, tau, backend=backend)
        c1 = time.perf_counter_ns()
        g = tickgpu.greeks(mid, strike, tau, RATE, vol, DIV, call, backend=backend)
        c2 = time.perf_counter_ns()
        # Quote = model price + u * min(half-spread, 1 % of time value), u in [-1, 1).
        years = elapsed_s / SECONDS_PER_YEAR
        np.multiply(open_q, mid * math.exp(DIV * years), out=disc_q)
        np.multiply(open_rk, math.exp(RATE * years), out=disc_r)
        np.subtract(disc_q, disc_r, out=intrinsic)
        np.multiply(intrinsic, sign, out=intrinsic)
        np.maximum(intrinsic, 0.0, out=intrinsic)
        np.subtract(g.price, intrinsic, out=offset)
        np.multiply(offset, QUOTE_OFFSET_CAP, out=offset)
        np.minimum(offset, HALF_SPREAD, out=offset)
        np.add(base_phase, tick * 0.3819660112501051, out=unit)
        np.modf(unit, out=(unit, quote))
        np.multiply(unit, 2.0, out=unit)
        np.subtract(unit, 1.0, out=unit)
        np.multiply(offset, unit, out=offset)
        np.add(g.price, offset, out=quote)
        c3 = time.perf_counter_ns()
        iv, status = tickgpu.implied_vol(quote, mid, strike, tau, RATE, DIV, call, backend=backend,
                                         return_status=True)
        c4 = time.perf_counter_ns()
        return (c1 - c0, c2 - c1, c3 - c2, c4 - c3), vol, g, iv, status

    for _ in range(5):                   # warm-up: first-call costs are not the steady state
        reprice(open_mid, 0.0, 0)
        predict()

    n_msg = feed.n
    book_ns = np.empty(n_msg, dtype=np.int64)
    features_ns = np.empty(n_msg, dtype=np.int64)
    cap = min(ticks, n_msg) if ticks > 0 else n_msg    # a tick is a message: no more ticks than messages
    chain_ns = np.empty((cap, 5), dtype=np.int64)     # surface, greeks, quotes, iv, total
    signal_ns = np.empty(cap, dtype=np.int64)
    signal_at = np.empty(cap, dtype=np.int64)         # the message each prediction was made after
    signal_pred = np.full(cap, np.nan)
    acc = {"non_ok": 0, "max_abs_vol_error": 0.0, "max_abs_residual": 0.0, "checked": 0}
    prev_mid = math.nan
    n_ticks = 0
    last = None
    total = cap
    check_ns = 0                         # the demo's own accuracy check, left out of the wall time
    wall0 = time.perf_counter()
    i = 0
    while i < n_msg:
        b0 = time.perf_counter_ns()
        mid = feed.step(i)
        b1 = time.perf_counter_ns()
        book_ns[i] = b1 - b0
        feed.signal_update(features, i)
        features_ns[i] = time.perf_counter_ns() - b1
        if math.isfinite(mid) and mid != prev_mid and math.isfinite(prev_mid):
            if features.ready:
                s0 = time.perf_counter_ns()
                signal_pred[n_ticks] = predict()[0, 0]
                signal_ns[n_ticks] = time.perf_counter_ns() - s0
            else:
                signal_ns[n_ticks] = -1        # not asked: an undefined feature (see SignalFeed)
            signal_at[n_ticks] = i
            stage, vol, g, iv, status = reprice(mid, feed.time_of(i) - t0_day, n_ticks)
            chain_ns[n_ticks, :4] = stage
            chain_ns[n_ticks, 4] = (time.perf_counter_ns() - b0)
            k0 = time.perf_counter_ns()
            _check_accumulate(acc, iv, status, vol, offset, g)
            check_ns += time.perf_counter_ns() - k0
            last = (mid, vol, g, iv)
            n_ticks += 1
            if ticks > 0 and progress is not None:
                progress(n_ticks, total)
        if math.isfinite(mid):
            prev_mid = mid
        i += 1
        if ticks > 0 and n_ticks >= ticks:
            break
        if ticks == 0 and progress is not None and (i & 255) == 0:
            progress(i, total)
    wall_s = time.perf_counter() - wall0 - check_ns * 1e-9
    if n_ticks == 0:    # (a positive --ticks stops only after a tick: the whole file was replayed)
        raise DataError(f"{message_path}: no underlying tick in its {i:,} messages ({UNDERLYING_TICK}): "
                        "nothing to reprice or check")
    if progress is not None:
        progress(total, total)
    n_replayed = i
    book_ns = book_ns[:n_replayed]
    features_ns = features_ns[:n_replayed]
    chain_ns = chain_ns[:n_ticks]
    signal_at, signal_pred = signal_at[:n_ticks], signal_pred[:n_ticks]
    signal_ns = signal_ns[:n_ticks][signal_ns[:n_ticks] >= 0]     # the ticks the model was asked at
    realized = signal.realized_change(features.logmid, signal_at)
    scored = np.isfinite(signal_pred) & np.isfinite(realized)
    # On the day the model was fitted to (known by the file's name), events 200 to about 70% of
    # the day were the training set.
    fitted_before = signal.training_events(n_msg) if message_path.name == signal.TRAINED_ON else 0
    forecast = scored & (signal_at >= fitted_before)

    def information_coefficient(mask):
        return float(np.corrcoef(signal_pred[mask], realized[mask])[0, 1]) if mask.sum() >= 3 else math.nan

    score = {"predictions": int(np.isfinite(signal_pred).sum()), "scored": int(scored.sum()),
             "information_coefficient": information_coefficient(scored), "fitted_before_message": fitted_before,
             "scored_out_of_sample": int(forecast.sum()),
             "information_coefficient_out_of_sample": information_coefficient(forecast)}

    from tickgpu.app.report import summarize_ns

    samples = {"book": book_ns, "features": features_ns, "signal": signal_ns, "surface": chain_ns[:, 0],
               "greeks": chain_ns[:, 1], "quotes": chain_ns[:, 2], "implied_vol": chain_ns[:, 3],
               "tick_total": chain_ns[:, 4]}
    stage_backend = {"book": "cpu", "features": "cpu", "signal": backends["signal"], "surface": backends["surface"],
                     "greeks": backends["greeks"], "quotes": "numpy", "implied_vol": backends["implied_vol"],
                     "tick_total": "-"}
    stages = {}
    for name in STAGES:
        s = summarize_ns(samples[name])
        s["backend"] = stage_backend[name]
        s["per"] = ("message" if name in ("book", "features") else
                    "underlying tick with every feature defined" if name == "signal" else "underlying tick")
        stages[name] = s

    passed = acc["non_ok"] == 0 and acc["max_abs_residual"] <= IV_CHECK_TOL and n_ticks > 0
    check = dict(acc, tolerance=IV_CHECK_TOL, passed=passed)
    check["summary"] = (
        f"{acc['checked']:,} vols solved; {acc['non_ok']} without a vol; max |solved - model vol| "
        f"{acc['max_abs_vol_error']:.2e} (the quote offsets' effect); max |solved - (model vol + "
        f"offset/vega, 2nd order)| {acc['max_abs_residual']:.2e} (tolerance {IV_CHECK_TOL:.0e}): "
        + ("passed" if passed else "FAILED"))

    from tickgpu.bench.common import machine_info

    report = {
        "tickgpu_version": tickgpu.__version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "note": (f"Replayed the first {ticks:,} underlying ticks (--ticks 0 replays the whole file)."
                 if 0 < ticks <= n_ticks else
                 f"Replayed the whole file: {n_ticks:,} underlying ticks of the {ticks:,} asked for."
                 if ticks > 0 else "Replayed the whole file."),
        "data": {"message_file": message_path.name, "orderbook_file": orderbook_path.name if orderbook_path else None,
                 "source": "LOBSTER sample (lobsterdata.com), NASDAQ" if message_path.parent == bundled_data(
                     DEFAULT_MESSAGES).parent else "user file",
                 "messages": n_replayed, "messages_in_file": n_msg, "open_mid": open_mid,
                 "book_resyncs_from_orderbook": feed.resyncs, "messages_rejected_by_book": feed.rejected},
        "definitions": {"underlying_tick": UNDERLYING_TICK,
                        "stages": {"book": "apply one message and compute the book features",
                                   "features": "the signal model's twelve features after the message, "
                                               "standardized causally (tickgpu.app.signal.SignalFeed)",
                                   "signal": f"the shipped signal model ({SIGNAL_SCHEME.upper()}) on the "
                                             "features: predicted mid change over the next "
                                             f"{signal.HORIZON} events, basis points",
                                   "surface": "moneyness K/mid and VolSurface.vol for every option",
                                   "greeks": "tickgpu.greeks: price + 9 greeks for every option",
                                   "quotes": "simulated quotes (NumPy, not library work)",
                                   "implied_vol": "tickgpu.implied_vol from the quotes, with status",
                                   "tick_total": "from the tick's message to its last implied vol "
                                                 "(book, features, signal and the chain)"},
                        "wall_s": "replay wall time, the demo's own vol check excluded",
                        "units": "microseconds"},
        "chain": {"options": n_opt, "expiries": n_expiries, "strikes": n_strikes,
                  "strike_range": [float(strike.min()), float(strike.max())],
                  "expiry_range_years": [float(chain.expiry.min()), float(chain.expiry.max())],
                  "rate": RATE, "div": DIV, "half_spread": HALF_SPREAD},
        "backend_requested": backend,
        "backends": backends,
        "stages": stages,
        "throughput": {"ticks": n_ticks, "messages": n_replayed, "wall_s": wall_s,
                       "ticks_per_s": n_ticks / wall_s if wall_s > 0 else math.nan,
                       "messages_per_s": n_replayed / wall_s if wall_s > 0 else math.nan,
                       "tick_capacity_per_s": 1e6 / stages["tick_total"]["mean_us"] if n_ticks else math.nan},
        "iv_check": check,
        "signal": {"summary": _signal_summary(SIGNAL_SCHEME, backends["signal"], score),
                   "model": "LayerNorm -> Linear(12, 32) -> GELU -> Linear(32, 32) -> GELU -> Linear(32, 1), "
                            "tickgpu/data/quant_signal_mlp.npz", "scheme": SIGNAL_SCHEME,
                   "backend": backends["signal"], **score,
                   "definition": f"correlation of each prediction with the mid change over the {signal.HORIZON} "
                                 "events that followed it (log mid, basis points); predictions whose horizon "
                                 "runs past the replay are not scored; out of sample: after the events the "
                                 "model was fitted to (events 200 to fitted_before_message of its training "
                                 f"day, {signal.TRAINED_ON}, recognized by the file's name; 0 for any other "
                                 "file)"},
        "last_tick": None if last is None else {
            "mid": last[0], "microprice": float(feed.last.microprice), "spread": float(feed.last.spread),
            "imbalance": float(feed.last.imbalance),
            "front_atm_call_delta": float(last[2].delta[np.argmin(
                np.abs(strike[:2 * n_strikes] - last[0]) + put[:2 * n_strikes] * 1e9)])},
        "machine": machine_info(),
    }
    return DemoResult(report, samples)


def _signal_summary(scheme, backend, s: dict) -> str:
    """One line on the signal model's run from its report entries: predictions and how they scored."""
    from tickgpu.app.signal import HORIZON

    if not s["scored"]:
        text = f"none scored (no prediction had its next {HORIZON} events replayed)"
    else:
        text = (f"information coefficient {s['information_coefficient']:.3f} over the {s['scored']:,} "
                f"whose next {HORIZON} events were replayed")
        if s["scored_out_of_sample"]:
            text += (f"; out of sample {s['information_coefficient_out_of_sample']:.3f} over "
                     f"{s['scored_out_of_sample']:,}")
        elif s["fitted_before_message"]:
            text += f"; all before message {s['fitted_before_message']:,}, in the data the model was fitted to"
    return f"signal model ({scheme}, {backend}): {s['predictions']:,} predictions, {text}"


# ---- the command ----------------------------------------------------------------------------------

def print_table(report: dict, console) -> None:
    from rich.table import Table

    th = report["throughput"]
    t = Table(title=f"tickgpu demo: {report['data']['message_file']}, {report['chain']['options']:,} options, "
                    f"{th['ticks']:,} underlying ticks", title_justify="left")
    for col in ("stage", "backend", "samples", "p50", "p99", "p99.9", "mean"):
        t.add_column(col, justify="left" if col in ("stage", "backend") else "right", no_wrap=True)
    for name, s in report["stages"].items():
        t.add_row(name, s["backend"], f"{s['n']:,}", *(
            "-" if not math.isfinite(s[k]) else f"{s[k]:.1f}" for k in ("p50_us", "p99_us", "p99.9_us", "mean_us")))
    t.caption = "microseconds; book and features per message, the other stages per underlying tick"
    console.print(t)
    console.print(f"{th['ticks']:,} ticks and {th['messages']:,} messages in {th['wall_s']:.2f} s: "
                  f"{th['ticks_per_s']:,.0f} ticks/s, {th['messages_per_s']:,.0f} messages/s "
                  f"(capacity at the mean tick cost: {th['tick_capacity_per_s']:,.0f} ticks/s)")
    console.print(report["signal"]["summary"])
    c = report["iv_check"]
    style = "green" if c["passed"] else "red"
    console.print(f"[{style}]implied vol check: {c['summary']}[/{style}]")
    console.print(f"underlying tick = {report['definitions']['underlying_tick']}. {report['note']}")


def main(args) -> int:
    """`tickgpu demo` (arguments from cli.build_parser). 0 on success, 1 if the vol check failed,
    2 if the input files are missing, cannot be replayed or give nothing to reprice (DataError),
    the chain does not fit in memory or the report cannot be written (a message, no traceback),
    3 if the asked backend is unavailable."""
    from rich.console import Console
    from rich.markup import escape

    from tickgpu.app.report import write_report
    from tickgpu.errors import BackendUnavailable

    console = Console(stderr=False, quiet=args.quiet)
    try:
        msg, ob = resolve_data(args.data, args.orderbook)
    except OSError as e:    # no such file, a directory, not a regular file
        Console(stderr=True).print(f"[red]tickgpu demo: {escape(str(e))}[/red]")
        return 2
    try:
        if args.quiet:
            result = run_demo(msg, ob, backend=args.backend, ticks=args.ticks, n_strikes=args.strikes,
                              n_expiries=args.expiries)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            what = "underlying ticks" if args.ticks > 0 else "messages"
            with Progress(TextColumn("[bold]replaying[/bold] " + what), BarColumn(), MofNCompleteColumn(),
                          TimeRemainingColumn(), console=console, transient=True) as bar:
                task = bar.add_task("replay", total=None)

                def progress(done, total):
                    bar.update(task, completed=done, total=total)

                result = run_demo(msg, ob, backend=args.backend, ticks=args.ticks, n_strikes=args.strikes,
                                  n_expiries=args.expiries, progress=progress)
    except DataError as e:
        Console(stderr=True).print(f"[red]tickgpu demo: {escape(str(e))}[/red]")
        return 2
    except BackendUnavailable as e:
        Console(stderr=True).print(f"[red]tickgpu demo: {escape(str(e))}[/red]")
        return 3
    except MemoryError:
        Console(stderr=True).print(f"[red]tickgpu demo: out of memory for a chain of --strikes {args.strikes:,} x "
                                   f"--expiries {args.expiries:,}; ask for fewer[/red]")
        return 2
    try:
        jpath, hpath = write_report(args.out, result.report, result.samples_ns)
    except OSError as e:   # --out was checked up front; this is a full disk or a race
        Console(stderr=True).print(f"[red]tickgpu demo: --out: cannot write the report: {escape(str(e))}[/red]")
        return 2
    print_table(result.report, console)
    console.print(f"report: {jpath}  {hpath}")
    check = result.report["iv_check"]
    if not check["passed"] and args.quiet:   # the table says it; --quiet must not make exit 1 silent
        Console(stderr=True).print(f"[red]tickgpu demo: implied vol check: {escape(check['summary'])}; "
                                   f"report: {escape(str(jpath))}[/red]")
    return 0 if check["passed"] else 1
