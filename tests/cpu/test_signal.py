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
    """Event by event, SignalFeed (the native core's tg_signal_update) gives signal_features'
    numbers (to the last few ulps of a log: libm's against NumPy's),
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
    """The features and their standardization at event i do not change when anything after i does
    (tickgpu.quant.check_causal: noise, outliers, zeros and NaN from random cut points on)."""
    from tickgpu.quant import check_causal

    msg, book = day
    events = np.column_stack([msg[:2000, [0, 1, 3, 5]], book[:2000, :4]])

    def standardized(ev):
        raw = signal.signal_features(*ev.T)
        return raw, EmaStandardizer(alpha=signal.STANDARDIZER_ALPHA).transform(raw)

    report = check_causal(standardized, events, cuts=6)
    assert report.checks > 0


def test_an_empty_side_is_not_ready_and_stays_out_of_the_statistics(day):
    msg, book = day
    feed = signal.SignalFeed()
    for i in range(50):
        feed.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
    state = feed._state
    before = (list(state.mean), list(state.var))
    feed.update(msg[50, 0], 1, 100.0, 1, book[50, 0], 0.0, book[50, 2], 0.0)   # both sides empty
    assert not feed.ready and np.isnan(feed.logmid[-1])
    # no mid: no spread, imbalance, size ratio or return (the 100-event return is still 0 here,
    # 51 events in: it starts once there are 100 events behind); NaN in the model's row
    undefined = [0, 1, 2, 3, 4, 5]
    assert np.isnan(feed.x[0, undefined]).all() and np.isfinite(feed.x[0, 6:]).all()
    # the features that are not finite leave their statistics as they were; the others move on
    assert [(state.mean[j], state.var[j]) for j in undefined] == [(before[0][j], before[1][j]) for j in undefined]
    assert state.mean[9] != before[0][9]          # the submissions EMA took this submission
    # the next event's 1-event return reaches back to the event without a mid; the one after is whole
    feed.update(msg[51, 0], int(msg[51, 1]), msg[51, 3], msg[51, 5], *book[51, :4])
    assert not feed.ready and np.isnan(feed.x[0, 3]) and np.isfinite(np.delete(feed.x[0], 3)).all()
    feed.update(msg[52, 0], int(msg[52, 1]), msg[52, 3], msg[52, 5], *book[52, :4])
    assert feed.ready and np.isfinite(feed.x).all()


def test_realized_change():
    lm = np.log(np.linspace(100.0, 101.0, 200))
    got = signal.realized_change(lm, [0, 100, 149, 150, 199])
    np.testing.assert_allclose(got[:3], (lm[[50, 150, 199]] - lm[[0, 100, 149]]) * 1e4)
    assert np.isnan(got[3:]).all()


def test_the_feed_gives_the_shipped_models_held_out_rows():
    """Over the whole bundled day, the feed's rows from training_events(n) on are the held-out rows
    the training script saved with the model (test_x): the features, their standardization and
    the split the demo scores out of sample are the training script's."""
    from importlib import resources

    msg = np.loadtxt(MSG, delimiter=",", skiprows=1)
    book = np.loadtxt(BOOK, delimiter=",", skiprows=1)
    with resources.files("tickgpu").joinpath("data/quant_signal_mlp.npz").open("rb") as f:
        test_x = np.load(f)["test_x"]
    start = signal.training_events(len(msg))
    feed = signal.SignalFeed()
    rows = []
    for i in range(start + len(test_x)):
        feed.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
        if i >= start:
            rows.append(feed.x[0].copy())
    assert np.array_equal(np.array(rows), test_x)


def test_demo_signal_stage_without_an_orderbook_file():
    """Without an orderbook file the features come from the replayed book's best levels. That book
    starts empty (the file does not hold the opening book): a return reaching back to an event
    without a mid is undefined, and at such ticks the model is not asked."""
    from tickgpu.app.demo import run_demo

    res = run_demo(MSG, None, backend="cpu", ticks=150, n_strikes=4, n_expiries=2)
    sig = res.report["signal"]
    assert 100 < sig["predictions"] < 150 and sig["fitted_before_message"] > 0
    # the signal stage times the ticks the model was asked at
    assert res.report["stages"]["signal"]["n"] == sig["predictions"] == len(res.samples_ns["signal"])
