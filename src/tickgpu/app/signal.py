"""The shipped signal model on a live order book: its features, message by message, and its step.

The model (``tickgpu/data/quant_signal_mlp.npz``; LayerNorm -> Linear(12, 32) -> GELU ->
Linear(32, 32) -> GELU -> Linear(32, 1)) predicts the mid-price change over the next 50 events, in
basis points, from twelve causal features of a level-1 LOBSTER book (scripts/train_quant_models.py
trains it). This module defines those features once, for both uses:

* :func:`signal_features`: every event of a day at once (the training script's form);
* :class:`SignalFeed`: one event at a time, as a tick loop sees them, giving the same numbers
  (a test holds the two equal to the bit on the bundled day), then standardized causally and
  clipped as in training, into a (1, 12) float32 row that the model step reads in place.

Features at event i use events <= i only. Prices and sizes are LOBSTER's: prices in units of
1e-4 currency, sizes in shares.
"""
from __future__ import annotations

import math
from importlib import resources

import numpy as np

FEATURES = ("spread_cents", "imbalance", "log_size_ratio", "ret_1", "ret_5", "ret_20", "ret_100",
            "flow_ema_0.9", "flow_ema_0.99", "submissions_ema", "deletions_ema", "log_ms_since_last")
HORIZON = 50          # events ahead of the predicted mid change
RETURNS = (1, 5, 20, 100)
FLOW_ALPHAS = (0.9, 0.99)
COUNT_ALPHA = 0.95
STANDARDIZER_ALPHA = 0.999   # tickgpu.quant.EmaStandardizer's alpha in training
CLIP = 8.0


def _ema(x, alpha):
    out = np.empty_like(x)
    acc = 0.0
    for i, v in enumerate(x):
        acc = alpha * acc + (1 - alpha) * v
        out[i] = acc
    return out


def signal_features(time, etype, size, direction, ask, ask_size, bid, bid_size):
    """The (n, 12) float64 features of n events (columns :data:`FEATURES`), row i from events <= i:
    LOBSTER message columns (time, type, size, direction) and level-1 book columns after each
    message (ask, ask size, bid, bid size)."""
    t = np.asarray(time, np.float64)
    etype = np.asarray(etype).astype(int)
    size, direction = np.asarray(size, np.float64), np.asarray(direction, np.float64)
    ask, ask_sz = np.asarray(ask, np.float64), np.asarray(ask_size, np.float64)
    bid, bid_sz = np.asarray(bid, np.float64), np.asarray(bid_size, np.float64)
    logmid = np.log(0.5 * (ask + bid))
    n = len(logmid)

    def past_ret(k):
        r = np.zeros(n)
        r[k:] = (logmid[k:] - logmid[:-k]) * 1e4
        return r

    execution = np.isin(etype, (4, 5))
    # an executed sell limit order (direction -1) is a buyer-initiated trade
    signed_flow = np.where(execution, -direction * size, 0.0)
    return np.column_stack([
        (ask - bid) / 100.0,                                   # spread in cents
        (bid_sz - ask_sz) / (bid_sz + ask_sz),                 # level-1 imbalance
        np.log(bid_sz) - np.log(ask_sz),
        *(past_ret(k) for k in RETURNS),
        *(_ema(signed_flow, a) for a in FLOW_ALPHAS),
        _ema((etype == 1).astype(float), COUNT_ALPHA),         # submissions
        _ema((etype == 3).astype(float), COUNT_ALPHA),         # deletions
        np.log1p(np.diff(t, prepend=t[0]) * 1e3),              # ms since the previous event
    ])


def load_model(scheme: str = "w8a16", backend: str = "auto"):
    """The shipped signal model as a :class:`tickgpu.quant.QuantMLP`."""
    from tickgpu.quant import QuantMLP

    with resources.files("tickgpu").joinpath("data/quant_signal_mlp.npz").open("rb") as f:
        sd = dict(np.load(f))
    layers = [(sd[f"{i}.weight"], sd[f"{i}.bias"]) for i in (1, 3, 5)]
    return QuantMLP(layers, layernorm=(sd["0.weight"], sd["0.bias"]), scheme=scheme, backend=backend)


