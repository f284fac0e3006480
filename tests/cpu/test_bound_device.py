"""tickgpu.runtime.bind_greeks / bind_implied_vol on GPU arrays, on the mock driver: checked once,
then one launch a call from the binding's own packed arguments, into result arrays made once."""
import ctypes

import numpy as np
import pytest

import tickgpu.runtime as rt
from tickgpu.finance.greeks import GREEK_NAMES
from tickgpu.runtime import ops
from tickgpu.runtime.arrays import DeviceArray
from cuda_mock import FakeGpuArray, expected_greeks, expected_iv   # tests/cpu is on sys.path (conftest.py)

NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")


def _chain(rng, n, dtype):
    return [rng.uniform(80, 120, n).astype(dtype), rng.uniform(80, 120, n).astype(dtype),
            rng.uniform(0.1, 2, n).astype(dtype), rng.uniform(0, 0.05, n).astype(dtype),
            rng.uniform(0.1, 0.5, n).astype(dtype), rng.uniform(0, 0.03, n).astype(dtype), rng.random(n) < 0.5]


def _on_gpu(mock, host, stream=None):
    return [FakeGpuArray(mock, np.ascontiguousarray(x), stream=stream) for x in host]


def _write(dev: FakeGpuArray, host: np.ndarray) -> None:
    """An in-place update of a GPU array's contents (what the loop does between calls)."""
    ctypes.memmove(dev.ptr, np.ascontiguousarray(host, dev.dtype).ctypes.data, dev.nbytes)


def _tol(dtype):
    return 1e-12 if dtype == np.float64 else 2e-6


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, 48, 1000])   # 48: the aligned variant; 17, 1000: unaligned sizes
def test_device_binding_computes_and_follows_in_place_updates(gpu_ctx, rng, dtype, n):
    mock = gpu_ctx.driver
    host = _chain(rng, n, dtype)
    dev = _on_gpu(mock, host)
    tick = rt.bind_greeks(*dev, dtype=dtype)
    assert isinstance(tick, rt.DeviceBoundGreeks) and tick.n == n and tick.stream == 1
    for _ in range(3):
        mock.launches.clear()
        got = tick()
        assert got is tick.outputs and len(mock.launches) == 1
        assert mock.launches[-1]["variant"].endswith("_a16") == (n % 16 == 0)
        want = expected_greeks(*(np.asarray(v, np.float64) for v in host[:6]), call=host[6])
        fresh = ops.greeks(*dev, dtype=dtype, shape=(n,))   # the unbound device path, same kernel
        for name in GREEK_NAMES:
            out = getattr(got, name)
            assert isinstance(out, DeviceArray) and out.shape == (n,) and out.dtype == dtype
            np.testing.assert_allclose(out.get(), want[name].astype(dtype), rtol=_tol(dtype), atol=_tol(dtype),
                                       err_msg=name)
            np.testing.assert_array_equal(out.get(), fresh[name].get(), err_msg=name)
        host = _chain(rng, n, dtype)
        for d, h in zip(dev, host):
            _write(d, h)


def test_device_binding_of_single_values_reads_them_with_stride_zero(gpu_ctx, rng):
    mock = gpu_ctx.driver
    n = 32
    host = _chain(rng, n, np.float64)
    dev = _on_gpu(mock, host)
    tick = rt.bind_greeks(dev[0], dev[1], dev[2], 0.02, dev[4], 0.0, False)
    g = tick()
    want = expected_greeks(host[0], host[1], host[2], np.full(n, 0.02), host[4], np.zeros(n), call=np.zeros(n, bool))
    for name in GREEK_NAMES:
        np.testing.assert_allclose(getattr(g, name).get(), want[name], rtol=1e-12, atol=1e-12, err_msg=name)
    args = mock.launches[-1]["args"]
    strides = [args[2 * i + 1] for i in range(7)]
    assert strides == [1, 1, 1, 0, 1, 0, 0]


