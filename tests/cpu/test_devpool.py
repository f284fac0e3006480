"""The device pool's C logic on its host backend (host memory standing in for device memory).

Random alloc/free/flush sequences (hypothesis, rule-based) against a Python model of what the pool
must hold: no two buffers (live or pending) overlap -- every buffer is filled with its own byte
pattern and checked when freed --, alignment, statistics equal to the model's sums, nothing leaked at
close. Then the fixed cases: free ranges coalescing, the cap, the lazy-flush threshold, double and
foreign frees, use after close, and several threads at once (the C calls release the GIL).
"""
from __future__ import annotations

import ctypes
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from tickgpu.memory import DevicePool, PoolError, PoolStats

sys.path.insert(0, str(Path(__file__).parent))
from devpool_model import FreeRules, fill, intact  # noqa: E402

MB = 1 << 20


def reference_class(n: int) -> int:
    """Size classes written out independently: 512-byte steps up to 2 KiB, then the 4 evenly spaced
    sizes in each (2^p, 2^(p+1)]."""
    classes = [512, 1024, 1536, 2048]
    p = 11
    while classes[-1] < n:
        classes += [(1 << p) + k * (1 << (p - 2)) for k in (1, 2, 3, 4)]
        p += 1
    return next(c for c in classes if c >= max(n, 1))