class SignalFeed:
    """The model's input, kept current one event at a time.

    ``update(...)`` takes one LOBSTER message and the level-1 book after it, computes the twelve
    features (:func:`signal_features`' numbers for the same events), standardizes them by the EMA
    mean and variance of the events before (:class:`tickgpu.quant.EmaStandardizer`'s rule, alpha
    0.999), clips to +-8 and writes them into ``x``, a (1, 12) float32 array that a bound model step
    (``model.bind(feed.x)``) reads in place. ``raw`` holds the unstandardized float64 features.
    ``ready`` is False while a feature is not finite (an empty side of the book): the model has
    nothing to read then. ``logmid`` lists every event's log mid (for the realized change the
    model predicts).
    """

    def __init__(self):
        self.x = np.zeros((1, len(FEATURES)), np.float32)
        self.raw = [0.0] * len(FEATURES)
        self.ready = False
        self.logmid: list[float] = []
        self._prev_t = None
        self._flow = [0.0] * len(FLOW_ALPHAS)
        self._sub = self._del = 0.0
        self._mean: list[float] | None = None
        self._var: list[float] = []

    def update(self, time: float, etype: int, size: float, direction: float,
               ask: float, ask_size: float, bid: float, bid_size: float) -> None:
        """Take event i (its message, and the level-1 book after it)."""
        mid = 0.5 * (ask + bid)
        lm = math.log(mid) if mid > 0 else math.nan
        log_ratio = (math.log(bid_size) if bid_size > 0 else -math.inf) - (
            math.log(ask_size) if ask_size > 0 else -math.inf)
        hist = self.logmid
        hist.append(lm)
        n = len(hist)
        flow = -direction * size if etype in (4, 5) else 0.0
        for j, a in enumerate(FLOW_ALPHAS):
            self._flow[j] = a * self._flow[j] + (1 - a) * flow
        a = COUNT_ALPHA
        self._sub = a * self._sub + (1 - a) * (1.0 if etype == 1 else 0.0)
        self._del = a * self._del + (1 - a) * (1.0 if etype == 3 else 0.0)
        gap = 0.0 if self._prev_t is None else time - self._prev_t
        self._prev_t = time
        total = bid_size + ask_size
        raw = self.raw
        raw[0] = (ask - bid) / 100.0
        raw[1] = (bid_size - ask_size) / total if total else math.nan
        raw[2] = log_ratio
        for j, k in enumerate(RETURNS):
            raw[3 + j] = (lm - hist[n - 1 - k]) * 1e4 if n > k else 0.0
        raw[7], raw[8] = self._flow
        raw[9], raw[10] = self._sub, self._del
        raw[11] = math.log1p(gap * 1e3)
        self._standardize(raw)

    def _standardize(self, raw) -> None:
        # EmaStandardizer.transform on one row, in the same operations (a test holds them equal).
        a = STANDARDIZER_ALPHA
        x = self.x[0]
        ok_all = True
        if self._mean is None:
            self._mean = [v if math.isfinite(v) else math.nan for v in raw]
            self._var = [0.0 if math.isfinite(v) else math.nan for v in raw]
            for j, v in enumerate(raw):
                ok = math.isfinite(v)
                ok_all &= ok
                x[j] = 0.0 if ok else math.nan
            self.ready = ok_all
            return
        mean, var = self._mean, self._var
        for j, v in enumerate(raw):
            m, s2 = mean[j], var[j]
            if not math.isfinite(v):
                x[j] = math.nan
                ok_all = False
                continue
            if math.isnan(m):      # a feature's first finite value: no past yet
                z = 0.0
                mean[j], var[j] = v, 0.0
            else:
                z = (v - m) / max(math.sqrt(s2), 1e-12)
                d = v - m
                mean[j] = m + (1 - a) * d
                var[j] = a * (s2 + (1 - a) * d * d)
            x[j] = min(max(z, -CLIP), CLIP)
        self.ready = ok_all


# The day the shipped model was trained on, and how (scripts/train_quant_models.py): events 200 to
# n - HORIZON - 1 of it have a target, the first 70% of those are the training set.
TRAINED_ON = "AMZN_2012-06-21_34200000_57600000_message_1.csv"
WARMUP_EVENTS = 200
TRAIN_FRACTION = 0.7


def training_events(n_events: int) -> int:
    """On the training day of `n_events` events, the first event after the training set: a
    prediction at an earlier event was fitted, not forecast."""
    usable = max(0, n_events - HORIZON - WARMUP_EVENTS)
    return WARMUP_EVENTS + int(TRAIN_FRACTION * usable)


def realized_change(logmid, at) -> np.ndarray:
    """The mid change in basis points from each event in `at` to HORIZON events later (NaN where
    the replay ends first): what the model predicts at those events."""
    lm = np.asarray(logmid, np.float64)
    at = np.asarray(at, np.int64)
    out = np.full(at.shape, np.nan)
    ok = at + HORIZON < len(lm)
    out[ok] = (lm[at[ok] + HORIZON] - lm[at[ok]]) * 1e4
    return out
