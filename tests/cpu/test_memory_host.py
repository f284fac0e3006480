"""PinnedPool on the mock driver, and the native huge-page mapping on this machine.

The mock registers host memory without pinning it, so everything here runs on a CPU; the
mappings themselves are real (tg_host_map), so alignment, sizes and backing are the OS's.
"""
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickgpu._native import ffi, lib
from tickgpu.memory import MappedBuffer, PinnedBuffer, PinnedPool, PoolError, mapped
from tickgpu.memory.host import default_pinned_pool, huge_pages_offered, size_class
from tickgpu.runtime.device import Context

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, write_bundle  # noqa: E402

MB = 1 << 20


class AsyncMock(MockDriver):
    """Events stay pending after a record until the test completes them (the GPU is "busy");
    registration flags and destroyed events are recorded."""

    def __init__(self):
        super().__init__()
        self.recorded: list[tuple[int, int]] = []
        self.flags: dict[int, int] = {}
        self.destroyed: list[int] = []

    def event_record(self, e, s):
        self.recorded.append((e, s))
        self.pending_events.add(e)

    def event_destroy(self, e):
        self.destroyed.append(e)

    def mem_host_register(self, ptr, nbytes, flags=3):
        super().mem_host_register(ptr, nbytes, flags)
        self.flags[ptr] = flags


@pytest.fixture
def mock():
    return AsyncMock()


@pytest.fixture
def ctx(mock, tmp_path):
    return Context(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()))


@pytest.fixture
def pool(ctx):
    p = PinnedPool(ctx, arena_bytes=8 * MB)
    yield p
    p.close()


def _complete_all(mock):
    mock.pending_events.clear()


