"""The resident greeks kernel on the GPU (``pytest -m gpu``): answers against the CPU backend.

The CPU backend is tested against QuantLib and the oracle files; the resident kernel runs the
same greeks source (csrc/cpu/greeks_kernel.h) with the device's libm, so it must agree within
1e-12 (float64) / 1e-5 (float32) relative, with the same bound scaled by the array's magnitude
for elements near zero (as tests/gpu/test_gpu_ops.py), on fresh random chains and at the edges;
and it must keep answering: a thousand calls in a row, close and reopen, exit on idle and come
back on the next call.
"""
import time
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.runtime import mailbox, ops
from greeks_tolerance import cancelling_scale   # tests/ (pyproject: pythonpath)

pytestmark = pytest.mark.gpu

OUTPUTS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
CAPACITY = 4096


@pytest.fixture(scope="module")
def ctx():
    c = rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle")
    yield c
    for r in mailbox.open_residents():
        r.close()
    rt.reset()


def chain(rng, n, dtype, edges=True):
    spot = rng.uniform(50, 150, n)
    strike = spot * np.exp(rng.normal(0, 0.2, n))
    t = rng.uniform(0.02, 2.0, n)
    vol = rng.uniform(0.08, 0.8, n)
    if edges and n >= 8:
        t[0], strike[1], spot[2], vol[3], t[4] = 0.0, spot[1], np.nan, -0.2, 0.0
        strike[4] = spot[4]                       # at the money at expiry: inf / -inf limits
    return [a.astype(dtype) for a in (spot, strike, t, rng.uniform(-0.01, 0.08, n), vol, rng.uniform(0, 0.04, n))] + \
        [rng.integers(0, 2, n).astype(bool)]


def agree(got: dict, values, dtype, what=""):
    """The CPU backend's greeks of `values`, within 1e-12 / 1e-5 relative, or that times the array's
    largest magnitude, or that times what the greek can be known to where its formula cancels
    (price, theta, vanna, volga: greeks_tolerance.cancelling_scale, as test_gpu_ops.py)."""
    want = cpu(values, dtype)
    floors = cancelling_scale(dict(zip(("spot", "strike", "t", "rate", "vol", "div", "call"), values)))
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 1e-5
    for name in OUTPUTS:
        g, c = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        assert g.shape == c.shape, (what, name)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(c), err_msg=f"{what} {name}: NaN positions")
        inf = np.isinf(c)
        np.testing.assert_array_equal(g[inf], c[inf], err_msg=f"{what} {name}: infinities")
        fin = np.isfinite(c)
        if fin.any():
            scale = np.max(np.abs(c[fin]))
            if name in floors:
                scale = np.maximum(scale, np.broadcast_to(floors[name], c.shape)[fin])
            bad = np.flatnonzero(~(np.abs(g[fin] - c[fin]) <= tol * np.abs(c[fin]) + tol * scale))
            assert bad.size == 0, (f"{what} {name}: {bad.size} beyond {tol}: gpu {g[fin][bad[:4]]} "
                                   f"cpu {c[fin][bad[:4]]}")


def cpu(values, dtype):
    return tickgpu.greeks(*values, dtype=dtype, backend="cpu").as_dict()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_resident_greeks_equal_the_cpu_backend(ctx, rng, dtype):
    with mailbox.resident("greeks", dtype=dtype, capacity=CAPACITY) as r:
        for n in (1, 17, 1024, CAPACITY):
            values = chain(rng, n, dtype)
            calls = r.calls
            g = tickgpu.greeks(*values, dtype=dtype, backend="gpu").as_dict()
            assert r.calls == calls + 1, "the call did not go through the resident kernel"
            agree(g, values, dtype, f"n={n}")
        # Single values (sent once) mixed with arrays, and a 2-d chain.
        k = rng.uniform(70, 130, (32, 32)).astype(dtype)
        for values in ([100.0, k, 0.5, 0.02, 0.25, 0.01, True], [100.0, k, 0.5, 0.02, 0.25, 0.01, k > 100]):
            agree(tickgpu.greeks(*values, dtype=dtype, backend="gpu").as_dict(), values, dtype, "scalars")
        # More than the capacity: the graph path answers, the resident kernel is not asked.
        calls = r.calls
        values = chain(rng, CAPACITY + 1, dtype)
        agree(tickgpu.greeks(*values, dtype=dtype, backend="gpu").as_dict(), values, dtype, "cap+1")
        assert r.calls == calls


