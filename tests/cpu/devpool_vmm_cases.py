"""Level 3 of the device pool (mapped granules) on the stand-in libcuda (tests/cpu/fake_libcuda.c).

Run by test_devpool.py::test_level3_on_a_stand_in_driver in a process of its own, with the stand-in
first on LD_LIBRARY_PATH: the pool's driver table is loaded once per process. The stand-in keeps a
reserved range PROT_NONE except where granules are mapped and made accessible, and counts every
reserve/create/map and every misuse, so the model checks what the pool holds against what the
"driver" holds: every live or pending level-3 buffer mapped and accessible, nothing leaked at close.
"""
from __future__ import annotations

import ctypes
import os
import sys
import types
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from tickgpu.memory import DevicePool, PoolError

sys.path.insert(0, str(Path(__file__).parent))
from devpool_model import FreeRules, fill  # noqa: E402

if not os.environ.get("TICKGPU_FAKE_LIBCUDA"):
    pytest.skip("runs under the stand-in libcuda only (test_devpool.py starts it)", allow_module_level=True)

MB = 1 << 20
FAKE = ctypes.CDLL("libcuda.so.1")
FAKE.fake_vmm_accessible.argtypes = [ctypes.c_size_t, ctypes.c_longlong]
CTX = types.SimpleNamespace(ordinal=0, device=0, ctx=0)
COUNTERS = ("creates", "releases", "reserves", "frees", "maps", "unmaps", "accesses", "errors", "granules",
            "ranges", "mapped")


def fake_counts() -> dict[str, int]:
    out = (ctypes.c_longlong * 11)()
    FAKE.fake_vmm_counts(out)
    return dict(zip(COUNTERS, out))


def accessible(ptr: int, nbytes: int) -> bool:
    return bool(FAKE.fake_vmm_accessible(ptr, nbytes))


def assert_driver_balanced():
    c = fake_counts()
    assert c["errors"] == 0, c
    assert c["granules"] == c["ranges"] == c["mapped"] == 0, c
    assert c["creates"] == c["releases"] and c["reserves"] == c["frees"] and c["maps"] == c["unmaps"], c


CFG = dict(slab_block_bytes=MB, slab_blocks=2, small_max=256 << 10, lazy_bytes=12 * MB, cap_bytes=48 * MB)
SIZES = st.one_of(st.integers(0, 300_000), st.integers(300_001, 2 * MB - 1), st.integers(2 * MB, 9 * MB))


