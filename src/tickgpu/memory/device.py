"""A device memory pool: size-class slabs for small buffers, mapped granules for large ones, the driver's
pool for the rest.

Level 1 serves requests up to ``small_max`` bytes from slabs of one size class (4 classes per power
of two, 512 B minimum, 512-byte-aligned pointers) carved from a few large blocks held for the pool's
life: no driver call per buffer. Level 2 serves larger requests (and small ones when level 1 is full)
from the driver's stream-ordered pool (``cuMemAllocFromPoolAsync``), whose release threshold is
raised so freed memory stays cached. Frees are lazy: a freed buffer is pending, not reusable, until
a flush, which waits once for the work involved and returns everything (free page ranges coalesce).
Reserved memory never passes ``fraction`` of the device's memory.

A free records an event on the stream it names and the flush waits on that event, never on the
stream: a stream may be destroyed between the free and the flush (a garbage-collected
``cupy.cuda.Stream``), and a wait on a dead handle fails, or waits on whatever new stream reused the
handle value; an event completes when the work queued before it does, whatever became of the
stream. One event per distinct stream per batch, re-recorded by later frees on that stream and
reused after each flush, so a warm pool creates none. Memory that may be in use on any stream (a
`DeviceArray` whose readers are unknown) is freed with `DevicePool.ANY_STREAM`: its flush waits for
the whole context, or, while a resident kernel holds such waits off (`hold_context_waits`), it
stays pending until a flush that may (`RuntimeContext.synchronize` parks the resident kernels and
flushes).

Level 3 serves requests of at least ``vmm_min_bytes`` (2 MB) through the driver's virtual memory
management: physical memory in granules (``cuMemCreate``, 2 MB) kept on a free list, each buffer its
own virtual range with granules mapped into it (``cuMemMap``). A freed range stays mapped in a cache
by size, so the next request of that size costs no driver call; a request that neither the cache nor
the free list can serve unmaps cached ranges of other sizes and maps their granules anew. Why: the
driver's pool cannot give back a hole between live buffers of one of its own OS allocations. On an
H200 a churn ending with 896 x 4 MB live, every other one freed, then one 1 GiB request, reserved
4.93 GB for a peak of 3.76 GB in use on the driver pool alone (76 %; ``cuMemPoolTrimTo`` changed
nothing); with granules any freed memory serves any large request, so large blocks cannot fragment.
Where the driver or device lacks VMM, level 3 is off and ``PoolStats.vmm_reason`` says why.

The pool's logic is C (csrc/mem/devpool.c), reaching the driver through its own dlopen'd table, so
PyTorch's pluggable-allocator interface can call it from any thread without the GIL
(`DevicePool.torch_allocator`). ``backend="host"`` runs the same C logic on host memory, for tests.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import operator
import threading
import warnings
import weakref

import numpy as np

from tickgpu._native import ffi, lib
from tickgpu.memory.errors import PoolError
from tickgpu.memory.host import _plain_dtype, _shape
from tickgpu.runtime.arrays import _DL_CPU, DeviceArray

__all__ = ["DevicePool", "DeviceBuffer", "PoolStats", "default_pool"]

HOST_DEVICE_BYTES = 1 << 30     # what the host backend pretends the device holds when no cap is given


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """A snapshot of a `DevicePool`; sizes in bytes, rounded as the pool accounts them.

    Attributes
    ----------
    in_use : live buffers.
    reserved : level-1 blocks plus what the driver pool holds (or, on the host backend, level-2
        buffers live or pending) plus level-3 granules.
    peak_in_use, peak_reserved : highest values since the pool was made.
    largest_free : largest contiguous free range in the level-1 blocks.
    fragmentation : 1 - largest_free / free bytes in the level-1 blocks (0 when none is free).
    pending_bytes : freed, waiting for the next flush.
    served_slab, served_driver : allocations served by level 1 and level 2.
    failed : allocations refused.
    driver_allocs : allocating driver calls the pool made (block cuMemAlloc + cuMemAllocFromPoolAsync).
    flushes : flushes that returned at least one buffer.
    served_vmm : allocations served by level 3; vmm_cache_hits of them by a cached mapped range (no
        driver call).
    vmm_granule : bytes per physical granule (0 when level 3 is off).
    vmm_granules, vmm_granules_free : granules held (mapped or free), and of those unmapped and free.
    vmm_granules_created : ``cuMemCreate`` calls since the pool was made.
    vmm_ranges_cached : freed level-3 ranges kept mapped for reuse.
    vmm_driver_calls : every level-3 driver call (create, release, reserve, free, map, unmap, access).
    vmm_enabled : whether level 3 serves large requests; vmm_reason : why not ("" when it does).
    events_created : ``cuEventCreate`` calls (events are reused: at most 16).
    pending_any : pending buffers freed on `DevicePool.ANY_STREAM` (their flush waits for the context).
    """

    in_use: int
    reserved: int
    peak_in_use: int
    peak_reserved: int
    largest_free: int
    fragmentation: float
    pending_bytes: int
    served_slab: int
    served_driver: int
    failed: int
    driver_allocs: int
    flushes: int
    served_vmm: int = 0
    vmm_cache_hits: int = 0
    vmm_granule: int = 0
    vmm_granules: int = 0
    vmm_granules_free: int = 0
    vmm_granules_created: int = 0
    vmm_ranges_cached: int = 0
    vmm_driver_calls: int = 0
    vmm_enabled: bool = False
    vmm_reason: str = ""
    events_created: int = 0
    pending_any: int = 0


class _PoolArrayView(DeviceArray):
    """A typed view of a pool buffer with ``__cuda_array_interface__`` and DLPack; it owns nothing
    (the buffer's memory lasts until the buffer is freed, whoever still reads it)."""

    def __init__(self, buffer: "DeviceBuffer", shape: tuple[int, ...], dtype):
        # DeviceArray's constructor allocates; a view only borrows the buffer's memory.
        self.shape, self.dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        self.ptr = buffer.ptr
        self.buffer = buffer            # keeps the buffer object (not its memory) alive
        self._context = buffer._pool._context

    def __del__(self):
        pass

    def __dlpack_device__(self) -> tuple[int, int]:
        # On the host backend the pool's "device" memory is host memory: exported as such.
        return super().__dlpack_device__() if self._context is not None else (_DL_CPU, 0)

    def get(self) -> np.ndarray:
        """A NumPy copy (synchronous)."""
        if self._context is not None:
            return super().get()
        out = np.empty(self.shape, self.dtype)       # host backend: the "device" memory is host memory
        ctypes.memmove(out.ctypes.data, self.ptr, out.nbytes)
        return out


@dataclasses.dataclass(eq=False)
class DeviceBuffer:
    """Device memory from a `DevicePool`.

    Attributes
    ----------
    ptr : device address (512-byte aligned at level 1).
    nbytes : bytes asked for (the pool may hold a little more: its size class).
    stream : the stream it was allocated on (its default stream for a later free).
    level : 1 (slab), 2 (driver pool) or 3 (mapped granules).
    """

    ptr: int
    nbytes: int
    stream: int
    level: int
    _pool: "DevicePool" = dataclasses.field(repr=False)

    def as_array(self, dtype, shape) -> _PoolArrayView:
        """A view with ``__cuda_array_interface__`` and DLPack (for CuPy, Numba, PyTorch, JAX),
        owning nothing: a consumer keeps the view object alive, not the memory, which goes back to
        the pool when the buffer is freed. Free it only after every consumer's work on it is done
        (DLPack's `stream` is not used to order anything: the buffer's users order it).

        Raises
        ------
        ValueError
            If ``shape`` of ``dtype`` needs more than ``nbytes`` or has a negative dimension.
        """
        shape, dtype = _shape(shape), _plain_dtype(dtype)
        if any(s < 0 for s in shape):
            raise ValueError(f"shape: dimensions must be >= 0, got {shape}")
        need = math.prod(shape) * dtype.itemsize
        if need > self.nbytes:
            raise ValueError(f"shape {shape} of {np.dtype(dtype)} needs {need} bytes; the buffer has {self.nbytes}")
        return _PoolArrayView(self, shape, dtype)

    def free(self, stream: int | None = None) -> None:
        """Return the buffer to its pool (lazily: see `DevicePool.free`)."""
        self._pool.free(self, stream)


_U64 = (1 << 64) - 1
_I64 = (1 << 63) - 1


def _int_arg(name: str, value, hi: int = _I64) -> int:
    """`value` as an int in [0, hi] (what the native pool's fields hold), else TypeError or
    ValueError naming `name` (cffi would raise a bare OverflowError, and int() truncate a float)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: must be an int, got {value!r}") from None
    if not 0 <= v <= hi:
        raise ValueError(f"{name}: must be in [0, {hi}], got {v}")
    return v


def _stream_handle(stream) -> int:
    # Accept raw handles and the stream objects of CuPy (.ptr) and PyTorch (.cuda_stream).
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if h is not None:
            return _int_arg("stream", h, _U64)
    return _int_arg("stream", stream, _U64)


DEFAULT_RELEASE_THRESHOLD = 256 << 20


class _Lease:
    """A pool buffer lent to another library: returned to the pool when the borrower drops it."""

    __slots__ = ("ptr", "stream", "release")

    def __init__(self, ptr: int, stream: int, release):
        self.ptr, self.stream, self.release = ptr, stream, release

    def __del__(self):
        self.release(self.ptr, _stream_handle(self.stream))


class DevicePool:
    """Device memory for many short-lived buffers, with lazy batched frees and exact statistics.

    Parameters
    ----------
    context : tickgpu.runtime.Context, optional
        The device and context (default: ``tickgpu.runtime.context()``; unused by the host backend).
    slab_block_bytes : int
        Bytes per level-1 block (a multiple of 64 KB).
    slab_blocks : int
        At most this many level-1 blocks (0 disables level 1; at most 64).
    small_max : int
        Requests of at most this many bytes are served by level 1 while it has room.
    release_threshold : int, optional
        Bytes the driver pool keeps cached across synchronizations (default 256 MB: enough that a
        steady stream of calls reuses its memory, without holding everything a past burst freed).
    lazy_bytes : int
        A flush happens once more than this many freed bytes are pending.
    fraction : float
        Reserved memory never passes this fraction of the device's total memory.
    backend : {"driver", "host"}
        "host" runs the same logic on host memory (tests, machines without a GPU).
    cap_bytes : int, optional
        The cap in bytes, overriding ``fraction``; the host backend's default is fraction x 1 GiB.
    preallocate : bool
        Allocate every level-1 block now rather than on first need.
    vmm_min_bytes : int, optional
        Requests of at least this many bytes take level 3 (mapped granules) where the driver
        supports it (default 2 MB; None turns level 3 off). Takes precedence over ``small_max``.

    Raises
    ------
    ValueError
        On a bad argument (named in the message).
    PoolError
        If the driver cannot be reached or refuses to make the pool.
    """

    #: The `free` stream meaning "may be in use on any stream": the flush waits for the whole context.
    ANY_STREAM = (1 << 64) - 1

    def __init__(self, context=None, *, slab_block_bytes: int = 64 << 20, slab_blocks: int = 2,
                 small_max: int = 1 << 20, release_threshold: int | None = None, lazy_bytes: int = 100 << 20,
                 fraction: float = 0.9, backend: str = "driver", cap_bytes: int | None = None,
                 preallocate: bool = False, vmm_min_bytes: int | None = 2 << 20):
        if backend not in ("driver", "host"):
            raise ValueError(f"backend: must be 'driver' or 'host', got {backend!r}")
        page = 64 << 10
        if slab_blocks and (int(slab_block_bytes) <= 0 or int(slab_block_bytes) % page):
            raise ValueError(f"slab_block_bytes: must be a positive multiple of 65536, got {slab_block_bytes}")
        if not 0 <= int(slab_blocks) <= 64:
            raise ValueError(f"slab_blocks: must be in [0, 64], got {slab_blocks}")
        for name, v in (("small_max", small_max), ("lazy_bytes", lazy_bytes), ("slab_block_bytes", slab_block_bytes)):
            _int_arg(name, v)
        if not 0.0 < float(fraction) <= 1.0:
            raise ValueError(f"fraction: must be in (0, 1], got {fraction}")
        if vmm_min_bytes is not None and int(vmm_min_bytes) <= 0:
            raise ValueError(f"vmm_min_bytes: must be > 0 (None turns level 3 off), got {vmm_min_bytes}")
        if cap_bytes is not None and int(cap_bytes) <= 0:
            raise ValueError(f"cap_bytes: must be > 0, got {cap_bytes}")
        self.backend = backend
        self._context = None
        # NOTE: held around every call into the C pool as well as close(), so a free arriving from
        # another thread (a garbage-collected CuPy array's release) never runs on a pool being
        # destroyed. Re-entrant: a collection inside alloc may free into the same pool.
        self._lock = threading.RLock()
        self._cu = ffi.new("int *")
        cfg = ffi.new("tg_devpool_config *")
        cfg.backend = lib.TG_DEVPOOL_HOST if backend == "host" else lib.TG_DEVPOOL_DRIVER
        if backend == "driver":
            if context is None:
                import tickgpu.runtime as rt

                context = rt.context()
            self._context = context
            self.device = int(getattr(context, "ordinal", context.device))
            cfg.ctx = int(context.ctx)
        else:
            self.device = -1
            if cap_bytes is None:
                cap_bytes = int(float(fraction) * HOST_DEVICE_BYTES)
        cfg.device = max(self.device, 0)
        cfg.slab_block_bytes, cfg.slab_blocks = int(slab_block_bytes), int(slab_blocks)
        cfg.small_max, cfg.lazy_bytes, cfg.fraction = int(small_max), int(lazy_bytes), float(fraction)
        cfg.release_threshold = DEFAULT_RELEASE_THRESHOLD if release_threshold is None else int(release_threshold)
        cfg.cap_bytes = 0 if cap_bytes is None else int(cap_bytes)
        cfg.preallocate = 1 if preallocate else 0
        cfg.vmm_min_bytes = -1 if vmm_min_bytes is None else int(vmm_min_bytes)
        out = ffi.new("tg_devpool **")
        st = lib.tg_devpool_create(cfg, out, self._cu)
        if st != lib.TG_OK:
            raise PoolError(f"DevicePool({backend}): could not be made: {self._reason(st)}")
        self._pool = out[0]
        self.cap = self.stats_raw().cap
        self.small_max = int(small_max)

    # ---- errors ------------------------------------------------------------------------------
    def _reason(self, st: int) -> str:
        name = ffi.string(lib.tg_status_name(st)).decode()
        if st == lib.TG_ENODRIVER:
            return "the CUDA driver (libcuda.so.1) could not be loaded"
        if st == lib.TG_ECUDA:
            return f"the driver refused ({ffi.string(lib.tg_hot_error_name(self._cu[0])).decode()})"
        if st == lib.TG_ENOMEM:
            return "out of memory"
        return name

    def _live(self):
        if self._pool is None:
            raise PoolError("DevicePool: used after close()")
        return self._pool

    # ---- allocation --------------------------------------------------------------------------
    def alloc(self, nbytes: int, stream=0) -> DeviceBuffer:
        """A buffer of at least `nbytes` bytes, usable in order on `stream`.

        Raises
        ------
        ValueError
            If `nbytes` is negative.
        PoolError
            If the request would take reserved memory past the cap, or the device is out of memory
            even after a flush and a trim (the message gives the size and the pool's state); or
            after `close`.
        """
        nbytes = _int_arg("nbytes", nbytes)
        s = _stream_handle(stream)
        ptr, level = ffi.new("uintptr_t *"), ffi.new("int *")
        with self._lock:
            st = lib.tg_devpool_alloc(self._live(), nbytes, s, ptr, level, self._cu)
        if st != lib.TG_OK:
            raw = self.stats_raw()
            state = (f"reserved {raw.reserved}, in use {raw.in_use}, pending {raw.pending_bytes}, "
                     f"largest free level-1 range {raw.largest_free} bytes")
            if st == lib.TG_ERANGE:
                why = f"would take reserved memory past the cap of {self.cap} bytes"
            else:
                why = self._reason(st)
            raise PoolError(f"alloc({nbytes} bytes): {why} ({state})")
        return DeviceBuffer(int(ptr[0]), nbytes, s, int(level[0]), self)

    def free(self, buf_or_ptr, stream=None) -> None:
        """Return a buffer; it stays pending (not reusable) until the next flush.

        Parameters
        ----------
        buf_or_ptr : DeviceBuffer or int
            What `alloc` returned, or its address.
        stream : optional
            The last stream that used the buffer (default: the buffer's allocation stream; 0 for a
            bare address), or `ANY_STREAM`. An event is recorded on it now and the flush waits on
            that event, so the stream may be destroyed before the flush.

        Raises
        ------
        PoolError
            On a double free (already pending), an address this pool does not hold (never
            allocated here, or freed and already reclaimed), or after `close`; the address is in
            the message.
        """
        if isinstance(buf_or_ptr, DeviceBuffer):
            ptr, s = buf_or_ptr.ptr, buf_or_ptr.stream if stream is None else _stream_handle(stream)
        else:
            ptr, s = _int_arg("buf_or_ptr", buf_or_ptr, _U64), _stream_handle(stream)
        with self._lock:
            st = lib.tg_devpool_free(self._live(), ptr, s, self._cu)
        if st == lib.TG_EDATA:
            raise PoolError(f"free(0x{ptr:x}): double free: the buffer is already freed, pending reclamation")
        if st == lib.TG_EINVAL:
            raise PoolError(f"free(0x{ptr:x}): not a live buffer of this pool (never allocated here, "
                            "or freed and already reclaimed)")
        if st != lib.TG_OK:
            raise PoolError(f"free(0x{ptr:x}): the flush it triggered failed: {self._reason(st)}")

    def flush(self, context_wait: bool = False) -> None:
        """Synchronization point: wait for the events recorded by pending frees (and for the whole
        context where one was freed on `ANY_STREAM`, unless `hold_context_waits` holds that off:
        those stay pending), then make them reusable.

        Parameters
        ----------
        context_wait : bool
            Lift every hold for this flush: for a caller that has parked the resident kernels
            (`RuntimeContext.synchronize`).

        Raises
        ------
        PoolError
            If a wait failed (the driver's error name is in the message); what was pending stays so.
        """
        with self._lock:
            pool, held = self._live(), 0
            if context_wait:   # the holds now (one added and dropped to read them), all dropped
                held = int(lib.tg_devpool_hold_context_waits(pool, 1)) - 1
                for _ in range(held + 1):
                    lib.tg_devpool_hold_context_waits(pool, 0)
            try:
                st = lib.tg_devpool_flush(pool, self._cu)
            finally:
                for _ in range(held):
                    lib.tg_devpool_hold_context_waits(pool, 1)
        if st != lib.TG_OK:
            raise PoolError(f"flush: {self._reason(st)}")

    def hold_context_waits(self, hold: bool) -> int:
        """Add (True) or drop (False) one hold on context-wide waits; returns the holds now.

        While any is held, no flush calls ``cuCtxSynchronize`` (a resident kernel never finishes by
        itself, so that wait would stall): buffers freed on `ANY_STREAM` stay pending until a flush
        with no hold. Event waits go on as usual.
        """
        with self._lock:
            return int(lib.tg_devpool_hold_context_waits(self._live(), 1 if hold else 0))

    # ---- statistics --------------------------------------------------------------------------
    def stats_raw(self):
        """The C statistics struct (with ``live``, ``cap`` and ``blocks`` besides `PoolStats`)."""
        out = ffi.new("tg_devpool_stats *")
        with self._lock:
            lib.tg_devpool_get_stats(self._live(), out)
        return out

    def stats(self) -> PoolStats:
        """A `PoolStats` snapshot."""
        s = self.stats_raw()
        values = {f.name: getattr(s, f.name) for f in dataclasses.fields(PoolStats)}
        values["vmm_enabled"] = bool(s.vmm_enabled)
        values["vmm_reason"] = ffi.string(s.vmm_reason).decode(errors="replace")
        return PoolStats(**values)

    def rounded(self, nbytes: int) -> int:
        """The bytes a request of `nbytes` is accounted as (its size class, a 512-byte multiple, or a
        multiple of the granule at level 3)."""
        return int(lib.tg_devpool_rounded(self._live(), _int_arg("nbytes", nbytes)))

    def lookup(self, ptr: int) -> tuple[int, int, str] | None:
        """(accounted bytes, level, "live" | "pending") of an address this pool holds, else None."""
        n, lv, state = ffi.new("int64_t *"), ffi.new("int *"), ffi.new("int *")
        if lib.tg_devpool_lookup(self._live(), _int_arg("ptr", ptr, _U64), n, lv, state) != lib.TG_OK:
            return None
        return int(n[0]), int(lv[0]), "live" if state[0] == 1 else "pending"

    @property
    def driver_pool(self) -> int:
        """The driver's CUmemoryPool handle behind level 2 (0 on the host backend)."""
        return int(lib.tg_devpool_driver_pool(self._live()))

    # ---- lifetime ----------------------------------------------------------------------------
    def close(self) -> dict:
        """Return everything to the driver (or host) and free the pool.

        Buffers never freed are returned too, and reported: a ResourceWarning, and the returned
        ``{"outstanding": count, "outstanding_bytes": bytes}``. Closing twice does nothing.
        """
        with self._lock:
            if self._pool is None:
                return {"outstanding": 0, "outstanding_bytes": 0}
            n, b = ffi.new("int64_t *"), ffi.new("int64_t *")
            lib.tg_devpool_destroy(self._pool, n, b, self._cu)
            self._pool = None
        _forget_default(self)
        if n[0]:
            warnings.warn(f"DevicePool.close: {n[0]} buffer(s) ({b[0]} bytes) were never freed", ResourceWarning,
                          stacklevel=2)
        return {"outstanding": int(n[0]), "outstanding_bytes": int(b[0])}

    def __enter__(self) -> "DevicePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_pool", None) is not None:
                lib.tg_devpool_destroy(self._pool, ffi.NULL, ffi.NULL, ffi.NULL)
                self._pool = None
        except Exception:
            pass

    # ---- other libraries' allocators ---------------------------------------------------------
    def cupy_allocator(self):
        """A function for ``cupy.cuda.set_allocator``: size -> ``cupy.cuda.MemoryPointer`` from this pool.

        The memory returns to the pool (lazily) when CuPy drops its last reference. Imports cupy
        now (ImportError if it is missing).
        """
        import cupy

        pool_ref = weakref.ref(self)

        def _release(ptr: int, stream: int) -> None:
            pool = pool_ref()
            if pool is not None and pool._pool is not None:
                try:
                    pool.free(ptr, stream)
                except PoolError:
                    pass       # the pool was closed and reclaimed it already

        def allocate(nbytes: int):
            stream = cupy.cuda.get_current_stream()
            buf = self.alloc(nbytes, stream.ptr)
            # CuPy's memory objects take no weak references: the owner it keeps alive frees the
            # buffer when CuPy lets go of it. The lease holds the stream object, so its handle is
            # still alive when the free records its event (CuPy frees on the allocation stream).
            lease = _Lease(buf.ptr, stream, _release)
            mem = cupy.cuda.UnownedMemory(buf.ptr, max(nbytes, 1), owner=lease, device_id=self.device)
            return cupy.cuda.MemoryPointer(mem, 0)

        return allocate

    def torch_allocator(self):
        """``torch.cuda.memory.CUDAPluggableAllocator`` on the native core's C entry points.

        Makes this pool the process default (what ``tg_torch_alloc`` / ``tg_torch_free`` serve) and
        keeps it alive. Pass the result to ``torch.cuda.memory.change_current_allocator`` before
        PyTorch allocates anything on the GPU. Imports torch now.
        """
        import torch

        import tickgpu._tickgpu_native as native

        if self.backend != "driver":
            raise PoolError("torch_allocator: needs the driver backend (PyTorch would use the memory on the GPU)")
        global _torch_pool
        lib.tg_devpool_set_default(self._live())
        _torch_pool = self
        return torch.cuda.memory.CUDAPluggableAllocator(native.__file__, "tg_torch_alloc", "tg_torch_free")


_defaults_lock = threading.Lock()
_defaults: dict[int, tuple[object, DevicePool]] = {}
_torch_pool: DevicePool | None = None


def default_pool(context=None) -> DevicePool:
    """The process's `DevicePool` for a runtime context (default: ``tickgpu.runtime.context()``),
    made on first use with that context's device, the default settings and its level-1 blocks
    preallocated (2 x 64 MB)."""
    if context is None:
        import tickgpu.runtime as rt

        context = rt.context()
    with _defaults_lock:
        hit = _defaults.get(id(context))
        if hit is not None and hit[0] is context and hit[1]._pool is not None:
            return hit[1]
        # Level 1 preallocated: the runtime's hot path then never waits on a driver allocation,
        # not even the lazy first use of the second slab block.
        pool = DevicePool(context, preallocate=True)
        _defaults[id(context)] = (context, pool)
        return pool


def _forget_default(pool: DevicePool) -> None:
    global _torch_pool
    with _defaults_lock:
        for k, (_, p) in list(_defaults.items()):
            if p is pool:
                del _defaults[k]
    if _torch_pool is pool:
        _torch_pool = None
