"""The device pool on a real GPU: both levels hold data written and read back through the driver,
statistics agree with the driver pool's own attributes, the cap and lazy frees behave, and the CuPy
and PyTorch adapters really allocate from the pool (its statistics move) and compute correctly.

The PyTorch allocator can be swapped only before PyTorch's first GPU allocation in a process, so
that test runs in a fresh interpreter.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

import tickgpu.runtime as rt
from tickgpu.memory import DevicePool, PoolError

pytestmark = pytest.mark.gpu

MB = 1 << 20


@pytest.fixture(scope="module")
def ctx():
    c = rt.context()
    c.enter()
    return c


@pytest.fixture
def pool(ctx):
    p = DevicePool(ctx, slab_block_bytes=64 * MB, slab_blocks=2, small_max=MB)
    yield p
    p.close()


def _roundtrip(ctx, buf, rng):
    host = rng.integers(0, 256, buf.nbytes, dtype=np.uint8)
    ctx.driver.memcpy_htod(buf.ptr, host.ctypes.data, buf.nbytes)
    back = np.empty_like(host)
    ctx.driver.memcpy_dtoh(back.ctypes.data, buf.ptr, buf.nbytes)
    np.testing.assert_array_equal(back, host)
    return host


def test_all_levels_hold_data(ctx, pool, rng):
    small = [pool.alloc(n) for n in (1, 700, 4096, 65536, MB)]
    mid = pool.alloc(MB + 1)                                     # above level 1, below level 3's 2 MB
    large = [pool.alloc(n) for n in (8 * MB, 100 * MB)]
    assert [b.level for b in small] == [1] * 5 and mid.level == 2 and [b.level for b in large] == [3, 3]
    assert all(b.ptr % 512 == 0 for b in small)
    s = pool.stats()
    assert s.vmm_enabled and not s.vmm_reason and s.vmm_granule > 0
    assert s.vmm_granules == sum(-(-b.nbytes // s.vmm_granule) for b in large)
    datas = [_roundtrip(ctx, b, rng) for b in small + [mid] + large]
    # Device-to-device copies between the levels, through the driver.
    ctx.driver.memcpy_dtod_async(mid.ptr, small[4].ptr, MB, ctx.stream)
    ctx.driver.memcpy_dtod_async(large[1].ptr + 50 * MB, mid.ptr, MB, ctx.stream)
    ctx.driver.stream_synchronize(ctx.stream)
    back = np.empty(MB, np.uint8)
    ctx.driver.memcpy_dtoh(back.ctypes.data, large[1].ptr + 50 * MB, MB)
    np.testing.assert_array_equal(back, datas[4])
    for b in small + [mid] + large:
        pool.free(b, ctx.stream)
    pool.flush()
    s = pool.stats()
    assert s.in_use == 0 and s.pending_bytes == 0
    assert (s.served_slab, s.served_driver, s.served_vmm) == (5, 1, 2)
    assert s.vmm_ranges_cached == 2           # freed large ranges stay mapped for reuse
    again = pool.alloc(100 * MB)              # same rounded size: the cached range, no driver call
    calls = s.vmm_driver_calls
    assert again.level == 3 and pool.stats().vmm_cache_hits == 1 and pool.stats().vmm_driver_calls == calls
    _roundtrip(ctx, again, rng)
    pool.free(again)


def test_classic_fragmentation_case_on_device(ctx, rng):
    """Many 4 MB buffers, every other one freed, then one 1 GB request: level 3 serves it from the
    freed granules (no new physical memory), data intact; closing returns the memory to the device."""
    free0, _ = ctx.driver.mem_get_info()
    with DevicePool(ctx, slab_block_bytes=64 * MB, slab_blocks=1) as p:
        bufs = [p.alloc(4 * MB) for _ in range(512)]            # 2 GB
        keep = bufs[1::2]
        marks = {}
        for b in keep[::37]:
            marks[b.ptr] = _roundtrip(ctx, b, rng)
        for b in bufs[::2]:
            p.free(b)
        p.flush()
        created = p.stats().vmm_granules_created
        big = p.alloc(1 << 30)
        s = p.stats()
        assert big.level == 3 and s.vmm_granules_created == created, "the 1 GB request made new granules"
        assert s.peak_in_use / s.peak_reserved >= 0.85, (s.peak_in_use, s.peak_reserved)
        _roundtrip(ctx, big, rng)
        for b in keep[::37]:                                    # the live buffers kept their data
            back = np.empty(4 * MB, np.uint8)
            ctx.driver.memcpy_dtoh(back.ctypes.data, b.ptr, 4 * MB)
            np.testing.assert_array_equal(back, marks[b.ptr])
        for b in keep + [big]:
            p.free(b)
    free1, _ = ctx.driver.mem_get_info()
    assert free1 >= free0 - 64 * MB, (free0, free1)          # everything given back (allocator noise aside)


def test_stats_agree_with_driver_pool(ctx):
    with DevicePool(ctx, slab_block_bytes=64 * MB, slab_blocks=2, small_max=MB, vmm_min_bytes=None) as pool:
        assert not pool.stats().vmm_enabled and pool.stats().vmm_reason
        _driver_pool_stats(ctx, pool)


def _driver_pool_stats(ctx, pool):
    bufs = [pool.alloc(n) for n in (3 * MB, 17 * MB, 64 * MB)]
    assert [b.level for b in bufs] == [2, 2, 2]
    s, raw = pool.stats(), pool.stats_raw()
    reserved = ctx.driver.mem_pool_attribute(pool.driver_pool, "RESERVED_MEM_CURRENT")
    used = ctx.driver.mem_pool_attribute(pool.driver_pool, "USED_MEM_CURRENT")
    assert s.reserved == raw.blocks * 64 * MB + reserved
    assert used >= sum(pool.rounded(b.nbytes) for b in bufs) and s.in_use == sum(pool.rounded(b.nbytes) for b in bufs)
    for b in bufs:
        pool.free(b)
    assert ctx.driver.mem_pool_attribute(pool.driver_pool, "USED_MEM_CURRENT") == used   # lazy: not yet
    pool.flush()
    ctx.driver.ctx_synchronize()
    assert ctx.driver.mem_pool_attribute(pool.driver_pool, "USED_MEM_CURRENT") == 0
    # The raised release threshold keeps the memory cached in the driver pool across the sync.
    assert ctx.driver.mem_pool_attribute(pool.driver_pool, "RESERVED_MEM_CURRENT") == reserved


def test_cap_on_device(ctx):
    free, total = ctx.driver.mem_get_info()
    with DevicePool(ctx, fraction=0.01) as p:
        assert p.cap == int(0.01 * total)
        with pytest.raises(PoolError, match="cap"):
            p.alloc(p.cap + MB)
        b = p.alloc(p.cap // 2)
        p.free(b)


def test_many_small_buffers_one_driver_call(ctx, pool, rng):
    # 2,000 buffers of up to 16 KB (~17 MB with their size classes) fit one 64 MB level-1 block.
    sizes = rng.integers(1, 16 << 10, 2000)
    bufs = [pool.alloc(int(n)) for n in sizes]
    assert pool.stats().driver_allocs == 1
    ends = sorted((b.ptr, b.ptr + pool.rounded(b.nbytes)) for b in bufs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ends, ends[1:]))
    for b in bufs:
        pool.free(b)


def test_cupy_allocator(ctx, pool, rng):
    cupy = pytest.importorskip("cupy", reason="cupy not installed")
    before = pool.stats().served_slab + pool.stats().served_driver + pool.stats().served_vmm
    x_host = rng.standard_normal(300_000)
    with cupy.cuda.using_allocator(pool.cupy_allocator()):
        x = cupy.asarray(x_host)
        y = cupy.sqrt(x * x + 1.0).sum()
        assert pool.stats().in_use >= x_host.nbytes
        np.testing.assert_allclose(float(y), np.sqrt(x_host * x_host + 1.0).sum(), rtol=1e-10)
        del x, y
    cupy.cuda.Stream.null.synchronize()
    s = pool.stats()
    assert s.served_slab + s.served_driver + s.served_vmm - before >= 2
    assert s.in_use == 0                      # CuPy's references dropped: freed into the pool


TORCH_SCRIPT = r"""
import json, torch
import tickgpu.runtime as rt
from tickgpu.memory import DevicePool
ctx = rt.context()
pool = DevicePool(ctx, small_max=1 << 20)
torch.cuda.memory.change_current_allocator(pool.torch_allocator())
g = torch.Generator().manual_seed(5)
a = torch.randn(512, 256, generator=g, dtype=torch.float64)
b = torch.randn(256, 128, generator=g, dtype=torch.float64)
c = (a.cuda() @ b.cuda()).cpu()
err = float((c - a @ b).abs().max())
small = torch.ones(10, device="cuda").sum().item()
s = pool.stats()
print(json.dumps({"err": err, "small": small, "served": s.served_slab + s.served_driver + s.served_vmm,
                  "in_use": s.in_use}))
