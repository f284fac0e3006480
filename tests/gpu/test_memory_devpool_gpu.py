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


def test_both_levels_hold_data(ctx, pool, rng):
    small = [pool.alloc(n) for n in (1, 700, 4096, 65536, MB)]
    large = [pool.alloc(n) for n in (MB + 1, 8 * MB, 100 * MB)]
    assert [b.level for b in small] == [1] * 5 and [b.level for b in large] == [2] * 3
    assert all(b.ptr % 512 == 0 for b in small)
    datas = [_roundtrip(ctx, b, rng) for b in small + large]
    # A device-to-device copy from level 1 to level 2 and back through the driver.
    ctx.driver.memcpy_dtod_async(large[0].ptr, small[4].ptr, MB, ctx.stream)
    ctx.driver.stream_synchronize(ctx.stream)
    back = np.empty(MB, np.uint8)
    ctx.driver.memcpy_dtoh(back.ctypes.data, large[0].ptr, MB)
    np.testing.assert_array_equal(back, datas[4])
    for b in small + large:
        pool.free(b, ctx.stream)
    pool.flush()
    s = pool.stats()
    assert s.in_use == 0 and s.pending_bytes == 0 and s.served_slab == 5 and s.served_driver == 3
    assert s.driver_allocs == 1 + 3          # one block for every small buffer, one call per large one


def test_stats_agree_with_driver_pool(ctx, pool):
    bufs = [pool.alloc(n) for n in (3 * MB, 17 * MB, 64 * MB)]
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
    before = pool.stats().served_slab + pool.stats().served_driver
    x_host = rng.standard_normal(300_000)
    with cupy.cuda.using_allocator(pool.cupy_allocator()):
        x = cupy.asarray(x_host)
        y = cupy.sqrt(x * x + 1.0).sum()
        assert pool.stats().in_use >= x_host.nbytes
        np.testing.assert_allclose(float(y), np.sqrt(x_host * x_host + 1.0).sum(), rtol=1e-10)
        del x, y
    cupy.cuda.Stream.null.synchronize()
    s = pool.stats()
    assert s.served_slab + s.served_driver - before >= 2
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
print(json.dumps({"err": err, "small": small, "served": s.served_slab + s.served_driver, "in_use": s.in_use}))
"""


def test_torch_allocator():
    pytest.importorskip("torch", reason="torch not installed")
    r = subprocess.run([sys.executable, "-c", TORCH_SCRIPT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["err"] < 1e-10 and out["small"] == 10.0
    assert out["served"] >= 3                 # a, b, the product, at least: PyTorch used the pool