def test_device_binding_launches_on_the_producer_stream_without_waiting(gpu_ctx, rng, monkeypatch):
    from tickgpu.runtime import direct   # makes a binding's outputs (outputs_and_stream)

    mock = gpu_ctx.driver
    n = 64
    dev = _on_gpu(mock, _chain(rng, n, np.float32), stream=0x5151)
    made = []

    def library_empty(x, shape, dtypes, device_id, stream=None):   # results from "the producer's library"
        made.extend(FakeGpuArray(mock, np.zeros(shape, dt), stream=0x5151) for dt in dtypes)
        return [(o, o.ptr) for o in made]

    real_empty = direct.empty_outputs
    monkeypatch.setattr(direct, "empty_outputs", library_empty)
    tick = rt.bind_greeks(*dev, dtype=np.float32)
    monkeypatch.setattr(direct, "empty_outputs", real_empty)   # the unbound call below makes its own
    seen = []
    real = mock.launch
    mock.launch = lambda *a, **kw: (seen.append((a[4], kw.get("sync", False))), real(*a, **kw))
    mock.calls.clear()
    g = tick()
    tick()
    assert seen == [(0x5151, False)] * 2 and "cuStreamSynchronize" not in mock.calls
    # The context is made current by each launch itself (in C on a real driver), once a call.
    assert mock.calls.count("cuCtxSetCurrent") == 2
    assert all(b.context == gpu_ctx.ctx for *_, b in tick._launches)
    assert g.price is made[0] and tick.stream == 0x5151
    got = np.frombuffer(ctypes.string_at(made[3].ptr, 4 * n), dtype=np.float32)   # vega
    np.testing.assert_array_equal(got, ops.greeks(*dev, dtype=np.float32, shape=(n,))["vega"].get())


def test_device_binding_repacks_after_scratch_moved(gpu_ctx, rng):
    mock = gpu_ctx.driver
    dev = _on_gpu(mock, _chain(rng, 16, np.float64))
    tick = rt.bind_greeks(*dev)
    before = tick._epoch
    gpu_ctx.bundle.scratch_epoch += 1          # as ensure_scratch does when a block moves
    tick()
    assert tick._epoch == gpu_ctx.bundle.scratch_epoch != before


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_bound_implied_vol(gpu_ctx, rng, dtype):
    mock = gpu_ctx.driver
    n = 40
    host = _chain(rng, n, dtype)
    price = rng.uniform(1, 20, n).astype(dtype)
    dev = _on_gpu(mock, [price, *host[:4], host[5], host[6]])
    ivs = rt.bind_implied_vol(*dev, dtype=dtype)
    assert isinstance(ivs, rt.DeviceBoundImpliedVol)
    vol, status = ivs()
    assert (vol, status) == ivs.outputs
    want_v, want_s = expected_iv(*(np.asarray(v, np.float64) for v in (price, *host[:4], host[5])), call=host[6])
    np.testing.assert_allclose(vol.get(), want_v.astype(dtype), rtol=_tol(dtype), atol=_tol(dtype))
    assert status.dtype == np.int8
    np.testing.assert_array_equal(status.get(), want_s)


def test_device_binding_refuses_bad_arrays_naming_them(gpu_ctx, rng):
    mock = gpu_ctx.driver
    host = _chain(rng, 8, np.float64)
    dev = _on_gpu(mock, host)
    with pytest.raises(TypeError, match="bind_greeks: strike is a ndarray, not a GPU array"):
        rt.bind_greeks(dev[0], host[1], *dev[2:])
    with pytest.raises(TypeError, match="bind_greeks: vol must be of dtype float64, got float32"):
        rt.bind_greeks(*dev[:4], FakeGpuArray(mock, host[4].astype(np.float32)), *dev[5:])
    with pytest.raises(TypeError, match="bind_greeks: call must be of dtype uint8 or bool or int8, got float64"):
        rt.bind_greeks(*dev[:6], FakeGpuArray(mock, host[6].astype(np.float64)))
    with pytest.raises(ValueError, match="bind_greeks: t has 7 elements, spot has 8"):
        rt.bind_greeks(*dev[:2], FakeGpuArray(mock, host[2][:7]), *dev[3:])
    with pytest.raises(ValueError, match="bind_greeks: rate must be one-dimensional and C-contiguous, got shape"):
        rt.bind_greeks(*dev[:3], FakeGpuArray(mock, np.zeros((2, 4))), *dev[4:])
    strided = FakeGpuArray(mock, np.zeros(16), strides=(16,))
    strided.shape = (8,)
    with pytest.raises(ValueError, match="bind_greeks: div must be one-dimensional and C-contiguous.*not contiguous"):
        rt.bind_greeks(*dev[:5], strided, dev[6])
    with pytest.raises(ValueError, match="bind_greeks: spot has no elements"):
        rt.bind_greeks(*(FakeGpuArray(mock, np.zeros(0, h.dtype)) for h in host))
    with pytest.raises(TypeError, match="bind_implied_vol: price must be of dtype float32"):
        rt.bind_implied_vol(*dev[:6], dev[6], dtype=np.float32)


