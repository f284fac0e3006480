"""ManagedArray on the mock driver: which blocks move, in which calls, and that data round-trips.

The mock's managed memory is host memory and its prefetch only records the call, so managed-mode
tests check the exact prefetch calls; explicit mode really copies between the pinned host array
and the mock's "device" memory, so its tests check data, including blocks that must NOT move.
"""
import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickgpu.memory import ManagedArray, PoolError
from tickgpu.memory.managed import free_margin
from tickgpu.runtime.device import Context

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, write_bundle  # noqa: E402

KB = 1024
BLOCK = 64 * KB
PER_BLOCK = BLOCK // 8          # float64 elements per 64 KB block


class ManagedMock(MockDriver):
    """A device that offers managed memory with concurrent access (or not, per `attrs`), and
    records explicit-mode copies."""

    def __init__(self, managed=1, concurrent=1):
        super().__init__()
        self.attrs = {"MANAGED_MEMORY": managed, "CONCURRENT_MANAGED_ACCESS": concurrent}
        self.copies: list[tuple[str, int, int]] = []   # (direction, device offset address, bytes)

    def device_attribute(self, name, device):
        return self.attrs[name] if name in self.attrs else super().device_attribute(name, device)

    def event_destroy(self, e):
        pass

    def memcpy_htod_async(self, dst, src, nbytes, stream):
        self.copies.append(("htod", dst, nbytes))
        super().memcpy_htod_async(dst, src, nbytes, stream)

    def memcpy_dtoh_async(self, dst, src, nbytes, stream):
        self.copies.append(("dtoh", src, nbytes))
        super().memcpy_dtoh_async(dst, src, nbytes, stream)


def _ctx(mock, tmp_path):
    return Context(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()))


@pytest.fixture
def mock():
    return ManagedMock()


@pytest.fixture
def ctx(mock, tmp_path):
    return _ctx(mock, tmp_path)


def _device(arr, dtype=np.float64):
    """The device copy's bytes, read straight from the mock's device memory."""
    raw = (ctypes.c_uint8 * arr.nbytes).from_address(arr.dev)
    return np.frombuffer(raw, dtype=np.uint8).view(dtype).copy()


def _device_write(arr, start, values):
    """A "kernel" writing the device copy at element `start`."""
    v = np.ascontiguousarray(values, dtype=arr.dtype)
    ctypes.memmove(arr.dev + start * arr.dtype.itemsize, v.ctypes.data, v.nbytes)


# ---- managed mode: the exact prefetch calls ---------------------------------------------------------
def test_block_prefetch_moves_only_dirty_runs(ctx, mock):
    n = 10 * PER_BLOCK - 100                    # the last block is partial
    a = ManagedArray(n, np.float64, context=ctx)
    assert a.mode == "managed" and a.reason == "" and mock.counts["mem_alloc_managed"] == 1
    p, s, dev = a.ptr, ctx.stream, ctx.device
    assert mock.advice == [(p, a.nbytes, "SET_READ_MOSTLY", dev)]
    assert a.prefetch() == a.nbytes               # nothing resident yet: the whole array, one call
    assert mock.prefetches == [(p, a.nbytes, dev, s)]
    mock.prefetches.clear()
    assert a.prefetch() == 0 and mock.prefetches == []
    a.write(3 * PER_BLOCK + 5, np.arange(10.0))                    # block 3
    a.write(6 * PER_BLOCK - 2, np.arange(4.0))                     # blocks 5 and 6
    a.mark_dirty(7 * PER_BLOCK, 7 * PER_BLOCK + 1)                 # block 7
    a.write(n - 1, [1.0])                                          # block 9 (partial)
    a.prefetch(stream=0x55)
    assert mock.prefetches == [(p + 3 * BLOCK, BLOCK, dev, 0x55), (p + 5 * BLOCK, 3 * BLOCK, dev, 0x55),
                               (p + 9 * BLOCK, a.nbytes - 9 * BLOCK, dev, 0x55)]
    mock.prefetches.clear()
    a.mark_dirty(0, n)
    a.prefetch(2 * PER_BLOCK + 7, 4 * PER_BLOCK + 1)               # blocks 2..4 only
    assert mock.prefetches == [(p + 2 * BLOCK, 3 * BLOCK, dev, s)]
    mock.prefetches.clear()
    a.prefetch(2 * PER_BLOCK, 4 * PER_BLOCK)                       # blocks 2, 3: already there
    assert mock.prefetches == []
    a.prefetch(0, n, to="host")                                    # read-mostly: host copy kept
    assert mock.prefetches == []
    a.close()


