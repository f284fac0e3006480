"""Pinned pool, mapped buffers and managed arrays on a real GPU (``pytest -m gpu``).

Data goes through the device and back and is compared with what was written; managed arrays feed
`tickgpu.greeks` as GPU inputs and must give the CPU backend's numbers.
"""
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.memory import ManagedArray, PinnedPool, mapped

pytestmark = pytest.mark.gpu

MB = 1 << 20


@pytest.fixture(scope="module")
def ctx():
    c = rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle")
    yield c
    # The context's default pool holds its staging for the life of the context: it refuses to
    # close (PinnedPool.close); the process's end returns it.
    rt.reset()


@pytest.mark.parametrize("nbytes", [1, 4096 + 8, 3 * MB + 24, 100 * MB])
def test_pinned_buffers_copy_to_and_from_the_device(ctx, nbytes, rng):
    d = ctx.driver
    pool = PinnedPool(ctx, arena_bytes=16 * MB)
    try:
        src, dst = pool.acquire(nbytes), pool.acquire(nbytes)
        assert src.ptr % 64 == 0 and dst.ptr % 64 == 0
        x = rng.integers(0, 256, nbytes, dtype=np.uint8)
        src.array()[:] = x
        dst.array()[:] = 0
        dev = d.mem_alloc(nbytes)
        try:
            d.memcpy_htod_async(dev, src.ptr, nbytes, ctx.stream)
            d.memcpy_dtoh_async(dst.ptr, dev, nbytes, ctx.stream)
            pool.release(src, stream=ctx.stream)          # in flight: not reused before the copy ends
            d.stream_synchronize(ctx.stream)
            np.testing.assert_array_equal(dst.array(), x)
        finally:
            d.mem_free(dev)
        pool.release(dst)
        s = pool.stats()
        assert s["backing"] in ("hugetlb", "thp", "pages") and s["fallback_reason"] is None, s
    finally:
        pool.close()


def test_mapped_buffer_is_readable_and_writable_by_the_device(ctx, rng):
    d = ctx.driver
    n = 1024
    m_in, m_out = mapped(n * 4, ctx), mapped(n * 4, ctx)
    x = rng.standard_normal(n).astype(np.float32)
    m_in.array(np.float32)[:] = x
    m_out.array(np.float32)[:] = 0
    dev = d.mem_alloc(n * 4)
    try:
        # The device reads the host's memory through its mapped address, and writes back the same way.
        d.memcpy_dtod_async(dev, m_in.device_ptr, n * 4, ctx.stream)
        d.memcpy_dtod_async(m_out.device_ptr, dev, n * 4, ctx.stream)
        d.stream_synchronize(ctx.stream)
        np.testing.assert_array_equal(m_out.array(np.float32), x)
    finally:
        d.mem_free(dev)
    m_in.release(ctx.stream)
    m_out.release(ctx.stream)


def test_scale_kernel_reads_and_writes_mapped_memory_in_place(ctx, rng):
    """The zero-copy tick of the memory benchmark: the bundle's scale kernel on two mapped buffers."""
    n = 1000   # not a multiple of the block: the tail is bounds-checked
    lau = ctx.launcher("scale", "f32", n, False)
    m_in, m_out = mapped(n * 4, ctx), mapped(n * 4 + 64, ctx)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    m_in.array(np.float32, (n,))[:] = x
    guard = m_out.array(np.float32)
    guard[:] = -7.0
    lau.args.pack(m_in.device_ptr, m_out.device_ptr, n)
    lau.launch(n, ctx.stream, sync=True)
    got = m_out.array(np.float32, (n,))
    want = (x.astype(np.float64) * np.float64(np.float32(1.0001)) + 1.0).astype(np.float32)
    assert np.max(np.abs(got.view(np.int32) - want.view(np.int32))) <= 1   # one FMA vs float64 then float32
    assert np.all(guard[n:] == -7.0)
    m_in.release(ctx.stream)
    m_out.release(ctx.stream)


