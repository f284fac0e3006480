"""The shipped signal model on a live order book: its features, message by message, and its step.

The model (``tickgpu/data/quant_signal_mlp.npz``; LayerNorm -> Linear(12, 32) -> GELU ->
Linear(32, 32) -> GELU -> Linear(32, 1)) predicts the mid-price change over the next 50 events, in
basis points, from twelve causal features of a level-1 LOBSTER book (scripts/train_quant_models.py
trains it). This module defines those features once, for both uses:

* :func:`signal_features`: every event of a day at once (the training script's form);
* :class:`SignalFeed`: one event at a time, as a tick loop sees them (the native core's
  ``tg_signal_update``), giving the same numbers (a test holds them equal on the bundled day: the
  float64 features to the last ulps of a logarithm, libm's against NumPy's), then standardized
  causally and clipped as in training, into a (1, 12) float32 row that the model step reads in
  place (bit for bit the training rows, which a test also checks).

Features at event i use events <= i only. Prices and sizes are LOBSTER's: prices in units of
1e-4 currency, sizes in shares; a side of size 0 is empty (LOBSTER writes a sentinel price there),
and an event with an empty side has no mid and no spread (NaN), so the model is not asked.
"""
from __future__ import annotations

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
    # an empty side (LOBSTER: a sentinel price, size 0) leaves no mid and no spread
    quoted = (ask_sz > 0) & (bid_sz > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        logmid = np.where(quoted, np.log(np.where(quoted, 0.5 * (ask + bid), 1.0)), np.nan)
    n = len(logmid)

    def past_ret(k):
        r = np.zeros(n)
        r[k:] = (logmid[k:] - logmid[:-k]) * 1e4
        return r

    execution = np.isin(etype, (4, 5))
    # an executed sell limit order (direction -1) is a buyer-initiated trade
    signed_flow = np.where(execution, -direction * size, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        imbalance = (bid_sz - ask_sz) / (bid_sz + ask_sz)
        log_ratio = np.log(bid_sz) - np.log(ask_sz)
    return np.column_stack([
        np.where(quoted, (ask - bid) / 100.0, np.nan),         # spread in cents
        imbalance,                                             # level-1 imbalance
        log_ratio,
        *(past_ret(k) for k in RETURNS),
        *(_ema(signed_flow, a) for a in FLOW_ALPHAS),
        _ema((etype == 1).astype(float), COUNT_ALPHA),         # submissions
        _ema((etype == 3).astype(float), COUNT_ALPHA),         # deletions
        np.log1p(np.diff(t, prepend=t[0]) * 1e3),              # ms since the previous event
    ])


def shipped_weights():
    """The shipped model's float weights: ([(weight, bias)] of its three Linear layers, (gamma, beta)
    of its LayerNorm)."""
    with resources.files("tickgpu").joinpath("data/quant_signal_mlp.npz").open("rb") as f:
        sd = dict(np.load(f))
    return [(sd[f"{i}.weight"], sd[f"{i}.bias"]) for i in (1, 3, 5)], (sd["0.weight"], sd["0.bias"])


def load_model(scheme: str = "w8a16", backend: str = "auto"):
    """The shipped signal model as a :class:`tickgpu.quant.QuantMLP`."""
    from tickgpu.quant import QuantMLP

    layers, ln = shipped_weights()
    return QuantMLP(layers, layernorm=ln, scheme=scheme, backend=backend)


class SignalFeed:
    """The model's input, kept current one event at a time (the native core's ``tg_signal_update``).

    ``update(...)`` takes one LOBSTER message and the level-1 book after it, computes the twelve
    features (:func:`signal_features`' numbers for the same events), standardizes them by the EMA
    mean and variance of the events before (:class:`tickgpu.quant.EmaStandardizer`'s rule, alpha
    0.999), clips to +-8 and writes them into ``x``, a (1, 12) float32 array that a bound model step
    (``model.bind(feed.x)``) reads in place. ``raw`` gives the unstandardized float64 features.
    ``ready`` is False while a feature is not finite (an empty side of the book; a return reaching
    back to an event without a mid): the model has nothing to read then. ``logmid`` lists every
    event's log mid (for the realized change the model predicts).
    """

    def __init__(self):
        from tickgpu._native import ffi, lib

        self.x = np.zeros((1, len(FEATURES)), np.float32)
        self.ready = False
        self.logmid: list[float] = []
        self._state = ffi.new("tg_signal_feed *")
        self._x = ffi.cast("float *", ffi.from_buffer(self.x))
        self._lm = ffi.new("double *")
        self._update = lib.tg_signal_update

    @property
    def raw(self) -> list[float]:
        return list(self._state.raw)

    def update(self, time: float, etype: int, size: float, direction: float,
               ask: float, ask_size: float, bid: float, bid_size: float) -> None:
        """Take the next event (its message, and the level-1 book after it)."""
        self.ready = self._update(self._state, time, etype, size, direction, ask, ask_size, bid, bid_size,
                                  self._x, self._lm) == 1
        self.logmid.append(self._lm[0])


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