"""


def test_torch_allocator():
    pytest.importorskip("torch", reason="torch not installed")
    r = subprocess.run([sys.executable, "-c", TORCH_SCRIPT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["err"] < 1e-10 and out["small"] == 10.0
    assert out["served"] >= 3                 # a, b, the product, at least: PyTorch used the pool


def test_cupy_frees_on_a_stream_destroyed_before_the_flush(ctx, pool, rng):
    """CuPy frees on the stream current at allocation; that stream may be garbage-collected (and
    destroyed) before the pool's next flush. The flush waits on events recorded at free time, so it
    neither fails nor touches the dead handle, and the memory is reused."""
    cupy = pytest.importorskip("cupy", reason="cupy not installed")
    import gc

    x_host = rng.standard_normal(1 << 20)              # 8 MB: a level-3 range
    with cupy.cuda.using_allocator(pool.cupy_allocator()):
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            x = cupy.asarray(x_host)
            y = float((x * 2.0).sum())
            small = cupy.arange(1000)                  # a level-1 chunk on the same stream
        s.synchronize()
        del x, small, s
        gc.collect()
    np.testing.assert_allclose(y, 2.0 * x_host.sum(), rtol=1e-10)
    pool.flush()                                        # must not raise
    st = pool.stats()
    assert st.in_use == 0 and st.pending_bytes == 0
    again = pool.alloc(8 << 20)
    assert again.level == 3 and pool.stats().vmm_cache_hits >= 1
    _roundtrip(ctx, again, rng)
    pool.free(again)