# ---- zero-copy bindings: NumPy arrays in mapped pinned memory, with out= ---------------------------
def _mapped_chain(rng, n, dtype):
    from tickgpu.memory import mapped_array

    arrays = []
    for h in _chain(rng, n, dtype):
        a = mapped_array(n, h.dtype)
        a[:] = h
        arrays.append(a)
    return arrays


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, 48])
def test_mapped_binding_writes_out_in_place_and_follows_updates(gpu_ctx, rng, dtype, n):
    from tickgpu.memory import mapped_array

    mock = gpu_ctx.driver
    x = _mapped_chain(rng, n, dtype)
    out = mapped_array((10, n), dtype)
    tick = rt.bind_greeks(*x, dtype=dtype, out=out)
    assert isinstance(tick, rt.DeviceBoundGreeks) and tick.stream == gpu_ctx.stream
    waits = []
    real = mock.launch
    mock.launch = lambda *a, **kw: (waits.append(kw.get("sync", False)), real(*a, **kw))
    for _ in range(3):
        waits.clear()
        g = tick()
        assert waits == [True]                    # one launch, and its wait: the host reads the results
        assert g is tick.outputs
        want = expected_greeks(*(np.asarray(v, np.float64) for v in x[:6]), call=x[6])
        unbound = rt_greeks(x, dtype)
        for i, name in enumerate(GREEK_NAMES):
            row = getattr(g, name)
            assert np.shares_memory(row, out[i]) and row.shape == (n,)
            np.testing.assert_allclose(row, want[name].astype(dtype), rtol=_tol(dtype), atol=_tol(dtype), err_msg=name)
            np.testing.assert_array_equal(row, getattr(unbound, name), err_msg=name)
        for a, b in zip(x, _chain(rng, n, dtype)):
            a[:] = b                                  # in place, on the host


def rt_greeks(x, dtype):
    import tickgpu

    return tickgpu.greeks(*(np.array(v) for v in x), dtype=dtype, backend="gpu")


