"""The runtime's state on one device: context, bundle, launchers, graph runners, constants.

Created lazily by `tickgpu.runtime.context()` (importing tickgpu makes no driver call). Everything
a call needs is allocated here once -- staging blocks, graphs, the constant ring, scratch -- so
that after `warmup` a steady stream of calls allocates nothing and compiles nothing.
"""
from __future__ import annotations

import operator
import os
import threading
import time

import numpy as np

from tickgpu.errors import BackendUnavailable, TickGpuError
from tickgpu.runtime.bundle import Bundle, Manifest, arch_for, default_bundle_dir
from tickgpu.runtime.graph import GraphRunner, plan_layout
from tickgpu.runtime.launch import Launcher

__all__ = ["Context", "ConstantRing", "BufferSource", "DEFAULT_STAGING_ELEMENTS", "DEFAULT_MAPPED_ELEMENTS"]

# Elements per staged chunk: the largest tick done as one graph replay, and the chunk of the
# pipeline for bigger host arrays. 2**17 float64 greeks = 17 MB of pinned staging per runner.
DEFAULT_STAGING_ELEMENTS = 1 << 17
# Up to this many elements a tick's kernel reads and writes pinned staging directly (zero copy)
# instead of copy -> kernel -> copy. Measured on an H200 (`tickgpu bench --suite memory`, host /
# mapped / crossover; float32 greeks from NumPy, p50): the mapped graph is faster at every size
# tried, 256 to 65,536 options (copies take 1.17x to 1.55x as long), so the copies start above.
DEFAULT_MAPPED_ELEMENTS = 1 << 16


class BufferSource:
    """Where a context's own long-lived buffers come from (staging, constants, scratch).

    Host staging comes from the context's `PinnedPool` (page-locked, huge-page backed where the OS
    allows, mapped into the device's address space); device blocks from its `DevicePool` (slabs
    for small blocks, the driver's stream-ordered pool for large ones), or from the driver where
    the context runs on a stand-in driver (tests) or the pool cannot be made (``device_pool_reason``
    says why). ``host`` / ``device`` return (address, token); ``free_host`` / ``free_device`` take
    the token back. Staging is allocated by warm-up; device blocks of a call's own (outputs a GPU
    array's library cannot make) come from the pool's slabs, without a driver call once warm.
    """

    def __init__(self, context):
        self.context = context
        self._pinned = None
        self._device_pool = None
        self.device_pool_reason = ""

    @property
    def device_pool(self):
        """The context's `DevicePool`, or None where device blocks come from the driver."""
        if self._device_pool is None:
            from tickgpu.runtime.driver import Driver

            if not isinstance(self.context.driver, Driver):
                self._device_pool, self.device_pool_reason = False, "a stand-in driver"
            else:
                try:
                    from tickgpu.memory.device import default_pool

                    self._device_pool = default_pool(self.context)
                except Exception as e:   # e.g. the pool's own driver table could not load libcuda
                    self._device_pool, self.device_pool_reason = False, f"{type(e).__name__}: {e}"
        return self._device_pool or None

    @property
    def pinned(self):
        if self._pinned is None:
            from tickgpu.memory.host import default_pinned_pool

            # Arenas sized to the context's staging (a runner's chunk of inputs and outputs is
            # ~136 bytes an element): 64 MB at the default 2**17-element chunk, down to 2 MB for
            # small chunks, whose pages would otherwise be faulted in for nothing (arenas are
            # prefaulted).
            chunk = getattr(self.context, "staging_elements", 1 << 17)
            arena = min(64 << 20, max(2 << 20, chunk * 512))
            self._pinned = default_pinned_pool(self.context, arena_bytes=arena)
        return self._pinned

    def host(self, nbytes: int):
        from tickgpu.memory.host import hold_in_place

        buf = self.pinned.acquire(nbytes)
        # The GPU reads and writes staging in place: its pool may not close under it.
        return buf.ptr, (buf, hold_in_place(buf))

    def free_host(self, token) -> None:
        # Released without a stream: the runner waited for its stream before closing.
        buf, unpin = token
        unpin()
        buf.release()

    def device(self, nbytes: int):
        pool = self.device_pool
        if pool is None:
            p = self.context.driver.mem_alloc(nbytes)
            return p, p
        buf = pool.alloc(nbytes)
        return buf.ptr, buf

    def free_device(self, token) -> None:
        if isinstance(token, int):
            # The last reference may go on any thread (a DLPack consumer's), where no context or
            # another one is current: cuMemFree needs the allocating one.
            self.context.enter()
            self.context.driver.mem_free(token)
        else:
            # Lazily, and on any stream: a block of the runtime's (a DeviceArray's above all) may
            # have been read or written on any stream its users chose, so its flush waits for the
            # whole context, not for the legacy stream 0, which does not order non-blocking ones.
            token.free(token._pool.ANY_STREAM)