@pytest.mark.parametrize("blocks", [1, 3, 8])
def test_any_block_count_gives_the_same_answers(ctx, rng, blocks):
    values = chain(rng, 2048, np.float64)
    with mailbox.resident("greeks", dtype=np.float64, capacity=2048, blocks=blocks) as r:
        agree(r(*values), values, np.float64, f"blocks={blocks}")
        assert r.state()["served"] == 2          # warm-up and this


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_thousand_calls_without_a_hang(ctx, rng, dtype):
    values = chain(rng, 1024, dtype, edges=False)
    want = cpu(values, dtype)
    with mailbox.resident("greeks", dtype=dtype, capacity=1024, timeout=1.0) as r:
        t0 = time.perf_counter()
        for i in range(1000):
            values[0][i % 1024] += 1            # a new tick each call
            g = tickgpu.greeks(*values, dtype=dtype, backend="gpu")
        took = time.perf_counter() - t0
        agree(g.as_dict(), values, dtype, "call 1000")
        assert r.state()["served"] == 1001 and r.launches == 1
        assert not np.array_equal(g.price, want["price"])
    print(f"1000 resident calls ({np.dtype(dtype).name}, 1024 options): {took * 1e3:.1f} ms")


def test_close_and_reopen(ctx, rng):
    values = chain(rng, 512, np.float64)
    r = mailbox.resident("greeks", dtype=np.float64, capacity=512)
    agree(r(*values), values, np.float64, "first")
    assert r.close() is True and r.closed and not ops.RESIDENT
    r2 = mailbox.resident("greeks", dtype=np.float64, capacity=512)
    agree(tickgpu.greeks(*values, backend="gpu").as_dict(), values, np.float64, "reopened")
    assert r2.close() is True


def test_idle_exit_and_relaunch(ctx, rng):
    with mailbox.resident("greeks", dtype=np.float32, capacity=256, idle_timeout=0.05) as r:
        deadline = time.monotonic() + 5
        while r.state()["exited"] != 1:
            assert time.monotonic() < deadline, "the resident kernel did not return on idle"
            time.sleep(0.01)
        # It really returned: its stream's work is done.
        assert ctx.driver.event_query(r._event)
        values = chain(rng, 256, np.float32)
        agree(r(*values), values, np.float32, "after relaunch")
        assert r.launches == 2 and r.state()["exited"] == 0


def test_context_wide_waits_do_not_stall_on_an_open_resident_kernel(ctx, rng):
    """The runtime's waits for the whole context (here warmup() run a second time, and
    RuntimeContext.synchronize itself) park an open resident kernel (idle timeout 60 s) instead of
    waiting for it to time out; the next call relaunches it. (warmup() comes first: the first
    launch of each kernel loads its code, which waits for work in flight, a resident kernel too.)"""
    tickgpu.warmup()
    with mailbox.resident("greeks", dtype=np.float64, capacity=256, idle_timeout=60.0) as r:
        values = chain(rng, 256, np.float64)
        agree(r(*values), values, np.float64, "before")
        launches = r.launches
        t0 = time.monotonic()
        ctx.synchronize()
        assert time.monotonic() - t0 < 20.0, "synchronize() waited for the resident kernel's idle timeout"
        agree(r(*values), values, np.float64, "after synchronize")
        assert r.launches == launches + 1
        t0 = time.monotonic()
        tickgpu.warmup()
        assert time.monotonic() - t0 < 20.0, "warmup() waited for the resident kernel's idle timeout"
        agree(r(*values), values, np.float64, "after warmup")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bound_greeks_through_the_resident_kernel(ctx, rng, dtype):
    """A binding goes through an open resident kernel: the CPU backend's greeks of its arrays'
    current contents, and the bits of tickgpu.greeks routed through the same kernel."""
    n = 300
    values = chain(rng, n, dtype)
    tick = rt.bind_greeks(*values, dtype=dtype)
    with mailbox.resident("greeks", dtype=dtype, capacity=CAPACITY) as r:
        for _ in range(3):
            calls = r.calls
            b = tick()
            assert r.calls == calls + 1, "the bound call did not go through the resident kernel"
            agree(b.as_dict(), values, dtype, "bound")
            g = tickgpu.greeks(*values, dtype=dtype, backend="gpu")
            for name in OUTPUTS:
                np.testing.assert_array_equal(getattr(b, name), getattr(g, name), err_msg=f"bound {name}")
            for a, v in zip(values, chain(rng, n, dtype)):
                a[:] = v
