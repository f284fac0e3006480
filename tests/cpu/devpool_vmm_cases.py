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
import types

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tickgpu.memory import DevicePool, PoolError

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


def fill(ptr, n, tag):
    ctypes.memset(ptr, tag, n)


def intact(ptr, n, tag):
    return n == 0 or bool((np.frombuffer((ctypes.c_uint8 * n).from_address(ptr), np.uint8) == tag).all())


CFG = dict(slab_block_bytes=MB, slab_blocks=2, small_max=256 << 10, lazy_bytes=12 * MB, cap_bytes=48 * MB)
SIZES = st.one_of(st.integers(0, 300_000), st.integers(300_001, 2 * MB - 1), st.integers(2 * MB, 9 * MB))


class Level3Model(RuleBasedStateMachine):
    """live {ptr: (nbytes, rounded, level, tag)}, pending {ptr: (rounded, level)}."""

    def __init__(self):
        super().__init__()
        self.pool = DevicePool(CTX, **CFG)
        self.live, self.pending, self.tag = {}, {}, 0

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

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16))
    def free(self, pick):
        ptr = list(self.live)[pick % len(self.live)]
        nbytes, rounded, level, tag = self.live.pop(ptr)
        assert intact(ptr, nbytes, tag)
        self.pool.free(ptr)
        self.pending[ptr] = (rounded, level)
        if sum(r for r, _ in self.pending.values()) > CFG["lazy_bytes"]:
            self.pending.clear()

    @precondition(lambda self: self.pending)
    @rule(pick=st.integers(0, 1 << 16))
    def double_free(self, pick):
        ptr = list(self.pending)[pick % len(self.pending)]
        with pytest.raises(PoolError, match=f"0x{ptr:x}.*double free"):
            self.pool.free(ptr)

    @rule(offset=st.integers(1, 511))
    def foreign_free(self, offset):
        ptr = (next(iter(self.live)) if self.live else 1 << 40) + offset
        with pytest.raises(PoolError, match=f"0x{ptr:x}"):
            self.pool.free(ptr)

    @rule()
    def flush(self):
        self.pool.flush()
        self.pending.clear()

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