class ConstantRing:
    """Broadcast values (stride-0 arguments) for launches on caller-owned GPU arrays.

    A kernel reads every argument through a pointer, so a Python scalar needs a home in device
    memory. Values are written into a pinned ring and copied to its device twin on the launch's
    own stream, just before the kernel, so ordering is the stream's. Slots are 16 bytes (the
    aligned kernel variants may assume 16-byte aligned pointers).

    NOTE: a slot is reused only after the ring wraps, and a wrap first waits for the whole context,
    so a copy still queued on some stream never reads a slot that was overwritten.
    """

    SLOT = 16

    def __init__(self, driver, slots: int = 4096, memory=None, synchronize=None):
        from tickgpu.runtime.graph import DriverMemory

        self.driver = driver
        # The wait for the whole context a wrap makes (the owning context's, which parks resident kernels).
        self.synchronize = synchronize if synchronize is not None else driver.ctx_synchronize
        self.slots = slots
        memory = memory if memory is not None else DriverMemory(driver)
        self.host, self._host_token = memory.host(slots * self.SLOT)
        self.dev, self._dev_token = memory.device(slots * self.SLOT)
        self._view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * (slots * self.SLOT)).from_address(self.host))
        self.cursor = 0
        self.wraps = 0

    def put(self, values: list[np.ndarray], stream: int) -> list[int]:
        """Device pointers holding `values` (1-element arrays), valid for work queued on `stream`."""
        k = len(values)
        if k == 0:
            return []
        if self.cursor + k > self.slots:
            self.synchronize()
            self.cursor = 0
            self.wraps += 1
        first = self.cursor
        for i, v in enumerate(values):
            b = v.tobytes()
            off = (first + i) * self.SLOT
            self._view[off:off + len(b)] = np.frombuffer(b, dtype=np.uint8)
        self.cursor += k
        start = first * self.SLOT
        self.driver.memcpy_htod_async(self.dev + start, self.host + start, k * self.SLOT, stream)
        return [self.dev + (first + i) * self.SLOT for i in range(k)]


def env_ordinal() -> int:
    """The device ``TICKGPU_DEVICE`` names (0 when unset), or BackendUnavailable saying why not."""
    raw = os.environ.get("TICKGPU_DEVICE", "0").strip()
    if not raw.isdigit() or not raw.isascii():
        raise BackendUnavailable(f"TICKGPU_DEVICE={raw!r}: must be a device number (0, 1, ...)")
    return int(raw)