# ---- size classes ------------------------------------------------------------------------------
@pytest.mark.parametrize("n,cls", [(0, 4096), (1, 4096), (4096, 4096), (4097, 8192), (MB, MB), (MB + 1, MB + MB // 4),
                                   (2 * MB, 2 * MB), (2 * MB + 1, 2 * MB + MB // 2), (100 * MB, 112 * MB)])
def test_size_class_table(n, cls):
    assert size_class(n) == cls


@given(st.integers(0, 1 << 34))
def test_size_class_bounds(n):
    c = size_class(n)
    assert c >= n and c % 4096 == 0
    # Waste: under a factor 2 up to 1 MB, under a quarter of the request above.
    assert c < max(2 * n, 4096 + 1) if n <= MB else c - n < n / 4 + 1


# ---- the native mapping -------------------------------------------------------------------------
def test_host_map_rejects_bad_arguments():
    out, mb, b = ffi.new("void **"), ffi.new("uint64_t *"), ffi.new("int *")
    assert lib.tg_host_map(0, 0, out, mb, b) == lib.TG_EINVAL
    assert lib.tg_host_map(4096, 3, out, mb, b) == lib.TG_EINVAL
    assert lib.tg_host_map(4096, -1, out, mb, b) == lib.TG_EINVAL
    assert lib.tg_host_map(4096, 0, ffi.NULL, mb, b) == lib.TG_EINVAL
    assert lib.tg_host_map(4096, 0, out, ffi.NULL, b) == lib.TG_EINVAL
    assert lib.tg_host_map(1 << 50, 0, out, mb, b) == lib.TG_EINVAL
    assert lib.tg_host_unmap(ffi.NULL, 4096) == lib.TG_EINVAL
    assert lib.tg_host_unmap(ffi.cast("void *", 4096 * 5 + 64), 4096) == lib.TG_EINVAL


@pytest.mark.parametrize("want", [0, 1, 2])
def test_host_map_backing_alignment_and_contents(want):
    offered = huge_pages_offered()
    out, mb, b = ffi.new("void **"), ffi.new("uint64_t *"), ffi.new("int *")
    n = 3 * MB + 5
    assert lib.tg_host_map(n, want, out, mb, b) == lib.TG_OK
    p, length, backing = int(ffi.cast("uintptr_t", out[0])), int(mb[0]), int(b[0])
    try:
        if want == 2 and offered["hugetlb_free"] >= 2:
            expect = lib.TG_HOST_HUGETLB
        elif want >= 1 and offered["thp"] != "unavailable":
            expect = lib.TG_HOST_THP
        else:
            expect = lib.TG_HOST_PAGES
        assert backing == expect, (backing, offered)
        if backing == lib.TG_HOST_PAGES:
            assert length == -(-n // 4096) * 4096 and p % 4096 == 0
        else:
            assert length == 4 * MB and p % (2 * MB) == 0
        a = np.frombuffer(ffi.buffer(out[0], length), dtype=np.uint8)
        assert not a.any()                       # anonymous memory starts zeroed
        a[:] = 0xA5                              # and is writable over its whole length
        assert (a == 0xA5).all()
        del a
    finally:
        assert lib.tg_host_unmap(out[0], length) == lib.TG_OK


def test_pool_backing_on_this_machine(pool):
    buf = pool.acquire(1000)
    s = pool.stats()
    offered = s["huge_pages"]
    expect = ("hugetlb" if offered["hugetlb_free"] >= 4 else
              "thp" if offered["thp"] in ("always", "madvise") else "pages")
    assert s["backing"] == expect and s["fallback_reason"] is None
    assert buf.ptr % 64 == 0 and s["reserved"] == 8 * MB and s["arenas"] == 1
    pool.release(buf)


# ---- carving, alignment, reuse ------------------------------------------------------------------------
def test_alignment_no_overlap_and_contents(pool, mock, rng):
    sizes = rng.integers(1, 3 * MB, 40).tolist() + [0, 1, 4096, 4097, 9 * MB]
    bufs = [pool.acquire(int(n)) for n in sizes]
    spans = sorted((b.ptr, b.ptr + b.capacity) for b in bufs)
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:])), "live buffers overlap"
    for b, n in zip(bufs, sizes):
        assert b.ptr % 64 == 0 and b.nbytes == n and b.capacity == size_class(n)
        assert any(base <= b.ptr and b.ptr + b.capacity <= base + size for base, size in mock.registered.items())
        assert b.device_ptr == mock.host_device_pointer(b.ptr)
    for i, b in enumerate(bufs):       # a distinct tag in each: overlap would overwrite one
        b.array()[:] = i % 251
    for i, b in enumerate(bufs):
        assert (b.array() == i % 251).all()
    s = pool.stats()
    assert s["in_use"] == sum(size_class(n) for n in sizes) and s["buffers"] == len(sizes)
    assert s["reserved"] >= s["in_use"] and s["arenas"] >= 2     # the 9 MB request got its own arena
    assert all(f == 3 for f in mock.flags.values())              # PORTABLE | DEVICEMAP
    for b in bufs:
        pool.release(b)
    assert pool.stats()["in_use"] == 0


def test_reuse_by_size_class(pool):
    a = pool.acquire(5000)
    ptr = a.ptr
    pool.release(a)
    b = pool.acquire(7000)               # same 8 KB class: reused
    assert b.ptr == ptr and pool.stats()["reuses"] == 1
    c = pool.acquire(3000)               # 4 KB class: new
    assert c.ptr != ptr and pool.stats()["reuses"] == 1 and pool.stats()["buffers"] == 2


def test_in_flight_buffer_not_reused_until_event_completes(pool, mock):
    a = pool.acquire(10_000)
    ptr = a.ptr
    pool.release(a, stream=0x77)
    (ev, stream), = mock.recorded
    assert stream == 0x77 and ev in mock.pending_events
    b = pool.acquire(10_000)
    assert b.ptr != ptr, "a buffer was handed out while a copy on its stream may still run"
    assert pool.stats()["in_flight"] == 1
    mock.pending_events.discard(ev)      # the stream passed the release
    assert pool.stats()["in_flight"] == 0
    c = pool.acquire(10_000)
    assert c.ptr == ptr and pool.stats()["reuses"] == 1
    pool.release(c, stream=0x78)         # the slot's event is made once and reused
    assert mock.recorded[-1][0] == ev


def test_release_whose_event_fails_keeps_the_buffer_held(pool, mock):
    from tickgpu.runtime.driver import CudaError

    a = pool.acquire(10_000)
    held = pool.stats()["in_use"]

    def refuse(e, s):
        raise CudaError("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE", 400)

    mock.event_record = refuse
    with pytest.raises(CudaError, match="INVALID_HANDLE"):
        pool.release(a, stream=0x77)
    assert not a.released and pool.stats()["in_use"] == held   # still the holder's, not lost
    del mock.event_record                    # the driver records again
    a.release(stream=0x77)                   # so it can still be given back, exactly once
    assert a.released and pool.stats()["in_flight"] == 1 and pool.stats()["in_use"] == held - a.capacity
    _complete_all(mock)
    assert pool.acquire(10_000).ptr == a.ptr


def test_array_is_a_view(pool):
    buf = pool.acquire(4 * 100 + 3)
    a = buf.array(np.float32)
    assert a.shape == (100,) and a.ctypes.data == buf.ptr
    m = buf.array(np.float32, (10, 10))
    m[3, 4] = 7.5
    assert a[34] == 7.5
    with pytest.raises(ValueError, match="needs 404 bytes"):
        buf.array(np.float32, (101,))
    pool.release(buf)
    with pytest.raises(PoolError, match="after release"):
        buf.array()


def test_double_release_foreign_and_closed(ctx, pool):
    a = pool.acquire(100)
    pool.release(a)
    with pytest.raises(PoolError, match="twice"):
        pool.release(a)
    b = pool.acquire(100)
    assert b.ptr == a.ptr                # a's slot, now b's: releasing a again must still fail
    with pytest.raises(PoolError, match="twice"):
        pool.release(a)
    other = PinnedPool(ctx, arena_bytes=2 * MB)
    x = other.acquire(100)
    with pytest.raises(PoolError, match="not handed out by this pool"):
        pool.release(x)
    with pytest.raises(PoolError, match="not handed out"):
        pool.release(object())
    other.release(x)
    other.close()
    with pytest.raises(PoolError, match="closed"):
        other.acquire(10)
    with pytest.raises(PoolError, match="closed"):
        other.release(x)
    with pytest.raises(ValueError, match="nbytes"):
        pool.acquire(-1)


def test_close_waits_unregisters_and_reports(ctx, mock):
    others = dict(mock.registered)            # the context's own pool (staging, constants)
    p = PinnedPool(ctx, arena_bytes=2 * MB)
    a, b = p.acquire(100), p.acquire(200)
    p.release(a, stream=5)
    assert mock.pending_events
    with pytest.warns(ResourceWarning, match="still held"):
        p.close()
    assert not mock.pending_events            # waited for the in-flight copy before unmapping
    assert mock.registered == others and mock.destroyed
    with pytest.raises(PoolError):
        b.array()
    p.close()                                 # twice is harmless


def test_unmapped_pool_registers_portable_only(ctx, mock):
    others = set(mock.flags)                 # the context's own pool (staging, constants)
    p = PinnedPool(ctx, arena_bytes=2 * MB, mapped=False, huge_pages="off")
    buf = p.acquire(10)
    assert buf.device_ptr is None and {f for a, f in mock.flags.items() if a not in others} == {1}
    assert p.stats()["backing"] == "pages"
    p.release(buf)
    p.close()


def test_fallback_to_cuMemHostAlloc_when_registration_refused(ctx, mock):
    others = dict(mock.registered)           # the context's own pool (staging, constants)
    mock.fail["cuMemHostRegister"] = "CUDA_ERROR_NOT_PERMITTED"
    p = PinnedPool(ctx, arena_bytes=2 * MB)
    before = mock.counts["mem_host_alloc"]
    with pytest.warns(RuntimeWarning, match="cuMemHostAlloc.*CUDA_ERROR_NOT_PERMITTED"):
        a = p.acquire(MB)
    s = p.stats()
    assert s["backing"] == "cuMemHostAlloc" and "CUDA_ERROR_NOT_PERMITTED" in s["fallback_reason"]
    assert mock.counts["mem_host_alloc"] == before + 1 and mock.registered == others
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # said once per pool, not per arena
        b = p.acquire(3 * MB)
    assert mock.counts["mem_host_alloc"] == before + 2
    a.array()[:] = 1
    b.array()[:] = 2
    assert (a.array() == 1).all() and a.ptr % 64 == 0 and a.device_ptr == a.ptr
    p.release(a)
    p.release(b)
    p.close()
    assert mock.sizes.keys().isdisjoint({a.ptr, b.ptr})   # arenas given back with cuMemFreeHost


def test_fallback_arena_without_device_mapping_is_freed(ctx, mock):
    from tickgpu.runtime.driver import CudaError

    mock.fail["cuMemHostRegister"] = "CUDA_ERROR_NOT_PERMITTED"
    p = PinnedPool(ctx, arena_bytes=2 * MB)
    live = set(mock.sizes)

    def no_mapping(ptr):
        raise CudaError("cuMemHostGetDevicePointer", "CUDA_ERROR_NOT_SUPPORTED", 801)

    mock.host_device_pointer = no_mapping
    with pytest.raises(PoolError, match="NOT_PERMITTED.*NOT_SUPPORTED"):
        p.acquire(MB)
    assert set(mock.sizes) == live, "the cuMemHostAlloc arena leaked"
    # No arena came of it: the pool has not turned to cuMemHostAlloc (nor said it had).
    assert p.stats()["arenas"] == 0 and p.stats()["fallback_reason"] is None
    p.close()


def test_default_pool_and_mapped(ctx):
    p = default_pinned_pool(ctx)
    assert default_pinned_pool(ctx) is p
    m = mapped(256, ctx)
    assert isinstance(m, MappedBuffer) and isinstance(m, PinnedBuffer) and m.device_ptr is not None
    with m:
        m.array(np.float32)[:] = 3
    assert m.released
    # The context's staging lives in its default pool and the GPU uses it in place: no closing it.
    with pytest.raises(PoolError, match="read and written in place by the GPU"):
        p.close()
    assert not p._closed and default_pinned_pool(ctx) is p
    m = mapped(256, ctx)
    m.array(np.float32)[:] = 5                    # still mapped
    m.release()


def test_threads_never_share_a_buffer(pool):
    seen, errors = [], []

    def work(tag):
        try:
            for i in range(200):
                b = pool.acquire(4096 * (1 + (i + tag) % 3))
                a = b.array()
                a[:] = tag
                if not (a == tag).all():
                    errors.append(tag)
                seen.append(b.ptr)
                pool.release(b)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and pool.stats()["in_use"] == 0


# ---- random acquire/release orders against a model ---------------------------------------------
_ops = st.lists(st.one_of(
    st.tuples(st.just("acquire"), st.integers(0, 3 * MB)),
    st.tuples(st.just("release"), st.integers(0, 1000), st.booleans()),
    st.tuples(st.just("complete"), st.integers(0, 1000))), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_random_orders_keep_buffers_exclusive(ctx, mock, ops):
    p = PinnedPool(ctx, arena_bytes=4 * MB)
    live: list[tuple[PinnedBuffer, int]] = []      # (buffer, tag written into it)
    flying: dict[int, int] = {}                     # ptr -> event of a release not yet completed
    try:
        for k, op in enumerate(ops):
            if op[0] == "acquire":
                b = p.acquire(op[1])
                assert b.ptr not in flying, "handed out while its release event is pending"
                spans = [(x.ptr, x.ptr + x.capacity) for x, _ in live]
                assert all(b.ptr + b.capacity <= s or e <= b.ptr for s, e in spans), "overlap"
                tag = k % 255 + 1
                b.array()[:] = tag
                live.append((b, tag))
            elif op[0] == "release" and live:
                b, tag = live.pop(op[1] % len(live))
                assert (b.array() == tag).all(), "another holder wrote into this buffer"
                if op[2]:
                    p.release(b, stream=9)
                    flying[b.ptr] = mock.recorded[-1][0]
                else:
                    p.release(b)
            elif op[0] == "complete" and flying:
                ptr = sorted(flying)[op[1] % len(flying)]
                mock.pending_events.discard(flying.pop(ptr))
        s = p.stats()
        assert s["in_use"] == sum(b.capacity for b, _ in live) and s["in_flight"] == len(flying)
    finally:
        for b, _ in live:
            p.release(b)
        p.close()


# ---- the benchmark's plumbing (figures from a mock mean nothing; the structure and clean-up do) ----
def test_host_memory_benchmark_runs_on_the_mock(tmp_path):
    import tickgpu.runtime as rt
    from tickgpu.bench.memory_host import run_host_memory

    class TimedMock(AsyncMock):
        def device_attribute(self, name, device):
            extra = {"MANAGED_MEMORY": 1, "CONCURRENT_MANAGED_ACCESS": 1}
            return extra[name] if name in extra else super().device_attribute(name, device)

        def event_record(self, e, s):          # the benchmark waits on its events: complete at once
            self.recorded.append((e, s))

        def event_elapsed_ms(self, a, b):
            return 2.0

    c = rt.init(driver=TimedMock(), bundle_dir=write_bundle(tmp_path / "bundle", default_entries()),
                staging_elements=1 << 17)
    try:
        keep = c.mapped_elements
        r = run_host_memory(True, {"H2D pinned 256MB": {"GB/s": 55.0},
                                   "zero-copy mapped kernel 1024 floats": {"p50_us": 10.0}})
        row = r["bandwidth"]["sizes"]["16MB"]["H2D pinned"]
        assert row["GB/s"] == pytest.approx(16 * MB / 2e-3 / 1e9)
        assert row["fraction_of_floor_pinned"] == pytest.approx(row["GB/s"] / 55.0)
        assert set(r["mapped"]["crossover"]) == {256, 1024, 4096, 16384, 65536}
        tick = r["mapped"]["scale_1024"]   # like for like with the floor's mapped kernel
        # Plumbing: the stand-in computes the kernel's formula, so 0 ulps says the benchmark packed
        # the input and output buffers in the kernel's order and read back the output it wrote.
        assert tick["variant"].startswith("scale_f32") and tick["max_ulps"] == 0
        assert tick["numpy_in_out_over_floor_mapped"] == pytest.approx(tick["numpy_in_out"]["p50_us"] / 10.0)
        assert c.mapped_elements == keep                    # the knob is restored
        assert r["managed"]["mode"] == "managed"
        assert {"blocks", "whole", "none"} <= set(r["managed"])
    finally:
        rt.reset()


def test_views_and_sizes_that_cannot_be_are_refused_by_name(ctx, pool):
    """An object dtype would read pinned bytes as Python object pointers (a crash once the slot
    held numbers); a fractional shape was truncated; a size past what the native core maps failed
    in the mapping and turned the pool to cuMemHostAlloc for good."""
    from tickgpu.memory import mapped_array

    for dt in (object, np.dtype("V0"), [("a", object)]):
        with pytest.raises(TypeError, match="^dtype: a view of raw memory needs a fixed-size dtype"):
            mapped_array(8, dt, context=ctx)
        with pytest.raises(TypeError, match="^dtype: a view of raw memory"):
            pool.acquire(64).array(dt)
    for shape in (2.7, (3, 1.5), "10"):
        with pytest.raises(TypeError, match="^shape: must be an int or a tuple of ints"):
            mapped_array(shape, context=ctx)
    with pytest.raises(ValueError, match=r"^mapped_array: shape \(4611686018427387904,\) of float64 is .* more than any"):
        mapped_array(1 << 62, context=ctx)
    with pytest.raises(ValueError, match=r"needs 147573952589676412928 bytes; the buffer holds 100"):
        pool.acquire(100).array(np.float64, (1 << 62, 4))
    with pytest.raises(TypeError, match="^nbytes: must be an int"):
        pool.acquire("10")
    with pytest.raises(ValueError, match="^nbytes: 1152921504606846976 is more than a pinned buffer can hold"):
        pool.acquire(1 << 60)
    pool.acquire(8 * MB)
    assert pool.stats()["fallback_reason"] is None     # the refused size tried no arena
    assert mapped_array(np.int64(5), context=ctx).shape == (5,)


def test_a_dropped_pool_unmaps_its_arenas_but_never_under_a_view(ctx, mock):
    import gc

    registered = len(mock.registered)
    for _ in range(5):
        p = PinnedPool(ctx, arena_bytes=2 * MB)
        p.release(p.acquire(4096))
        del p                                      # never closed
    gc.collect()
    assert len(mock.registered) == registered
    view = PinnedPool(ctx, arena_bytes=2 * MB).acquire(4096).array(np.float64)   # pool and buffer dropped
    gc.collect()
    view[:] = 1.5                                  # the view holds them: still mapped
    assert view.sum() == 1.5 * 512 and len(mock.registered) == registered + 1
    del view
    gc.collect()
    assert len(mock.registered) == registered


def test_a_request_too_large_for_any_memory_leaves_the_pool_on_huge_pages(ctx, mock):
    """One request that neither a mapping nor cuMemHostAlloc could serve (say 1 TB on a smaller
    host) turned the pool to cuMemHostAlloc for good, and warned that it was using it: every later
    arena lost its huge pages."""
    import warnings

    p = PinnedPool(ctx, arena_bytes=2 * MB)
    mock.fail["cuMemHostRegister"] = "CUDA_ERROR_OUT_OF_MEMORY"
    mock.fail["cuMemHostAlloc"] = "CUDA_ERROR_OUT_OF_MEMORY"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PoolError, match=r"cuMemHostRegister .* refused.*; refused by cuMemHostAlloc too: "
                                            r".*CUDA_ERROR_OUT_OF_MEMORY"):
            p.acquire(64 * MB)
        del mock.fail["cuMemHostRegister"], mock.fail["cuMemHostAlloc"]
        buf = p.acquire(MB)                      # a size the machine has: mapped, no warning
    s = p.stats()
    assert s["fallback_reason"] is None and s["backing"] in ("hugetlb", "thp", "pages") and s["arenas"] == 1
    assert buf.ptr in mock.registered
    p.release(buf)
    p.close()


def test_a_collection_under_the_pool_lock_releasing_to_the_pool_does_not_hang(ctx, mock):
    """A garbage collection can run at any allocation made while the pool's lock is held; a
    `mapped_array` caught in a reference cycle is then released from its finalizer, on the same
    thread, into the same pool. With a plain lock the thread waited on itself for ever."""
    import gc

    from tickgpu.memory import mapped_array

    collect = []

    def query_collecting(event):         # where an allocation under the lock would collect
        collect.append(gc.collect())
        return True

    mock.event_query = query_collecting
    pool = default_pinned_pool(ctx)

    class Holder:
        pass

    h = Holder()
    h.self, h.array = h, mapped_array(16, context=ctx)        # a cycle: freed only by a collection
    held = pool.stats()["in_use"]
    del h
    pool.release(mapped(64, ctx), stream=7)                   # in flight: the next acquire queries it
    done = []
    t = threading.Thread(target=lambda: done.append(mapped(64, ctx)), daemon=True)
    t.start()
    t.join(30)
    assert done, "acquire hung on the pool's own lock"
    assert collect and collect[0] > 0
    assert pool.stats()["in_use"] == held     # the cycle's buffer returned (4 KB), the new one held (4 KB)
    done[0].release()


def test_bad_pool_arguments_and_bools_are_refused_by_name(ctx, pool):
    """arena_bytes went through int() (2.5 -> 2, 'abc' -> "invalid literal for int()"), one past
    what any arena can map failed at the first acquire; True served as a 1-byte request and a
    1-element shape; an unhashable huge_pages said 'unhashable type'."""
    for bad in (2.5, "abc", None, True, np.bool_(True)):
        with pytest.raises(TypeError, match=f"^arena_bytes: must be an int, got {re.escape(repr(bad))}"):
            PinnedPool(ctx, arena_bytes=bad)
    for bad in (0, -5, (1 << 47) + 1):
        with pytest.raises(ValueError, match="^arena_bytes must be > 0 and at most 140737488355328 bytes"):
            PinnedPool(ctx, arena_bytes=bad)
    for bad in ([], 1, "on"):
        with pytest.raises(ValueError, match="^huge_pages must be 'auto', 'thp' or 'off'"):
            PinnedPool(ctx, huge_pages=bad)
    for bad in (True, False, np.bool_(True)):
        with pytest.raises(TypeError, match="^nbytes: must be an int"):
            pool.acquire(bad)
    buf = pool.acquire(64)
    for bad in (True, (True, 2)):
        with pytest.raises(TypeError, match="^shape: must be an int or a tuple of ints"):
            buf.array(np.float64, bad)
    with pytest.raises(ValueError, match=r"^shape: must not be negative, got \(-1,\)"):
        buf.array(np.float64, [-1])
    assert PinnedPool(ctx, arena_bytes=np.int64(3 * MB)).arena_bytes == 4 * MB   # NumPy ints are ints


def test_ending_a_pin_twice_ends_it_once(ctx, pool):
    """pin_mapped / hold_in_place hand back a call that ends the pin: a second call does nothing
    (it took another holder's pin, or left the count below zero and the buffer never releasable)."""
    from tickgpu.memory.host import hold_in_place, pin_mapped

    buf = pool.acquire(4096)
    assert pool.mapped
    a = buf.array(np.float32)
    _, unpin_a = pin_mapped(a.ctypes.data, a.nbytes)
    _, unpin_b = pin_mapped(a.ctypes.data, 64)
    unpin_a()
    unpin_a()
    with pytest.raises(PoolError):
        pool.release(buf)                        # b still holds it
    unpin_b()
    end = hold_in_place(buf)
    end()
    end()
    pool.release(buf)
    assert buf.released


def test_a_pool_of_something_that_is_no_context_or_no_flag_is_refused_by_name(ctx):
    with pytest.raises(TypeError, match=r"^context must be a tickgpu runtime context .*got int"):
        PinnedPool(3)
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match=r"^mapped must be True or False"):
            PinnedPool(ctx, mapped=bad)