def test_size_classes_against_reference():
    pool = DevicePool(backend="host", small_max=64 * MB, slab_blocks=0, cap_bytes=256 * MB)
    try:
        for n in [0, 1, 511, 512, 513, 1024, 1025, 2047, 2048, 2049, 2560, 2561, 4095, 4097, 5000, 65535, 65537,
                  MB - 1, MB + 1, 3 * MB + 7, 64 * MB]:
            c = pool.rounded(n)
            assert c == reference_class(n), n
            assert c % 512 == 0 and c >= n
            assert c - n <= max(512, n // 4), (n, c)      # at most 25 % over above 2 KiB
        assert pool.rounded(64 * MB + 1) == 64 * MB + 512   # above small_max: 512-byte multiples
    finally:
        pool.close()


CFG = dict(backend="host", slab_block_bytes=MB, slab_blocks=3, small_max=256 << 10, lazy_bytes=2 * MB,
           cap_bytes=12 * MB)
SIZES = st.one_of(st.integers(0, 4096), st.integers(4097, 300_000), st.integers(300_001, 5 * MB))


class PoolModel(FreeRules):
    """The pool against a model: live {ptr: (nbytes, rounded, level, tag)}, pending {ptr: (rounded, level)}."""

    def __init__(self):
        super().__init__()
        self.pool = DevicePool(**CFG)
        self.live: dict[int, tuple[int, int, int, int]] = {}
        self.pending: dict[int, tuple[int, int]] = {}
        self.tag = 0
        self.peak = 0
        self.flushes = 0
        self.failed = 0
        self.served = [0, 0]
        self.lazy_bytes = CFG["lazy_bytes"]

    def _flushed(self):
        if self.pending:
            self.flushes += 1
        self.pending.clear()

    @rule(nbytes=SIZES)
    def alloc(self, nbytes):
        had_pending = bool(self.pending)
        try:
            buf = self.pool.alloc(nbytes)
        except PoolError as e:
            assert f"alloc({nbytes} bytes)" in str(e)
            self.failed += 1
            self._flushed()       # a refusal comes only after a flush of whatever was pending
            s = self.pool.stats()
            assert s.pending_bytes == 0
            # Refused only when, after the flush and trim, the request does not fit under the cap.
            assert s.reserved + self.pool.rounded(nbytes) > CFG["cap_bytes"], (s, nbytes)
            return
        if had_pending and self.pool.stats().pending_bytes == 0:
            self._flushed()       # the pool flushed to serve this request
        rounded = self.pool.rounded(nbytes)
        assert buf.nbytes == nbytes and buf.level in (1, 2)
        assert buf.ptr % 512 == 0, hex(buf.ptr)
        if buf.level == 1:
            assert nbytes <= CFG["small_max"]
        assert self.pool.lookup(buf.ptr) == (rounded, buf.level, "live")
        lo, hi = buf.ptr, buf.ptr + rounded
        for p, (_, r, _, _) in self.live.items():
            assert hi <= p or p + r <= lo, f"{hex(lo)}+{rounded} overlaps live {hex(p)}+{r}"
        for p, (r, _) in self.pending.items():
            assert hi <= p or p + r <= lo, f"{hex(lo)}+{rounded} overlaps pending {hex(p)}+{r}"
        self.tag = self.tag % 255 + 1
        fill(buf.ptr, nbytes, self.tag)
        self.live[buf.ptr] = (nbytes, rounded, buf.level, self.tag)
        self.served[buf.level - 1] += 1
        self.peak = max(self.peak, sum(v[1] for v in self.live.values()))

    @invariant()
    def stats_match_model(self):
        s = self.pool.stats()
        raw = self.pool.stats_raw()
        assert s.in_use == sum(v[1] for v in self.live.values())
        assert s.pending_bytes == sum(r for r, _ in self.pending.values())
        assert s.peak_in_use == self.peak
        assert s.flushes == self.flushes and s.failed == self.failed
        assert [s.served_slab, s.served_driver] == self.served
        assert raw.live == len(self.live)
        l2 = sum(v[1] for v in self.live.values() if v[2] == 2) + sum(r for r, lv in self.pending.values() if lv == 2)
        assert s.reserved == raw.blocks * CFG["slab_block_bytes"] + l2
        assert s.reserved <= CFG["cap_bytes"] and s.peak_reserved <= CFG["cap_bytes"]
        assert 0.0 <= s.fragmentation < 1.0 and 0 <= s.largest_free <= raw.blocks * CFG["slab_block_bytes"]
        assert s.driver_allocs == raw.blocks + s.served_driver or s.driver_allocs > raw.blocks
        holds_l1 = any(v[2] == 1 for v in self.live.values()) or any(lv == 1 for _, lv in self.pending.values())
        if raw.blocks and not holds_l1:
            # Nothing of level 1 held: every block must have coalesced back into one free range
            # (blocks are not adjacent, so with k blocks the largest range is 1/k of the free bytes).
            assert s.largest_free == CFG["slab_block_bytes"]
            assert s.fragmentation == pytest.approx(1 - 1 / raw.blocks)

    def teardown(self):
        live_bytes = sum(v[1] for v in self.live.values())
        with pytest.warns(ResourceWarning) if self.live else _nothing():
            report = self.pool.close()
        assert report == {"outstanding": len(self.live), "outstanding_bytes": live_bytes}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


TestPoolModel = PoolModel.TestCase
TestPoolModel.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_free_ranges_coalesce():
    """The classic fragmentation case: 4 MB buffers fill a block, every other one is freed, so no
    hole holds 8 MB; once the rest are freed the ranges must coalesce and 32 MB fits."""
    with DevicePool(backend="host", slab_block_bytes=64 * MB, slab_blocks=1, small_max=64 * MB,
                    cap_bytes=64 * MB, preallocate=True) as pool:
        bufs = [pool.alloc(4 * MB) for _ in range(16)]
        assert all(b.level == 1 for b in bufs)
        starts = sorted(b.ptr for b in bufs)
        assert starts[-1] - starts[0] == 60 * MB          # one block, tiled
        for b in bufs[::2]:
            pool.free(b)
        pool.flush()
        s = pool.stats()
        assert s.largest_free == 4 * MB and s.fragmentation == pytest.approx(1 - 4 / 32)
        with pytest.raises(PoolError, match=r"alloc\(8388608 bytes\).*cap of 67108864"):
            pool.alloc(8 * MB)                            # level 2 has no room under the cap either
        for b in bufs[1::2]:
            pool.free(b)
        pool.flush()
        s = pool.stats()
        assert s.largest_free == 64 * MB and s.fragmentation == 0.0 and s.in_use == 0
        big = pool.alloc(32 * MB)
        assert big.level == 1 and pool.stats().driver_allocs == 1   # the one preallocated block
        pool.free(big)


def test_cap_refuses_with_clear_message():
    with DevicePool(backend="host", slab_block_bytes=MB, slab_blocks=2, cap_bytes=8 * MB) as pool:
        a = pool.alloc(5 * MB)
        with pytest.raises(PoolError, match=r"alloc\(4194304 bytes\): would take reserved memory past the cap "
                                            r"of 8388608 bytes"):
            pool.alloc(4 * MB)
        assert pool.stats().failed == 1
        with pytest.raises(PoolError, match="cap"):
            pool.alloc(9 * MB)                            # larger than the cap itself
        pool.free(a)                                      # pending: the next request flushes to fit
        b = pool.alloc(7 * MB)
        s = pool.stats()
        assert s.flushes == 1 and s.reserved <= 8 * MB and s.failed == 2
        pool.free(b)


def test_lazy_threshold_triggers_flush():
    with DevicePool(backend="host", slab_block_bytes=MB, slab_blocks=1, lazy_bytes=256 << 10,
                    cap_bytes=16 * MB) as pool:
        bufs = [pool.alloc(64 << 10) for _ in range(5)]
        for b in bufs[:4]:
            pool.free(b)                                  # 256 KB pending: not past the threshold
        s = pool.stats()
        assert s.pending_bytes == 256 << 10 and s.flushes == 0
        again = pool.alloc(64 << 10)                      # pending memory is not reused before a flush
        assert again.ptr not in {b.ptr for b in bufs[:4]}
        pool.free(bufs[4])                                # 320 KB: past it
        s = pool.stats()
        assert s.pending_bytes == 0 and s.flushes == 1 and s.in_use == 64 << 10
        pool.free(again)


def test_zero_lazy_bytes_reclaims_every_free():
    with DevicePool(backend="host", slab_block_bytes=MB, slab_blocks=1, lazy_bytes=0, cap_bytes=4 * MB) as pool:
        a = pool.alloc(1000)
        pool.free(a)
        assert pool.stats().pending_bytes == 0
        assert pool.alloc(1000).ptr == a.ptr              # the same chunk, reclaimed at once
        assert pool.close()["outstanding"] == 1


def test_bad_frees_and_use_after_close():
    pool = DevicePool(backend="host", cap_bytes=64 * MB)
    a = pool.alloc(100)
    with pytest.raises(PoolError, match=f"free\\(0x{a.ptr + 512:x}\\): not a live buffer"):
        pool.free(a.ptr + 512)
    a.free()
    with pytest.raises(PoolError, match=f"0x{a.ptr:x}.*double free"):
        pool.free(a)
    pool.flush()
    with pytest.raises(PoolError, match=f"0x{a.ptr:x}.*not a live buffer"):
        pool.free(a)
    with pytest.raises(ValueError, match="nbytes"):
        pool.alloc(-1)
    assert pool.close() == {"outstanding": 0, "outstanding_bytes": 0}
    assert pool.close() == {"outstanding": 0, "outstanding_bytes": 0}
    for call in (lambda: pool.alloc(8), lambda: pool.free(a), pool.flush, pool.stats):
        with pytest.raises(PoolError, match="after close"):
            call()


@pytest.mark.parametrize("kw, name", [(dict(backend="cuda"), "backend"), (dict(slab_block_bytes=1000), "slab_block_bytes"),
                                      (dict(slab_blocks=65), "slab_blocks"), (dict(fraction=0.0), "fraction"),
                                      (dict(small_max=-1), "small_max"), (dict(cap_bytes=0), "cap_bytes")])
def test_bad_arguments_named(kw, name):
    with pytest.raises(ValueError, match=name):
        DevicePool(**{"backend": "host", **kw})


def test_as_array_view(rng):
    with DevicePool(backend="host", cap_bytes=64 * MB) as pool:
        buf = pool.alloc(80)
        view = buf.as_array(np.float64, (10,))
        cai = view.__cuda_array_interface__
        assert cai["data"] == (buf.ptr, False) and cai["shape"] == (10,) and cai["typestr"] == "<f8"
        values = rng.standard_normal(10)
        ctypes.memmove(buf.ptr, values.ctypes.data, 80)
        np.testing.assert_array_equal(view.get(), values)
        with pytest.raises(ValueError, match="needs 88 bytes"):
            buf.as_array(np.float64, (11,))
        buf.free()


def test_many_threads_at_once():
    """Four threads allocate, fill, check and free at once; the pool's mutex must keep them apart."""
    pool = DevicePool(backend="host", slab_block_bytes=MB, slab_blocks=2, small_max=64 << 10,
                      lazy_bytes=512 << 10, cap_bytes=32 * MB)
    errors, allocs = [], []

    def work(tag):
        r = np.random.default_rng(tag)
        held, n = [], 0
        try:
            for _ in range(1500):
                if held and r.random() < 0.5:
                    b = held.pop(int(r.integers(len(held))))
                    if not intact(b.ptr, b.nbytes, tag):
                        errors.append(f"thread {tag}: {hex(b.ptr)} overwritten")
                    pool.free(b)
                else:
                    b = pool.alloc(int(r.integers(1, 100_000)))
                    fill(b.ptr, b.nbytes, tag)
                    held.append(b)
                    n += 1
            for b in held:
                pool.free(b)
            allocs.append(n)
        except Exception as e:   # reported below, not lost in the thread
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    pool.flush()
    s = pool.stats()
    assert s.in_use == 0 and s.pending_bytes == 0 and s.failed == 0
    assert s.served_slab + s.served_driver == sum(allocs) and s.served_slab > 0 and s.served_driver > 0
    assert isinstance(s, PoolStats)
    assert pool.close()["outstanding"] == 0


def test_driver_backend_without_driver_says_why():
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is present here: the GPU tests cover the driver backend")
    except OSError:
        pass
    ctx = types.SimpleNamespace(ordinal=0, device=0, ctx=0)
    with pytest.raises(PoolError, match=r"DevicePool\(driver\).*libcuda"):
        DevicePool(ctx)


def test_level3_on_a_stand_in_driver(tmp_path):
    """Level 3 (mapped granules) on the driver backend, against tests/cpu/fake_libcuda.c: the cases in
    devpool_vmm_cases.py run in a process of their own, where the pool's driver table loads the stand-in."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    here = Path(__file__).resolve().parent
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(here / "fake_libcuda.c")], check=True)
    env = dict(os.environ, TICKGPU_FAKE_LIBCUDA="1",
               LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(here / "devpool_vmm_cases.py")], capture_output=True, text=True, env=env,
                          timeout=600, cwd=here.parents[1])
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    last = proc.stdout.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "skipped" not in last, tail
    print(last)