class Context:
    """tickgpu's state on one CUDA device (its primary context).

    Parameters
    ----------
    driver : Driver, optional
        A `tickgpu.runtime.driver.Driver` (default) or a stand-in with the same methods.
    device : int, optional
        Device ordinal; default ``$TICKGPU_DEVICE`` or 0.
    bundle_dir : path, optional
        Kernel bundle; default ``$TICKGPU_BUNDLE`` or the one in the package.
    staging_elements : int, optional
        Elements per staged chunk (default ``$TICKGPU_STAGING_ELEMENTS`` or 2**17).

    Raises
    ------
    BackendUnavailable
        No such device, or its architecture is not in the bundle.
    CudaError, BundleError
        The driver refused, or the bundle is broken.
    """

    def __init__(self, driver=None, device: int | None = None, bundle_dir=None,
                 staging_elements: int | None = None):
        t0 = time.perf_counter()
        if driver is None:
            from tickgpu.runtime.driver import Driver

            driver = Driver()
        self.driver = d = driver
        d.init()
        self.ordinal = env_ordinal() if device is None else int(device)
        count = d.device_count()
        if not 0 <= self.ordinal < count:
            raise BackendUnavailable(f"CUDA device {self.ordinal} requested, {count} present")
        self.device = d.device_get(self.ordinal)
        self.name = d.device_name(self.device)
        self.cc = d.compute_capability(self.device)
        arch, reason = arch_for(self.cc)
        if arch is None:
            raise BackendUnavailable(f"{self.name}: {reason}")
        self.arch = arch
        self.sm_count = d.device_attribute("MULTIPROCESSOR_COUNT", self.device)
        self.ctx = d.primary_context(self.device)
        d.ctx_set_current(self.ctx)
        self.manifest = Manifest.read(bundle_dir if bundle_dir is not None else default_bundle_dir())
        self.bundle = Bundle(d, self.manifest, arch)
        self.bundle.synchronize = self.synchronize
        if staging_elements is None:
            staging_elements = os.environ.get("TICKGPU_STAGING_ELEMENTS", DEFAULT_STAGING_ELEMENTS)
        try:   # an int, or the environment's string of one (not 1.5 truncated)
            value = int(staging_elements, 10) if isinstance(staging_elements, str) else operator.index(staging_elements)
        except (TypeError, ValueError):
            value = None
        if value is None or value < 16 or value % 16:
            raise ValueError(f"staging_elements (or TICKGPU_STAGING_ELEMENTS) must be a positive multiple of 16, "
                             f"got {staging_elements!r}")
        self.staging_elements = value
        # Ticks of up to this many elements run the kernel on mapped pinned staging (zero copy)
        # instead of copy -> kernel -> copy; 0 turns that off.
        self.mapped_elements = int(os.environ.get("TICKGPU_MAPPED_ELEMENTS", DEFAULT_MAPPED_ELEMENTS))
        self.stream = d.stream_create()
        # NOTE: one lock for all calls: launchers, runners and the constant ring are shared state,
        # and a tick is microseconds, so finer locks would cost more than they save.
        self.lock = threading.RLock()
        self.launchers: dict[str, Launcher] = {}
        self.device_launches: dict = {}   # (op, dtype, n, aligned, stream) -> BoundLaunch: direct.device_call's
        self.runners: dict[tuple[str, str, int], GraphRunner] = {}
        self.memory = BufferSource(self)
        self.constants = ConstantRing(d, memory=self.memory, synchronize=self.synchronize)
        self.uploads: dict[int, tuple] = {}                      # slot -> (device pointer, bytes, token)
        self.grids: dict[tuple, tuple] = {}                      # surface grids resident on the device
        self.plans: dict[tuple, object] = {}                     # staged tick plans (staged._TickPlan)
        self.ticks: dict[tuple, object] = {}                     # (op, dtype char, n) -> its tick plan
        self.dummy = 0                                           # warm-up's placeholder block
        self.kernel_runtime = None                               # kernels_api.KernelRuntime, on first use
        self.tickers = None   # {op: Ticker}: the staged tick's C entry (runtime/fasttick.py), when on
        self.result_blocks: dict = {}   # (op, dtype) -> the C entry's result blocks (runtime/fasttick.py)
        self.warm = False
        self.init_seconds = time.perf_counter() - t0

    # ---- per call --------------------------------------------------------------------------
    def enter(self) -> None:
        """Make this context current on the calling thread.

        Done on every call, not once per thread: another library (PyTorch's set_device) may have
        made a different device current since.
        """
        self.driver.ctx_set_current(self.ctx)

    def synchronize(self) -> None:
        """Wait for all work queued in the context (cuCtxSynchronize), resident kernels parked first.

        A resident (mailbox) kernel in use never finishes by itself, so a context-wide wait with one
        open would last until its idle timeout: each is asked to return first (`park`), and the
        next call through it relaunches it.
        """
        from tickgpu.runtime import mailbox   # imports ops; not at module level

        for r in mailbox.open_residents():
            if r._ctx is self and not r.park():
                raise TickGpuError(f"{r!r} did not return when asked (before a wait for the whole context)")
        self.driver.ctx_synchronize()
        pool = self.memory._device_pool
        if pool and pool.stats_raw().pending_any:
            # Blocks freed on any stream wait for the whole context; with resident kernels open the
            # pool holds such waits off, so they are returned here, where the kernels are parked.
            pool.flush(context_wait=True)

    def launcher(self, family: str, dtype: str, n: int, aligned16: bool) -> Launcher:
        k = self.bundle.select(family, dtype, n, aligned16, self.sm_count)
        lau = self.launchers.get(k.variant)
        if lau is None:
            lau = self.launchers[k.variant] = Launcher(self.driver, k)
        return lau

    def runner(self, family: str, dtype: str, index: int, layout, full_layout) -> GraphRunner:
        """Graph runner `index` of an op (0: ticks and even chunks of a pipeline, 1: odd chunks,
        2: a pipeline's last chunk).

        Made on first use with room for `full_layout` (a whole staged chunk), so later calls of
        any size up to a chunk reuse it; regrown only for a layout beyond it (a surface grid
        bigger than any before).
        """
        key = (family, dtype, index)
        r = self.runners.get(key)
        if r is not None and layout.in_bytes <= r.in_capacity and layout.out_bytes <= r.out_capacity:
            return r
        # 64 KB of headroom: a surface grid (up to ~8,000 points) larger than warm-up's fits
        # without regrowing staging.
        in_cap = max(layout.in_bytes, full_layout.in_bytes + (1 << 16))
        out_cap = max(layout.out_bytes, full_layout.out_bytes)
        if r is not None:
            self.driver.stream_synchronize(r.stream)
            r.close()
            in_cap, out_cap = max(in_cap, 2 * r.in_capacity), max(out_cap, r.out_capacity)
            # Plans on the old runner point into its staging and graphs: forget them.
            self.plans = {k: p for k, p in self.plans.items() if p.runner is not r}
            self.ticks = {k: p for k, p in self.ticks.items() if p.runner is not r}
        r = self.runners[key] = GraphRunner(self.driver, self.ctx, in_cap, out_cap, name=f"{family}/{dtype}#{index}",
                                            memory=self.memory)
        return r

    def reset_plans(self) -> None:
        """Forget every staged plan and the graphs of their own (a changed kernel choice, tests).

        Tick plans bind their kernel variant when built (by warm-up); after this the next call of
        each size builds its plan again, choosing anew. Run `tickgpu.runtime.warmup` afterwards
        to have them all built again up front.
        """
        with self.lock:
            for r in self.runners.values():
                for g in r.graphs:
                    if g is not r.shared:
                        g.destroy()
                r.graphs = [r.shared]
                r.shared.holder = None
                r.staged_by = None
            self.plans.clear()
            self.ticks.clear()

    def upload(self, slot: int, a: np.ndarray, stream: int) -> int:
        """Copy host array `a` into device scratch `slot` (grown as needed); its device pointer."""
        have = self.uploads.get(slot)
        if have is None or have[1] < a.nbytes:
            if have is not None:
                self.driver.stream_synchronize(stream)
                self.memory.free_device(have[2])
            size = max(256, 1 << max(0, (a.nbytes - 1).bit_length()))
            ptr, token = self.memory.device(size)
            have = self.uploads[slot] = (ptr, size, token)
        if a.nbytes:
            self.driver.memcpy_htod_async(have[0], a.ctypes.data, a.nbytes, stream)
        return have[0]

    def resident_grid(self, arrays: tuple[np.ndarray, ...]) -> list[int]:
        """Device pointers of a surface's grid arrays, uploaded once and reused while unchanged.

        Keyed by the arrays' identity and checked by value, so a grid modified in place is
        re-uploaded rather than read stale.
        """
        key = tuple(id(a) for a in arrays)
        hit = self.grids.get(key)
        if hit is not None and all(np.array_equal(h, a) for h, a in zip(hit[0], arrays)):
            return hit[1]
        if len(self.grids) >= 8:
            self.synchronize()
            for _, (_, _, token) in self.grids.items():
                self.memory.free_device(token)
            self.grids.clear()
        sizes = [a.nbytes for a in arrays]
        layout = plan_layout(sizes, [])
        base, token = self.memory.device(layout.in_bytes)
        ptrs = [base + o for o in layout.in_offsets]
        for p, a in zip(ptrs, arrays):
            self.driver.memcpy_htod(p, a.ctypes.data, a.nbytes)
        self.grids[key] = (tuple(a.copy() for a in arrays), ptrs, token)
        return ptrs
