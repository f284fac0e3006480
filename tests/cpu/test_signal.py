"""tickgpu.app.signal: the shipped signal model's features, one event at a time, against the whole-day
form the model was trained on; and the demo's signal stage without an orderbook file."""
from pathlib import Path

import numpy as np
import pytest

from tickgpu.app import signal
from tickgpu.quant import EmaStandardizer

DATA = Path(__file__).resolve().parents[2] / "src" / "tickgpu" / "data"
MSG = DATA / "AMZN_2012-06-21_34200000_57600000_message_1.csv"
BOOK = DATA / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv"


@pytest.fixture(scope="module")
def day():
    rows = 6000
    msg = np.loadtxt(MSG, delimiter=",", skiprows=1, max_rows=rows)
    book = np.loadtxt(BOOK, delimiter=",", skiprows=1, max_rows=rows)
    return msg, book


def test_streaming_features_are_the_training_features(day):
    """Event by event, SignalFeed gives signal_features' numbers (to the last few ulps of a log),
    standardized and clipped as training did (EmaStandardizer, alpha 0.999; +-8) into the float32
    row the model reads."""
    msg, book = day
    raw = signal.signal_features(msg[:, 0], msg[:, 1], msg[:, 3], msg[:, 5], *book[:, :4].T)
    want = np.clip(EmaStandardizer(alpha=signal.STANDARDIZER_ALPHA).transform(raw), -8, 8).astype(np.float32)
    feed = signal.SignalFeed()
    got_raw, got_x = np.empty_like(raw), np.empty_like(want)
    for i in range(len(msg)):
        feed.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
        got_raw[i], got_x[i] = feed.raw, feed.x[0]
        assert feed.ready
    assert np.isfinite(raw).all()
    np.testing.assert_allclose(got_raw, raw, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(got_x, want, rtol=1e-6, atol=1e-6)
    assert np.abs(got_x).max() == 8.0          # the clip is exercised
    lm = np.log(0.5 * (book[:, 0] + book[:, 2]))
    np.testing.assert_allclose(feed.logmid, lm, rtol=1e-15)


def test_features_use_no_future_event(day):
    """A feature row after event i is the same whatever the events after i are."""
    msg, book = day
    a, b = signal.SignalFeed(), signal.SignalFeed()
    for i in range(300):
        a.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
        b.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
    snapshot = a.x.copy()
    b.update(msg[300, 0] + 5.0, 4, 1e6, -1, *(book[300, :4] * 1.1))
    assert np.array_equal(a.x, snapshot) and not np.array_equal(b.x, snapshot)


def test_an_empty_side_is_not_ready_and_stays_out_of_the_statistics(day):
    msg, book = day
    feed = signal.SignalFeed()
    for i in range(50):
        feed.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
    before = (list(feed._mean), list(feed._var))
    feed.update(msg[50, 0], 1, 100.0, 1, book[50, 0], 0.0, book[50, 2], 0.0)   # both sizes gone
    assert not feed.ready and np.isnan(feed.x[0, 1]) and np.isnan(feed.x[0, 2])
    assert np.isnan(feed._mean[1]) == np.isnan(before[0][1]) and feed._mean[1] == before[0][1]
    feed.update(msg[51, 0], int(msg[51, 1]), msg[51, 3], msg[51, 5], *book[51, :4])
    assert feed.ready and np.isfinite(feed.x).all()


def test_realized_change_and_the_training_split():
    lm = np.log(np.linspace(100.0, 101.0, 200))
    got = signal.realized_change(lm, [0, 100, 149, 150, 199])
    np.testing.assert_allclose(got[:3], (lm[[50, 150, 199]] - lm[[0, 100, 149]]) * 1e4)
    assert np.isnan(got[3:]).all()
    # the training script keeps events 200 .. n - 51 and fits the first 70% of them
    n = 57514
    assert signal.training_events(n) == 200 + int(0.7 * (n - 250))


def test_demo_signal_stage_without_an_orderbook_file():
    """Without an orderbook file the features come from the replayed book's best levels. That book
    starts empty (the file does not hold the opening book): until its mid has 100 events of
    history the returns are undefined and the model is not asked; from then on, on every tick."""
    from tickgpu.app.demo import run_demo

    res = run_demo(MSG, None, backend="cpu", ticks=150, n_strikes=4, n_expiries=2)
    sig = res.report["signal"]
    assert 100 < sig["predictions"] < 150 and sig["fitted_before_message"] > 0
    assert res.report["stages"]["signal"]["n"] == 150