def test_mapped_binding_of_implied_vols_and_single_values(gpu_ctx, rng):
    from tickgpu.memory import mapped_array

    n = 40
    x = _mapped_chain(rng, n, np.float64)
    price = mapped_array(n, np.float64)
    price[:] = rng.uniform(1, 20, n)
    vol, status = mapped_array(n, np.float64), mapped_array(n, np.int8)
    ivs = rt.bind_implied_vol(price, x[0], x[1], x[2], 0.02, 0.0, True, out=(vol, status))
    v, s = ivs()
    assert v is vol and s is status
    want_v, want_s = expected_iv(np.asarray(price), x[0], x[1], x[2], np.full(n, 0.02), np.zeros(n), call=np.ones(n, bool))
    np.testing.assert_allclose(vol, want_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(status, want_s)


def test_mapped_binding_refuses_what_the_gpu_cannot_reach(gpu_ctx, rng):
    from tickgpu.memory import mapped_array

    n = 16
    x = _mapped_chain(rng, n, np.float64)
    out = mapped_array((10, n), np.float64)
    with pytest.raises(ValueError, match="bind_greeks: strike is not in mapped pinned memory"):
        rt.bind_greeks(x[0], np.array(x[1]), *x[2:], out=out)
    with pytest.raises(ValueError, match=r"bind_greeks: out\[0\] is not in mapped pinned memory"):
        rt.bind_greeks(*x, out=np.empty((10, n)))
    with pytest.raises(ValueError, match=r"bind_greeks: out must be a NumPy array of shape \(10, 16\)"):
        rt.bind_greeks(*x, out=mapped_array((9, n), np.float64))
    with pytest.raises(ValueError, match=r"bind_greeks: out\[0\] must be a C-contiguous NumPy array of 16 float64"):
        rt.bind_greeks(*x, out=mapped_array((10, n), np.float32))
    with pytest.raises(TypeError, match="bind_greeks: vol must be of dtype float64, got float32"):
        rt.bind_greeks(*x[:4], mapped_array(n, np.float32), *x[5:], out=out)
    with pytest.raises(ValueError, match="bind_greeks: t has 8 elements, spot has 16"):
        rt.bind_greeks(*x[:2], mapped_array(8, np.float64), *x[3:], out=out)
    with pytest.raises(ValueError, match=r"bind_implied_vol: out must be a tuple \(vol, status\)"):
        rt.bind_implied_vol(*x[:6], True, out=out)


def test_mapped_array_lives_as_long_as_its_views(gpu_ctx):
    import gc

    from tickgpu.memory import mapped_array
    from tickgpu.memory.host import default_pinned_pool, mapped_address

    pool = default_pinned_pool(gpu_ctx)
    before = pool.stats()["in_use"]
    a = mapped_array((4, 8), np.float32)
    assert a.shape == (4, 8) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    ptr = a.ctypes.data
    assert mapped_address(ptr, a.nbytes) is not None
    assert mapped_address(ptr, 1 << 40) is None                        # past the end of every arena
    assert mapped_address(np.empty(8).ctypes.data, 64) is None        # pageable memory: no device address
    row = a[2]
    held = pool.stats()["in_use"]
    assert held > before
    del a
    gc.collect()
    assert pool.stats()["in_use"] == held                              # a view still holds the buffer
    row[:] = 1.0
    del row
    gc.collect()
    assert pool.stats()["in_use"] == before
    with pytest.raises(ValueError, match="mapped_array: shape must not be negative"):
        mapped_array((-1, 2))


def test_device_binding_refuses_a_call_flag_greeks_refuses(gpu_ctx, rng):
    spot = FakeGpuArray(gpu_ctx.driver, np.linspace(80, 120, 8))
    with pytest.raises(ValueError, match=r"^bind_greeks: call: must be True/False \(or 1/0\), got 2"):
        rt.bind_greeks(spot, 100.0, 1.0, 0.03, 0.2, 0.01, 2)
    with pytest.raises(TypeError, match=r"^bind_greeks: call: must be a bool, got float"):
        rt.bind_greeks(spot, 100.0, 1.0, 0.03, 0.2, 0.01, 0.5)


def test_mapped_binding_pins_its_buffers_until_it_is_gone(gpu_ctx):
    """A zero-copy binding's kernel writes its out= memory on every call: releasing that buffer
    while the binding lives would hand the memory to the next acquire, which the binding would
    then overwrite. The release is refused until the binding is gone; a binding of a released
    buffer is refused."""
    import gc

    from tickgpu.memory import PinnedPool
    from tickgpu.memory.errors import PoolError

    n = 16
    pool = PinnedPool(gpu_ctx)
    bufs = [pool.acquire(n * 8) for _ in range(6)]
    ins = [b.array(np.float64, n) for b in bufs]
    for a, v in zip(ins, (100.0, 100.0, 1.0, 0.03, 0.2, 0.01)):
        a[:] = v
    ob = pool.acquire(10 * n * 8)
    out = ob.array(np.float64, (10, n))
    tick = rt.bind_greeks(*ins, True, out=out)
    tick()
    for b in (ob, bufs[0]):
        with pytest.raises(PoolError, match="read and written in place by a zero-copy binding"):
            pool.release(b)
    del tick
    gc.collect()
    pool.release(ob)                                 # the binding is gone: free to go
    with pytest.raises(ValueError, match=r"out\[0\] is not in mapped pinned memory \(or its buffer was released\)"):
        rt.bind_greeks(*ins, True, out=out)
    for b in bufs:
        pool.release(b)
    pool.close()


def test_pools_the_gpu_uses_in_place_refuse_to_close(gpu_ctx, rng):
    """Closing a pool whose memory the GPU reads and writes in place would leave the runtime (its
    staging) or a zero-copy binding launching on unmapped memory: refused, and everything goes on."""
    import tickgpu
    from tickgpu.memory import PoolError, mapped

    k = np.linspace(90, 110, 32)
    first = tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="gpu")
    with pytest.raises(PoolError, match="read and written in place by the GPU"):
        mapped(16).pool.close()                      # the runtime's own pool: its staging lives there
    again = tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="gpu")
    np.testing.assert_array_equal(again.price, first.price)
    # A pool of one's own, with a zero-copy binding on it: refused until the binding is gone.
    from tickgpu.memory import PinnedPool

    pool = PinnedPool(gpu_ctx)
    n = 16
    bufs = [pool.acquire(n * 8) for _ in range(2)]
    spot, out_b = bufs[0].array(np.float64, n), pool.acquire(10 * n * 8)
    spot[:] = 100.0
    tick = rt.bind_greeks(spot, 100.0, 1.0, 0.03, 0.2, 0.0, True, out=out_b.array(np.float64, (10, n)))
    with pytest.raises(PoolError, match="in place by the GPU"):
        pool.close()
    tick()
    del tick
    import gc

    gc.collect()
    for b in (*bufs, out_b):
        b.release()
    pool.close()