def test_whole_array_prefetch_and_migration_without_read_mostly(ctx, mock):
    a = ManagedArray((64, PER_BLOCK // 64 * 3), np.float64, context=ctx, read_mostly=False, prefer_device=True)
    p, dev, s = a.ptr, ctx.device, ctx.stream
    assert mock.advice == [(p, a.nbytes, "SET_PREFERRED_LOCATION", dev)]
    a.prefetch(blocks=False)
    a.prefetch(blocks=False)                      # whole-array mode moves everything every time
    assert mock.prefetches == [(p, a.nbytes, dev, s)] * 2
    mock.prefetches.clear()
    a.prefetch(0, PER_BLOCK, to="host")           # migrated to the device, so block 0 comes back
    assert mock.prefetches == [(p, BLOCK, None, s)]
    mock.prefetches.clear()
    a.prefetch()                                  # ...and must go again
    assert mock.prefetches == [(p, BLOCK, dev, s)]


def test_custom_block_size(ctx, mock):
    a = ManagedArray(4 * 4096 // 4, np.float32, context=ctx, block_bytes=4096)
    a.prefetch()
    mock.prefetches.clear()
    a.write(1024 + 1, [1, 2])
    a.write(3 * 1024, [1])
    a.prefetch()
    assert mock.prefetches == [(a.ptr + 4096, 4096, ctx.device, ctx.stream), (a.ptr + 3 * 4096, 4096, ctx.device, ctx.stream)]


def test_managed_round_trip_and_interface(ctx, rng):
    x = rng.standard_normal(3 * PER_BLOCK)
    a = ManagedArray(x.size, np.float64, context=ctx)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"] == (a.ptr, False) and cai["shape"] == (x.size,)
    assert cai["typestr"] == "<f8" and cai["stream"] is None
    a.write(0, x)
    np.testing.assert_array_equal(a.host, x)
    a.prefetch(stream=0x99)
    assert a.__cuda_array_interface__["stream"] == 0x99


# ---- mode choice ---------------------------------------------------------------------------------------
def test_explicit_forced_by_mode(ctx, mock):
    a = ManagedArray(100, context=ctx, mode="explicit")
    assert a.mode == "explicit" and "mode='explicit'" in a.reason and mock.counts["mem_alloc_managed"] == 0


def test_explicit_forced_by_env(ctx, mock, monkeypatch):
    monkeypatch.setenv("TICKGPU_MANAGED", "explicit")
    a = ManagedArray(100, context=ctx)
    assert a.mode == "explicit" and "TICKGPU_MANAGED" in a.reason and mock.counts["mem_alloc_managed"] == 0


@pytest.mark.parametrize("managed,concurrent,word", [(1, 0, "CONCURRENT_MANAGED_ACCESS 0"), (0, 0, "MANAGED_MEMORY 0")])
def test_explicit_when_device_degraded(tmp_path, managed, concurrent, word):
    mock = ManagedMock(managed, concurrent)
    ctx = _ctx(mock, tmp_path)
    a = ManagedArray(100, context=ctx)
    assert a.mode == "explicit" and word in a.reason and mock.counts["mem_alloc_managed"] == 0
    with pytest.raises(PoolError, match=word):
        ManagedArray(100, context=ctx, mode="managed")


def test_explicit_when_attributes_unknown(tmp_path):
    class Unknowing(MockDriver):
        def device_attribute(self, name, device):
            if name in ("MANAGED_MEMORY", "CONCURRENT_MANAGED_ACCESS"):
                raise KeyError(name)   # a driver that cannot say
            return super().device_attribute(name, device)

    ctx = _ctx(Unknowing(), tmp_path)
    a = ManagedArray(100, context=ctx)
    assert a.mode == "explicit" and "unreadable" in a.reason


# ---- refusal and bad arguments ------------------------------------------------------------------------
def test_refuses_more_than_free_less_margin(ctx, mock):
    mock.total_bytes = 16 << 30
    margin = free_margin(mock.total_bytes)
    assert margin == 1 << 30
    mock.free_bytes = margin + (1 << 20)
    ManagedArray((1 << 20) // 8, np.float64, context=ctx).close()
    with pytest.raises(PoolError, match=f"{2 << 20} bytes requested, {mock.free_bytes} bytes free"):
        ManagedArray((2 << 20) // 8, np.float64, context=ctx)
    with pytest.raises(PoolError, match="requested"):
        ManagedArray((2 << 20) // 8, np.float64, context=ctx, mode="explicit")
    assert free_margin(141 << 30) == (141 << 30) * 3 // 100


def test_bad_arguments_and_closed(ctx):
    with pytest.raises(ValueError, match="block_bytes"):
        ManagedArray(10, context=ctx, block_bytes=1000)
    with pytest.raises(ValueError, match="mode"):
        ManagedArray(10, context=ctx, mode="uvm")
    a = ManagedArray(10, context=ctx)
    with pytest.raises(IndexError, match=r"\[5, 11\)"):
        a.prefetch(5, 11)
    with pytest.raises(IndexError):
        a.write(8, [1, 2, 3])
    with pytest.raises(ValueError, match="to must be"):
        a.prefetch(to="gpu")
    a.close()
    with pytest.raises(PoolError, match="closed"):
        a.prefetch()
    empty = ManagedArray(0, context=ctx)
    assert empty.prefetch() == 0 and empty.host.shape == (0,)
    empty.close()


# ---- explicit mode: data --------------------------------------------------------------------------------
def test_explicit_round_trip_moves_only_dirty_blocks(ctx, mock, rng):
    n = 8 * PER_BLOCK
    a = ManagedArray(n, np.float64, context=ctx, mode="explicit")
    x = rng.standard_normal(n)
    a.write(0, x)
    a.prefetch()
    np.testing.assert_array_equal(_device(a), x)
    # A kernel writes blocks 2..3 on the device; the host learns of it by mark_dirty.
    y = rng.standard_normal(2 * PER_BLOCK)
    _device_write(a, 2 * PER_BLOCK, y)
    a.mark_dirty(2 * PER_BLOCK, 4 * PER_BLOCK, side="device")
    mock.copies.clear()
    a.prefetch(to="host")
    assert mock.copies == [("dtoh", a.dev + 2 * BLOCK, 2 * BLOCK)]
    x[2 * PER_BLOCK:4 * PER_BLOCK] = y
    np.testing.assert_array_equal(a.host, x)
    # Block 5 is changed on the device behind the array's back; a host write to block 1 must move
    # only block 1, so block 5's device bytes stay as they are.
    marker = np.full(PER_BLOCK, 7.0)
    _device_write(a, 5 * PER_BLOCK, marker)
    a.write(PER_BLOCK + 3, [42.0])
    mock.copies.clear()
    a.prefetch()
    assert mock.copies == [("htod", a.dev + BLOCK, BLOCK)]
    d = _device(a)
    assert d[PER_BLOCK + 3] == 42.0 and (d[5 * PER_BLOCK:6 * PER_BLOCK] == 7.0).all()


def test_explicit_write_into_device_only_block_keeps_the_rest(ctx, rng):
    n = 3 * PER_BLOCK
    a = ManagedArray(n, np.float64, context=ctx, mode="explicit")
    a.write(0, np.zeros(n))
    a.prefetch()
    y = rng.standard_normal(PER_BLOCK)
    _device_write(a, PER_BLOCK, y)
    a.mark_dirty(PER_BLOCK, 2 * PER_BLOCK, side="device")
    a.write(PER_BLOCK + 10, [5.0])     # the block's other elements are the device's, not stale host bytes
    a.prefetch()
    y[10] = 5.0
    np.testing.assert_array_equal(_device(a)[PER_BLOCK:2 * PER_BLOCK], y)
    assert a.__cuda_array_interface__["data"] == (a.dev, False)


_steps = st.lists(st.one_of(
    st.tuples(st.just("host"), st.integers(0, 5 * 512 - 1), st.integers(1, 1500)),
    st.tuples(st.just("device"), st.integers(0, 5 * 512 - 1), st.integers(1, 1500)),
    st.tuples(st.just("prefetch"), st.integers(0, 5 * 512), st.integers(0, 5 * 512), st.sampled_from(["device", "host"]))),
    max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_explicit_random_writes_and_prefetches_stay_coherent(ctx, steps):
    """Against a model: `truth` is the latest value of every element, whichever side wrote it;
    after a prefetch of a range to a side, that side holds the truth over the range."""
    n = 5 * 512                          # 5 blocks of 4 KB
    a = ManagedArray(n, np.float64, context=ctx, mode="explicit", block_bytes=4096)
    truth = np.arange(n, dtype=np.float64)
    a.write(0, truth)
    a.prefetch()
    counter = 1000.0
    for step in steps:
        if step[0] in ("host", "device"):
            start = step[1]
            vals = counter + np.arange(min(step[2], n - start))
            counter += 10_000
            if step[0] == "host":
                a.write(start, vals)
            else:
                # A device write: make sure the device holds the block's truth first (a kernel
                # writes into current data), then write, then declare it.
                a.prefetch(start, start + vals.size)
                _device_write(a, start, vals)
                a.mark_dirty(start, start + vals.size, side="device")
            truth[start:start + vals.size] = vals
        else:
            lo, hi = sorted(step[1:3])
            a.prefetch(lo, hi, to=step[3])
            side = _device(a) if step[3] == "device" else a.host
            np.testing.assert_array_equal(side[lo:hi], truth[lo:hi])
    a.prefetch(to="host")
    np.testing.assert_array_equal(a.host, truth)
    a.close()


@pytest.mark.parametrize("mode", ["managed", "explicit"])
def test_a_view_kept_past_close_keeps_the_memory(ctx, mock, mode):
    """close() used to free the memory under a host view still held elsewhere (a segfault in
    managed mode; in explicit mode writes went into the pinned slot's next holder). The view now
    keeps it: freed when the view goes. An array dropped without close() is freed too."""
    import gc

    arr = ManagedArray(4096, np.float64, context=ctx, mode=mode)
    held = arr.host
    ptr = arr.dev
    arr.close()
    held[:] = 2.5                               # still this array's memory
    assert held.sum() == 2.5 * 4096 and ptr in mock.sizes
    with pytest.raises(PoolError):
        arr.prefetch()
    del held
    gc.collect()
    assert ptr not in mock.sizes                # freed with the last view
    before = len(mock.sizes)
    for _ in range(5):
        ManagedArray(4096, np.float64, context=ctx, mode=mode)   # dropped, never closed
    gc.collect()
    assert len(mock.sizes) == before
