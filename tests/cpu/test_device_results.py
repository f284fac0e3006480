"""Results of calls on CuPy arrays kept and handed out again once nothing holds them
(tickgpu.runtime.arrays.empty_outputs), on the mock driver with a stand-in CuPy (fake_cupy.py):
a result array is reused only when no array, view, memory pointer or export of it is alive, only
for a call of the same size, dtypes and stream, and every call's values are its own."""
import gc
import sys
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.runtime import arrays

sys.path.insert(0, str(Path(__file__).parent))
import fake_cupy  # noqa: E402
from cuda_mock import MockDriver, default_entries, expected_greeks, write_bundle  # noqa: E402

NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")


@pytest.fixture
def mock():
    return MockDriver()


@pytest.fixture
def ctx(mock, tmp_path):
    c = rt.init(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()), staging_elements=64)
    yield c
    rt.reset()


@pytest.fixture
def cp(monkeypatch, mock):
    return fake_cupy.install(monkeypatch, mock)


def _inputs(rng, n):
    return dict(spot=rng.uniform(50, 150, n), strike=rng.uniform(50, 150, n), t=rng.uniform(0.01, 2, n),
                rate=rng.uniform(0, 0.05, n), vol=rng.uniform(0.05, 0.8, n), div=rng.uniform(0, 0.03, n),
                call=rng.random(n) < 0.5)


def _call(cp, host):
    return tickgpu.greeks(**{k: cp.asarray(v) for k, v in host.items()}, dtype=np.float64, backend="gpu")


def _check(g, host):
    want = expected_greeks(**{k: np.asarray(v, np.float64) if k != "call" else v for k, v in host.items()})
    for k in want:
        np.testing.assert_allclose(getattr(g, k).get(), want[k], rtol=1e-12, atol=1e-12)


def _ids(g):
    return [id(getattr(g, k)) for k in ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga",
                                        "charm")]


def test_dropped_results_are_handed_out_again_with_new_values(ctx, cp, rng):
    a, b = _inputs(rng, 256), _inputs(rng, 256)
    g = _call(cp, a)
    assert isinstance(g.price, cp.ndarray)
    _check(g, a)
    first = _ids(g)
    del g
    g = _call(cp, b)
    assert _ids(g) == first          # the same ten arrays, nothing else held them
    _check(g, b)                     # written by this call's kernel
    allocs = ctx.driver.counts["mem_alloc"]
    del g
    for _ in range(5):
        g = _call(cp, a)
        del g
    # five calls: only the inputs were allocated (seven each), no result block
    assert ctx.driver.counts["mem_alloc"] - allocs == 5 * 7


@pytest.mark.parametrize("hold", ["greeks", "row", "view", "memory pointer", "array over the pointer"])
def test_results_still_reachable_are_not_reused(ctx, cp, rng, hold):
    a, b = _inputs(rng, 128), _inputs(rng, 128)
    g = _call(cp, a)
    first = _ids(g)
    kept = {"greeks": lambda: g, "row": lambda: g.delta, "view": lambda: g.gamma[3:9],
            "memory pointer": lambda: g.vega.data,
            "array over the pointer": lambda: cp.ndarray((128,), np.float64, g.theta.data)}[hold]()
    before = kept.get() if hasattr(kept, "get") else None
    del g
    gc.collect()
    g2 = _call(cp, b)
    second = _ids(g2)
    assert not set(second) & set(first)
    _check(g2, b)
    if before is not None:
        np.testing.assert_array_equal(kept.get(), before)   # what the caller holds is not rewritten
    del kept, g2
    g3 = _call(cp, a)
    assert _ids(g3) in (first, second)                        # both free again: one of them reused
    _check(g3, a)


def test_kept_sets_are_bounded_and_keyed_by_size_and_stream(ctx, cp, rng):
    held = [_call(cp, _inputs(rng, 64)) for _ in range(arrays.RECYCLE_SETS + 2)]
    ids = [set(_ids(g)) for g in held]
    assert all(not (x & y) for i, x in enumerate(ids) for y in ids[i + 1:])   # all in use: all distinct
    (key, sets), = arrays._RECYCLE.items()
    assert len(sets) == arrays.RECYCLE_SETS and key[:3] == (0, 1, 64)
    del held
    kept = set().union(*ids[:arrays.RECYCLE_SETS])   # alive in the kept sets (the others' ids may recur)
    h = _inputs(rng, 64)
    g = _call(cp, h)
    assert set(_ids(g)) in ids[:arrays.RECYCLE_SETS]
    other = _call(cp, _inputs(rng, 48))            # another size: its own set
    assert not set(_ids(other)) & kept
    del g, other
    fake_cupy.ndarray.stream = 0x77                # another stream: never a set made for stream 1
    s = _inputs(rng, 64)
    g = _call(cp, s)
    assert not set(_ids(g)) & kept
    _check(g, s)
    assert {k[1] for k in arrays._RECYCLE} == {1, 0x77}


def test_a_result_reshaped_in_place_is_not_reused(ctx, cp, rng):
    g = _call(cp, _inputs(rng, 64))
    first = _ids(g)
    g.vanna.shape = (8, 8)                         # CuPy allows this on a contiguous array
    del g
    h = _inputs(rng, 64)
    g = _call(cp, h)
    assert not set(_ids(g)) & set(first)
    assert all(getattr(g, k).shape == (64,) for k in ("price", "vanna"))
    _check(g, h)


def test_reset_forgets_kept_results(ctx, cp, rng):
    g = _call(cp, _inputs(rng, 64))
    del g
    assert arrays._RECYCLE
    rt.reset()
    assert not arrays._RECYCLE


def test_cupy_arrays_are_device_arrays_without_their_interface(cp, mock, monkeypatch):
    a = cp.asarray(np.ones(4))
    monkeypatch.setattr(type(a), "__cuda_array_interface__", property(lambda self: 1 / 0))
    assert arrays.is_device_array(a)
    from tickgpu.finance import greeks as G

    assert G._is_device_array(a)


def test_a_binding_keeps_its_own_results(ctx, cp, rng):
    """bind_greeks on CuPy arrays makes results of its own, never a kept set: it holds them for its
    life, which would take a set from the calls for good."""
    from tickgpu.runtime import bind_greeks

    h = _inputs(rng, 64)
    dev = {k: cp.asarray(v) for k, v in h.items()}
    tick = bind_greeks(*(dev[k] for k in NAMES), dtype=np.float64)
    g = tick()
    _check(g, h)
    assert not arrays._RECYCLE                  # the binding's results are in no kept set
    first = _ids(_call(cp, h))
    assert _ids(_call(cp, h)) == first          # the calls still get theirs back
    (sets,) = arrays._RECYCLE.values()
    assert not {id(o) for rs in sets for o in rs.outs} & set(_ids(tick()))


def test_threads_never_share_a_set(ctx, cp):
    """Calls from several threads, each holding its last results while it makes the next: a set is
    handed to one holder at a time, so every thread reads its own values."""
    import threading

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []
    inputs = [_inputs(np.random.default_rng(i), 32) for i in range(4)]

    def work(h):
        try:
            dev = {k: cp.asarray(v) for k, v in h.items()}
            want = expected_greeks(**{k: np.asarray(v, np.float64) if k != "call" else v for k, v in h.items()})["price"]
            g = None
            for _ in range(150):
                g = tickgpu.greeks(**dev, dtype=np.float64, backend="gpu")
                np.testing.assert_allclose(g.price.get(), want, rtol=1e-12)
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    try:
        threads = [threading.Thread(target=work, args=(h,)) for h in inputs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