def test_a_bound_launch_runs_the_scale_kernel_with_each_launchs_arguments(ctx, rng):
    """Launcher.bind on the GPU: one native call a launch (the hot path), the argument values read
    at each launch (n rewritten in place), a bad launch raising CudaError with the kernel's name."""
    from tickgpu.runtime.driver import CudaError
    from tickgpu.runtime.launch import BoundLaunch

    n = 1000
    lau = ctx.launcher("scale", "f32", n, False)
    m_in, m_out = mapped(n * 4, ctx), mapped(n * 4, ctx)
    try:
        x = (rng.standard_normal(n) * 100).astype(np.float32)
        m_in.array(np.float32, (n,))[:] = x
        out = m_out.array(np.float32, (n,))
        out[:] = -7.0
        lau.args.pack(m_in.device_ptr, m_out.device_ptr, n)
        bound = lau.bind(n, ctx.stream)
        assert bound._run is not None          # the native call, not the launcher's Python path
        launches = lau.launches
        bound(sync=True)
        want = (x.astype(np.float64) * np.float64(np.float32(1.0001)) + 1.0).astype(np.float32)
        assert np.max(np.abs(out.view(np.int32) - want.view(np.int32))) <= 1
        out[:] = -7.0
        lau.args.set(2, n // 2)                # the next launch covers the first half only
        bound(sync=True)
        assert np.max(np.abs(out[: n // 2].view(np.int32) - want[: n // 2].view(np.int32))) <= 1
        assert np.all(out[n // 2:] == -7.0)
        assert lau.launches == launches + 2
        # A block size the device refuses (more than 1,024 threads): the driver's error, named.
        too_big = BoundLaunch(lau, (1, 1, 1), ctx.stream)
        too_big._desc.block_x = 4096
        with pytest.raises(CudaError, match=r"cuLaunchKernel failed: CUDA_ERROR_\w+ \(kernel scale_f32"):
            too_big(sync=True)
    finally:
        m_in.release(ctx.stream)
        m_out.release(ctx.stream)


def _chain(rng, n, dtype):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype))


@pytest.mark.parametrize("mode", ["auto", "explicit"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_managed_arrays_feed_greeks(ctx, rng, mode, dtype):
    n = 50_000
    host = _chain(rng, n, dtype)
    arrays = {}
    try:
        for k, v in host.items():
            a = arrays[k] = ManagedArray(n, dtype, context=ctx, mode=mode)
            a.write(0, v)
            a.prefetch()
        if mode == "explicit":
            assert all(a.mode == "explicit" for a in arrays.values())
        g = tickgpu.greeks(*(arrays[k] for k in ("spot", "strike", "t", "rate", "vol", "div")), True,
                           dtype=dtype, backend="gpu")
        c = tickgpu.greeks(*(host[k] for k in ("spot", "strike", "t", "rate", "vol", "div")), True,
                           dtype=dtype, backend="cpu")
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for name in ("price", "delta", "gamma", "vega", "theta"):
            gv = getattr(g, name)
            gv = gv.get() if hasattr(gv, "get") else np.asarray(gv)
            cv = np.asarray(getattr(c, name), dtype=np.float64)
            np.testing.assert_allclose(gv.astype(np.float64), cv, rtol=tol, atol=tol * np.abs(cv).max(), err_msg=name)
        # A host write to one block, prefetched alone, reaches the kernel.
        arrays["spot"].write(10, host["spot"][10:11] * 2)
        moved = arrays["spot"].prefetch()
        assert moved == arrays["spot"].block_bytes
        g2 = tickgpu.greeks(*(arrays[k] for k in ("spot", "strike", "t", "rate", "vol", "div")), True,
                            dtype=dtype, backend="gpu")
        price = g2.price.get() if hasattr(g2.price, "get") else np.asarray(g2.price)
        spot = host["spot"].copy()
        spot[10] *= 2
        ref = tickgpu.greeks(spot[8:13], host["strike"][8:13], host["t"][8:13], host["rate"][8:13],
                             host["vol"][8:13], host["div"][8:13], True, dtype=dtype, backend="cpu").price
        # Deep out-of-the-money prices underflow to denormals in float32: compare against the scale.
        np.testing.assert_allclose(price[8:13], ref, rtol=tol * 10, atol=tol * 10 * float(np.abs(ref).max()))
    finally:
        for a in arrays.values():
            a.close()


def test_managed_mode_detected_on_this_device(ctx):
    a = ManagedArray(1000, np.float32, context=ctx)
    attrs = (ctx.driver.device_attribute("MANAGED_MEMORY", ctx.device),
             ctx.driver.device_attribute("CONCURRENT_MANAGED_ACCESS", ctx.device))
    assert a.mode == ("managed" if all(attrs) else "explicit"), (attrs, a.reason)
    a.close()