class Level3Model(FreeRules):
    """live {ptr: (nbytes, rounded, level, tag)}, pending {ptr: (rounded, level)}."""

    def __init__(self):
        super().__init__()
        self.pool = DevicePool(CTX, **CFG)
        self.live, self.pending, self.tag = {}, {}, 0
        self.lazy_bytes = CFG["lazy_bytes"]

    @rule(nbytes=SIZES)
    def alloc(self, nbytes):
        try:
            buf = self.pool.alloc(nbytes)
        except PoolError as e:
            assert "cap" in str(e), e
            self.pending.clear()
            s = self.pool.stats()
            # Refused only when the request does not fit under the cap, the driver pool growing in
            # 2 MB steps (the pool's level-2 check counts so) and level 3 in 2 MB granules.
            grown = -(-self.pool.rounded(nbytes) // (2 * MB)) * 2 * MB
            assert s.pending_bytes == 0 and s.reserved + grown > CFG["cap_bytes"], s
            return
        if self.pool.stats().pending_bytes == 0:
            self.pending.clear()
        rounded = self.pool.rounded(nbytes)
        assert (buf.level == 3) == (nbytes >= 2 * MB), (nbytes, buf.level)
        assert buf.ptr % (2 * MB if buf.level == 3 else 512) == 0
        if buf.level == 3:
            assert rounded % (2 * MB) == 0 and rounded >= nbytes and accessible(buf.ptr, rounded)
        assert self.pool.lookup(buf.ptr) == (rounded, buf.level, "live")
        for p, r in [(p, v[1]) for p, v in self.live.items()] + [(p, v[0]) for p, v in self.pending.items()]:
            assert buf.ptr + rounded <= p or p + r <= buf.ptr, f"{buf.ptr:#x}+{rounded} overlaps {p:#x}+{r}"
        self.tag = self.tag % 255 + 1
        fill(buf.ptr, nbytes, self.tag)
        self.live[buf.ptr] = (nbytes, rounded, buf.level, self.tag)

    @invariant()
    def pool_matches_model_and_driver(self):
        s = self.pool.stats()
        assert s.in_use == sum(v[1] for v in self.live.values())
        assert s.pending_bytes == sum(r for r, _ in self.pending.values())
        assert s.reserved <= CFG["cap_bytes"] and s.peak_reserved <= CFG["cap_bytes"]
        assert s.vmm_granules * s.vmm_granule <= s.reserved and s.vmm_granules_free <= s.vmm_granules
        # A range with a live or pending buffer is never unmapped (pending: queued work may use it).
        for ptr, (_, rounded, level, _) in self.live.items():
            assert level != 3 or accessible(ptr, rounded), f"live {ptr:#x} unmapped"
        for ptr, (rounded, level) in self.pending.items():
            assert level != 3 or accessible(ptr, rounded), f"pending {ptr:#x} unmapped"
        c = fake_counts()
        assert c["errors"] == 0, c
        assert c["granules"] == s.vmm_granules and c["granules"] - c["mapped"] == s.vmm_granules_free, (c, s)

    def teardown(self):
        report = self.pool.close() if not self.live else _close_warned(self.pool)
        assert report["outstanding"] == len(self.live)
        assert_driver_balanced()


def _close_warned(pool):
    with pytest.warns(ResourceWarning):
        return pool.close()


TestLevel3Model = Level3Model.TestCase
TestLevel3Model.settings = settings(max_examples=25, stateful_step_count=40, deadline=None)


def test_classic_case_served_from_freed_granules():
    """896 x 4 MB live in the H200 measurement; 128 here: every other one freed, then one request as
    large as what was freed. Served without a new granule: peak reserved = peak in use."""
    n = 128
    with DevicePool(CTX, cap_bytes=2048 * MB, preallocate=False) as pool:
        bufs = [pool.alloc(4 * MB) for _ in range(n)]
        assert {b.level for b in bufs} == {3}
        for b in bufs[::2]:
            b.free()
        pool.flush()
        created = pool.stats().vmm_granules_created
        assert created == 2 * n
        big = pool.alloc(n // 2 * 4 * MB)
        assert big.level == 3 and accessible(big.ptr, n // 2 * 4 * MB)
        s = pool.stats()
        assert s.vmm_granules_created == created and s.vmm_ranges_cached == 0
        assert s.peak_reserved == s.peak_in_use == n * 4 * MB
        assert s.peak_in_use / s.peak_reserved >= 0.85
        for b in bufs[::2]:
            assert not accessible(b.ptr, 4 * MB)      # their ranges were unmapped to serve `big`
        for b in bufs[1::2]:
            assert accessible(b.ptr, 4 * MB)
            b.free()
        big.free()
    assert_driver_balanced()


def test_fallback_when_the_device_lacks_vmm():
    FAKE.fake_vmm_configure(ctypes.c_longlong(2 * MB), 0, 0)
    try:
        with DevicePool(CTX, cap_bytes=256 * MB) as pool:
            s = pool.stats()
            assert not s.vmm_enabled and "CUDA_ERROR_NOT_SUPPORTED" in s.vmm_reason or "support" in s.vmm_reason
            b = pool.alloc(4 * MB)
            assert b.level == 2 and pool.rounded(4 * MB + 1) == 4 * MB + 512
            b.free()
    finally:
        FAKE.fake_vmm_configure(ctypes.c_longlong(2 * MB), 1, 0)
    assert_driver_balanced()


def test_vmm_off_by_argument():
    with DevicePool(CTX, cap_bytes=256 * MB, vmm_min_bytes=None) as pool:
        s = pool.stats()
        assert not s.vmm_enabled and "off" in s.vmm_reason
        assert pool.alloc(4 * MB).level == 2


# ---- lazy frees wait on events, not on remembered streams -----------------------------------------
FAKE.fake_stream_enqueue.argtypes = [ctypes.c_size_t]
FAKE.fake_stream_outstanding.argtypes = [ctypes.c_size_t]
FAKE.fake_stream_outstanding.restype = ctypes.c_longlong
FAKE.fake_stream_misuse.restype = ctypes.c_longlong
FAKE.fake_ctx_syncs.restype = ctypes.c_longlong


def new_stream() -> int:
    h = ctypes.c_void_p()
    assert FAKE.cuStreamCreate(ctypes.byref(h), 1) == 0
    return int(h.value)


def event_counts() -> dict[str, int]:
    out = (ctypes.c_longlong * 4)()
    FAKE.fake_event_counts(out)
    return dict(zip(("created", "destroyed", "records", "syncs"), out))


def test_stream_destroyed_between_free_and_flush():
    """CuPy's case: buffers freed on a stream, the stream destroyed, then the flush. The flush must
    succeed, wait for the work queued before the frees (an event, not the dead stream), return every
    level for reuse, and touch the dead handle never again."""
    with DevicePool(CTX, cap_bytes=256 * MB, vmm_min_bytes=2 * MB) as pool:
        s = new_stream()
        sizes = (1000, MB + 4096, 4 * MB)                       # levels 1, 2 and 3
        bufs = [pool.alloc(n, s) for n in sizes]
        assert [b.level for b in bufs] == [1, 2, 3]
        FAKE.fake_stream_enqueue(s)                              # kernels still reading them
        for b in bufs:
            b.free(s)
        assert FAKE.cuStreamDestroy_v2(ctypes.c_void_p(s)) == 0
        misuse, before = FAKE.fake_stream_misuse(), pool.stats()
        pool.flush()                                             # no error
        after = pool.stats()
        assert FAKE.fake_stream_misuse() == misuse               # no call on the dead handle
        assert FAKE.fake_stream_outstanding(s) == 0              # the work before the frees: done
        assert after.pending_bytes == 0 and after.in_use == 0 and after.flushes == before.flushes + 1
        assert all(pool.lookup(b.ptr) is None for b in bufs)
        assert after.events_created == 1 and after.pending_any == 0
        s2 = new_stream()                                        # may reuse the dead handle's value
        again = [pool.alloc(n, s2) for n in sizes]
        assert again[0].ptr == bufs[0].ptr                       # the same level-1 chunk
        assert again[2].ptr == bufs[2].ptr and pool.stats().vmm_cache_hits == before.vmm_cache_hits + 1
        for b in again:
            b.free(s2)
        pool.flush()
        assert pool.stats().events_created == 1                  # the free list: no new event
        FAKE.cuStreamDestroy_v2(ctypes.c_void_p(s2))
    assert_driver_balanced()
    c = event_counts()
    assert c["created"] == c["destroyed"], c


def test_one_event_per_stream_per_batch():
    with DevicePool(CTX, cap_bytes=256 * MB) as pool:
        streams = [new_stream() for _ in range(3)]
        bufs = [(pool.alloc(700, s), s) for s in streams for _ in range(5)]
        for b, s in bufs:
            b.free(s)
        assert pool.stats().events_created == 3                  # 15 frees, 3 streams
        for _ in range(4):
            for b, s in [(pool.alloc(700, s), s) for s in streams for _ in range(5)]:
                b.free(s)
            pool.flush()
        s = pool.stats()
        assert s.events_created == 3 and s.pending_bytes == 0
        for h in streams:
            FAKE.cuStreamDestroy_v2(ctypes.c_void_p(h))


def test_any_stream_waits_for_the_whole_context():
    with DevicePool(CTX, cap_bytes=256 * MB) as pool:
        s1, s2 = new_stream(), new_stream()
        a = pool.alloc(1000)
        FAKE.fake_stream_enqueue(s1)
        FAKE.fake_stream_enqueue(s2)
        a.free(pool.ANY_STREAM)
        assert pool.stats().pending_any == 1
        syncs = FAKE.fake_ctx_syncs()
        pool.flush()
        assert FAKE.fake_ctx_syncs() == syncs + 1
        assert FAKE.fake_stream_outstanding(s1) == FAKE.fake_stream_outstanding(s2) == 0
        assert pool.lookup(a.ptr) is None and pool.stats().pending_any == 0
        # Held off (a resident kernel open): the flush returns what events cover, keeps the rest.
        assert pool.hold_context_waits(True) == 1
        b, c = pool.alloc(1000), pool.alloc(1000, s1)
        b.free(pool.ANY_STREAM)
        c.free(s1)
        pool.flush()
        assert FAKE.fake_ctx_syncs() == syncs + 1
        assert pool.lookup(b.ptr) == (1024, 1, "pending") and pool.lookup(c.ptr) is None
        pool.flush(context_wait=True)                            # the caller parked the residents
        assert FAKE.fake_ctx_syncs() == syncs + 2 and pool.lookup(b.ptr) is None
        assert pool.hold_context_waits(False) == 0               # the hold is still there, once
        for h in (s1, s2):
            FAKE.cuStreamDestroy_v2(ctypes.c_void_p(h))


def test_free_on_an_already_destroyed_stream_waits_for_the_context():
    """A stream destroyed before the free: the record is refused, so the flush waits for all."""
    with DevicePool(CTX, cap_bytes=256 * MB) as pool:
        s = new_stream()
        a = pool.alloc(1000, s)
        FAKE.fake_stream_enqueue(s)
        FAKE.cuStreamDestroy_v2(ctypes.c_void_p(s))
        a.free(s)
        assert pool.stats().pending_any == 1
        syncs = FAKE.fake_ctx_syncs()
        pool.flush()
        assert FAKE.fake_ctx_syncs() == syncs + 1 and FAKE.fake_stream_outstanding(s) == 0
        assert pool.lookup(a.ptr) is None
