"""The shipped signal model on the GPU, fed event by event from the bundled LOBSTER day, and the demo's
signal stage on the GPU."""
from pathlib import Path

import numpy as np
import pytest

from tickgpu.app import signal

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[2] / "src" / "tickgpu" / "data"
MSG = DATA / "AMZN_2012-06-21_34200000_57600000_message_1.csv"
BOOK = DATA / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv"


def test_bound_signal_step_follows_the_feed():
    """A step bound to the feed's row, called after events as the feed updates it in place, gives
    the CPU reference's prediction for that row (W8A16: within the float32 sum order's ulps)."""
    msg = np.loadtxt(MSG, delimiter=",", skiprows=1, max_rows=3000)
    book = np.loadtxt(BOOK, delimiter=",", skiprows=1, max_rows=3000)
    feed = signal.SignalFeed()
    gpu = signal.load_model("w8a16", backend="gpu")
    step = gpu.bind(feed.x, check=False)
    checked = 0
    for i in range(len(msg)):
        feed.update(msg[i, 0], int(msg[i, 1]), msg[i, 3], msg[i, 5], *book[i, :4])
        if i % 97 == 0 and feed.ready:
            got = step()
            want = gpu.forward_cpu(feed.x)
            assert got.shape == (1, 1) and np.isfinite(got).all()
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max())))
            checked += 1
    assert checked >= 25


def test_demo_signal_stage_runs_on_the_gpu():
    """`tickgpu demo` with the GPU: the signal stage's backend is the GPU, the model predicts on every
    tick, and its predictions score as the CPU run's do."""
    from tickgpu.app.demo import run_demo

    gpu = run_demo(MSG, BOOK, backend="gpu", ticks=400, n_strikes=8, n_expiries=2).report
    cpu = run_demo(MSG, BOOK, backend="cpu", ticks=400, n_strikes=8, n_expiries=2).report
    assert gpu["backends"]["signal"] == "gpu" and cpu["backends"]["signal"] == "cpu"
    assert gpu["signal"]["predictions"] == cpu["signal"]["predictions"] == 400
    assert gpu["signal"]["scored"] == cpu["signal"]["scored"] > 300
    assert abs(gpu["signal"]["information_coefficient"] - cpu["signal"]["information_coefficient"]) < 1e-3
    assert gpu["iv_check"]["passed"]