def test_device_binding_of_a_closed_managed_array_refuses_to_launch(gpu_ctx):
    from tickgpu.memory import ManagedArray, PoolError

    m = ManagedArray(32, np.float64, mode="explicit")
    m.write(0, np.linspace(90, 110, 32))
    m.prefetch()
    tick = rt.bind_greeks(100.0, m, 0.5, 0.01, 0.2, 0.0, True)
    tick()
    launches = len(gpu_ctx.driver.launches)
    m.close()
    with pytest.raises(PoolError, match="bind_greeks: strike is a closed ManagedArray"):
        tick()
    assert len(gpu_ctx.driver.launches) == launches          # nothing launched on the freed memory
    with pytest.raises(PoolError, match="closed"):           # not "must be a real number"
        import tickgpu

        tickgpu.greeks(100.0, m, 0.5, 0.01, 0.2, backend="gpu")


def test_misaligned_arrays_are_refused_naming_them(gpu_ctx, rng):
    import tickgpu
    from tickgpu.memory import mapped_array

    n = 32
    k = FakeGpuArray(gpu_ctx.driver, np.linspace(90, 110, n), offset=1)
    with pytest.raises(ValueError, match="strike: GPU array's data at .* is not aligned to its 8-byte elements"):
        tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="gpu")
    with pytest.raises(ValueError, match="bind_greeks: strike's data at .* is not aligned"):
        rt.bind_greeks(100.0, k, 0.5, 0.01, 0.2, 0.0, True)
    raw = mapped_array(8 * n + 8, np.uint8)
    spot = raw[1:8 * n + 1].view(np.float64)
    spot[:] = 100.0
    strike = mapped_array(n)
    strike[:] = 100.0
    out = mapped_array((10, n))
    with pytest.raises(ValueError, match="bind_greeks: spot's data at .* is not aligned"):
        rt.bind_greeks(spot, strike, 0.5, 0.01, 0.2, 0.0, True, out=out)
    rows = mapped_array(10 * 8 * n + 8, np.uint8)[1:10 * 8 * n + 1].view(np.float64).reshape(10, n)
    with pytest.raises(ValueError, match=r"bind_greeks: out\[0\]'s data at .* is not aligned"):
        rt.bind_greeks(strike, strike, 0.5, 0.01, 0.2, 0.0, True, out=rows)


def test_zero_copy_results_may_not_overlap_inputs_or_each_other(gpu_ctx):
    from tickgpu.memory import mapped_array

    n = 16
    spot, out = mapped_array(n), mapped_array((10, n))
    spot[:] = 100.0
    strike = out[1]                                  # the delta row
    strike[:] = 95.0
    with pytest.raises(ValueError, match=r"bind_greeks: out\[1\] shares memory with strike"):
        rt.bind_greeks(spot, strike, 0.5, 0.01, 0.2, 0.0, True, out=out)
    price = mapped_array(n)
    price[:] = 5.0
    rows = mapped_array(2 * n)
    with pytest.raises(ValueError, match=r"bind_implied_vol: out\[0\] shares memory with out\[1\]"):
        rt.bind_implied_vol(price, spot, spot, 0.5, 0.01, 0.0, True,
                            out=(rows[:n], rows[n // 2:].view(np.int8)[:n]))
