"""Pinned host memory: a pool of page-locked, huge-page-backed buffers, reused by size class.

Pageable memory never belongs on the hot path: the driver copies it through its own pinned bounce
buffer at about a sixth of PCIe's speed (DESIGN.md: 9 GB/s against 55). So host buffers that feed
the GPU come from here:

- arenas are anonymous mappings from the native core (`tg_host_map`: explicit huge pages, else
  transparent huge pages, else plain pages, pre-faulted), page-locked with ``cuMemHostRegister``
  (portable, and mapped into the device's address space so small ticks can be read in place);
- where mapping or registration is refused, arenas come from ``cuMemHostAlloc`` instead; the pool
  says so once (a warning) and in `PinnedPool.stats` (``backing``, ``fallback_reason``);
- buffers are carved from arenas in size classes and reused per class; a buffer released with a
  stream is not handed out again until the work queued on that stream before the release has
  finished (an event recorded there), so an asynchronous copy never reads a buffer that was
  already given to someone else.
"""
from __future__ import annotations

import ctypes
import math
import operator
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np

from tickgpu.memory.errors import PoolError

__all__ = ["PinnedPool", "PinnedBuffer", "MappedBuffer", "mapped", "mapped_array", "mapped_address",
           "default_pinned_pool", "size_class", "huge_pages_offered"]

_PAGE = 4096
_QUARTER_STEPS_FROM = 1 << 20
_HUGE = 2 << 20
_WANT_HUGE = {"auto": 2, True: 2, "hugetlb": 2, "thp": 1, "off": 0, False: 0, None: 0}
_BACKING_NAMES = {0: "pages", 1: "thp", 2: "hugetlb"}
_REGISTER_PORTABLE, _REGISTER_DEVICEMAP = 0x01, 0x02   # CU_MEMHOSTREGISTER_* (same bits as CU_MEMHOSTALLOC_*)


#: The largest pinned buffer (the native core maps at most 2**47 bytes at once).
MAX_BYTES = 1 << 47


def _plain_dtype(dtype) -> np.dtype:
    """`dtype` for a view of raw pinned memory: numbers only. An object dtype would read the bytes
    as Python object pointers (a crash), a zero-size one cannot count elements."""
    dt = np.dtype(dtype)
    if dt.hasobject or dt.itemsize == 0:
        raise TypeError(f"dtype: a view of raw memory needs a fixed-size dtype without Python objects, got {dt}")
    return dt


def _shape(shape) -> tuple[int, ...]:
    """A shape of Python ints: integers only (2.7 elements is an error, not 2; True is not 1)."""
    try:
        dims = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        if any(isinstance(d, (bool, np.bool_)) for d in dims):
            raise TypeError
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        raise TypeError(f"shape: must be an int or a tuple of ints, got {shape!r}") from None


def _byte_count(name: str, value) -> int:
    """`value` as a byte count: an int (or NumPy integer), not a bool, a float or a string;
    TypeError naming `name` otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{name}: must be an int, got {value!r}")


def size_class(nbytes: int) -> int:
    """The capacity a request of `nbytes` is served with, in bytes.

    Powers of two from 4 KB up to 1 MB; above that, quarter steps between powers of two (1.25,
    1.5, 1.75, 2, 2.5 MB...), so a large request wastes at most a fifth of its size instead of
    up to half. Every class is a multiple of 4 KB, which is what keeps carved buffers aligned.
    """
    if nbytes <= _PAGE:
        return _PAGE
    if nbytes <= _QUARTER_STEPS_FROM:
        return 1 << (nbytes - 1).bit_length()
    step = (1 << ((nbytes - 1).bit_length() - 1)) // 4
    return -(-nbytes // step) * step


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def huge_pages_offered() -> dict:
    """What the OS offers: explicit huge pages (``/proc/meminfo``) and the transparent huge page
    mode (``/sys/kernel/mm/transparent_hugepage/enabled``: "always", "madvise", "never", or
    "unavailable" where the file is missing). Never raises."""
    out = {"hugetlb_total": 0, "hugetlb_free": 0, "huge_page_kb": None, "thp": "unavailable"}
    info = _read("/proc/meminfo") or ""
    for line in info.splitlines():
        key, _, rest = line.partition(":")
        field = {"HugePages_Total": "hugetlb_total", "HugePages_Free": "hugetlb_free",
                 "Hugepagesize": "huge_page_kb"}.get(key)
        if field and rest.split():
            out[field] = int(rest.split()[0])
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp and "[" in thp:
        out["thp"] = thp[thp.index("[") + 1:thp.index("]")]
    return out


class _Arena:
    __slots__ = ("base", "size", "cursor", "dev_base", "backing", "mapped_bytes")

    def __init__(self, base, size, dev_base, backing, mapped_bytes):
        self.base, self.size, self.cursor = base, size, 0
        self.dev_base, self.backing, self.mapped_bytes = dev_base, backing, mapped_bytes


class _Slot:
    """One carved stretch of an arena; lives as long as the pool, handed out many times."""

    __slots__ = ("ptr", "dev", "cls", "event", "owner", "pins")

    def __init__(self, ptr, dev, cls):
        self.ptr, self.dev, self.cls = ptr, dev, cls
        self.event = None    # made on the first release with a stream, then reused
        self.owner = None    # the PinnedBuffer holding it now, None while free or in flight
        self.pins = 0        # zero-copy bindings reading or writing it (`pin_mapped`): no release meanwhile


class PinnedBuffer:
    """Page-locked host memory from a `PinnedPool`.

    Attributes
    ----------
    ptr : int
        Host address, 64-byte aligned (in fact 4 KB-aligned: see `PinnedPool`).
    nbytes : int
        Bytes asked for; `capacity` (the size class) may be larger.
    device_ptr : int or None
        The device's address of the same memory where the pool maps its arenas, else None.
    """

    __slots__ = ("pool", "ptr", "nbytes", "capacity", "device_ptr", "_slot")

    def __init__(self, pool, slot, nbytes):
        self.pool, self._slot, self.nbytes = pool, slot, nbytes
        self.ptr, self.capacity, self.device_ptr = slot.ptr, slot.cls, slot.dev

    @property
    def released(self) -> bool:
        """True once released, or once its pool closed (the memory is then gone)."""
        return self._slot.owner is not self or self.pool._closed

    def array(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """A NumPy view of the buffer (no copy) as `dtype`, `shape` (default: as many elements as fit).

        Raises
        ------
        PoolError
            The buffer was released or its pool closed (the memory may belong to someone else).
        ValueError
            `shape` needs more bytes than `nbytes`.
        """
        if self.released:
            raise PoolError(f"pinned buffer at {self.ptr:#x}: used after release or after its pool closed")
        dtype = _plain_dtype(dtype)
        if shape is None:
            shape = (self.nbytes // dtype.itemsize,)
        shape = _shape(shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"shape: must not be negative, got {shape}")
        need = math.prod(shape) * dtype.itemsize
        if need > self.nbytes:
            raise ValueError(f"shape {shape} of {dtype} needs {need} bytes; the buffer holds {self.nbytes}")
        # The view's base holds this buffer, hence its pool: the memory stays mapped while a view
        # lives (after a release it may belong to the next holder: views must not outlive it).
        raw = np.asarray(_BufferView(self, need))
        return raw.view(dtype).reshape(shape)

    def release(self, stream: int | None = None) -> None:
        """Return the buffer to its pool (see `PinnedPool.release`)."""
        self.pool.release(self, stream)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.released:
            self.release()

    def __repr__(self):
        state = "released" if self.released else "live"
        return f"{type(self).__name__}(ptr={self.ptr:#x}, nbytes={self.nbytes}, capacity={self.capacity}, {state})"


class MappedBuffer(PinnedBuffer):
    """A `PinnedBuffer` whose `device_ptr` is guaranteed: a kernel can read and write it in place
    (zero copy), which beats a copy for ticks of a few thousand elements."""

    __slots__ = ()


class PinnedPool:
    """A pool of pinned host buffers carved from huge-page arenas registered with the driver.

    Parameters
    ----------
    context : tickgpu.runtime.device.Context, optional
        The runtime context whose driver registers the memory; default `tickgpu.runtime.context()`.
    arena_bytes : int
        Bytes per arena (64 MB), rounded up to 2 MB; a request larger than that gets an arena of its
        own size. An int in (0, `MAX_BYTES`]: anything else raises TypeError or ValueError.
    huge_pages : {"auto", "thp", "off"}
        "auto" tries explicit huge pages, then transparent huge pages, then plain pages; "thp" skips
        explicit huge pages; "off" uses plain pages.
    mapped : bool
        Register arenas as device-mapped (buffers get a `device_ptr`).

    Notes
    -----
    Alignment: arenas start on a page (4 KB, or 2 MB with huge pages) and every size class is a
    multiple of 4 KB, carved at a multiple of 4 KB from the arena's start, so every buffer is
    4 KB-aligned, hence 64-byte (cache line) aligned and 16-byte aligned for the vector kernels.
    """

    def __init__(self, context=None, *, arena_bytes: int = 64 << 20, huge_pages="auto", mapped: bool = True):
        if context is None:
            import tickgpu.runtime as rt

            context = rt.context()
        if not isinstance(huge_pages, (str, bool, type(None))) or huge_pages not in _WANT_HUGE:
            raise ValueError(f"huge_pages must be 'auto', 'thp' or 'off', got {huge_pages!r}")
        if type(mapped) is not bool:
            raise TypeError(f"mapped must be True or False, got {mapped!r}")
        if not hasattr(context, "driver"):
            raise TypeError(f"context must be a tickgpu runtime context (tickgpu.runtime.context()), "
                            f"got {type(context).__name__}")
        arena_bytes = _byte_count("arena_bytes", arena_bytes)
        if not 0 < arena_bytes <= MAX_BYTES:
            # refused here: every arena would fail, each failure another mapping tried
            raise ValueError(f"arena_bytes must be > 0 and at most {MAX_BYTES} bytes, got {arena_bytes}")
        self.context, self.driver = context, context.driver
        self.arena_bytes = -(-arena_bytes // _HUGE) * _HUGE
        self.want_huge = _WANT_HUGE[huge_pages]
        self.mapped = mapped
        self.flags = _REGISTER_PORTABLE | (_REGISTER_DEVICEMAP if mapped else 0)
        self.offered = huge_pages_offered()
        # NOTE: one lock guards the arenas, free lists, pending lists and counters. acquire and
        # release are short (a few dict operations and, for in-flight buffers, an event query),
        # so a finer scheme would not pay. It is reentrant because a garbage collection can run
        # at any allocation made while it is held, and the finalizers it runs release buffers to
        # this pool from the same thread (a `mapped_array` in a reference cycle, a ManagedArray's
        # staging, a zero-copy binding's unpin): with a plain lock that thread waited on itself for
        # good. Every section leaves the pool consistent at each allocation it makes (`_collect`
        # edits the pending list in place for that reason). The memory itself is not guarded:
        # between acquire and release a buffer belongs to its holder alone, and the holder must
        # release it with the stream of the last asynchronous copy that touches it (released
        # without a stream while a copy is queued, it could be handed out and overwritten mid-copy).
        self._lock = threading.RLock()
        self._arenas: list[_Arena] = []
        self._free: dict[int, list[_Slot]] = {}
        self._pending: dict[int, list[_Slot]] = {}
        self._slots: int = 0
        self._held: set[_Slot] = set()   # slots of buffers handed out and not released
        self._in_use = 0
        self._reuses = 0
        self._backing: str | None = None
        self._fallback_reason: str | None = None
        self._closed = False
        with _every_lock:
            _every_pool.add(self)

    # ---- arenas -------------------------------------------------------------------------------
    def _map_arena(self, size: int) -> tuple[_Arena | None, str]:
        """(a tg_host_map'd, registered arena, "") or (None, why not)."""
        from tickgpu._native import ffi, lib

        out, mapped_bytes, backing = ffi.new("void **"), ffi.new("uint64_t *"), ffi.new("int *")
        st = lib.tg_host_map(size, self.want_huge, out, mapped_bytes, backing)
        if st != lib.TG_OK:
            name = ffi.string(lib.tg_status_name(st)).decode()
            return None, f"tg_host_map({size} bytes) failed: {name} (errno {ffi.errno})"
        base, length = int(ffi.cast("uintptr_t", out[0])), int(mapped_bytes[0])
        kind = _BACKING_NAMES[backing[0]]
        if kind == "thp" and self.offered["thp"] == "never":
            kind = "pages"   # the madvise was accepted, but the kernel will not act on it
        try:
            self.driver.mem_host_register(base, length, self.flags)
            dev = self.driver.host_device_pointer(base) if self.mapped else None
        except Exception as e:   # CudaError, or a stand-in driver's failure: fall back either way
            try:
                self.driver.mem_host_unregister(base)
            except Exception:
                pass
            lib.tg_host_unmap(out[0], length)
            return None, f"cuMemHostRegister of a {kind} mapping refused: {e}"
        return _Arena(base, length, dev, kind, length), ""

    def _new_arena(self, need: int) -> _Arena:
        size = max(self.arena_bytes, -(-need // _HUGE) * _HUGE)
        arena, why = (None, self._fallback_reason) if self._fallback_reason else self._map_arena(size)
        if arena is None:
            try:
                base = self.driver.mem_host_alloc(size, self.flags)
            except Exception as e:
                raise PoolError(f"pinned arena of {size} bytes: {why}; refused by cuMemHostAlloc too: {e}") from e
            try:
                dev = self.driver.host_device_pointer(base) if self.mapped else None
            except Exception as e:
                self.driver.mem_free_host(base)    # not an arena yet: nothing else would free it
                raise PoolError(f"pinned arena of {size} bytes: {why}; a cuMemHostAlloc arena has no device "
                                f"mapping: {e}") from e
            if self._fallback_reason is None:
                # The pool turns to cuMemHostAlloc for good only once cuMemHostAlloc gave what the
                # mapping refused: a request too large for both (1 TB on a smaller host) says so
                # in its PoolError and leaves the next arenas to huge pages. Said once per pool:
                # the memory works, but without huge pages, and on some platforms cuMemHostAlloc
                # is slower to allocate.
                self._fallback_reason = why
                warnings.warn(f"PinnedPool: using cuMemHostAlloc: {why}", RuntimeWarning, stacklevel=5)
            arena = _Arena(base, size, dev, "cuMemHostAlloc", 0)
        self._backing = arena.backing
        self._arenas.append(arena)
        return arena

    def _carve(self, cls: int) -> _Slot:
        arena = next((a for a in self._arenas if a.size - a.cursor >= cls), None)
        if arena is None:
            self.context.enter()
            arena = self._new_arena(cls)
        off = arena.cursor
        arena.cursor += cls
        self._slots += 1
        return _Slot(arena.base + off, None if arena.dev_base is None else arena.dev_base + off, cls)

    # ---- buffers ------------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._closed:
            raise PoolError(f"PinnedPool.{what}: the pool is closed")

    def _collect(self, cls: int) -> None:
        """Move the class's in-flight slots whose events completed to its free list."""
        pending = self._pending.get(cls)
        if not pending:
            return
        done = [s for s in pending if self.driver.event_query(s.event)]
        for s in done:
            pending.remove(s)
            self._free.setdefault(cls, []).append(s)

    def acquire(self, nbytes: int) -> PinnedBuffer:
        """A pinned buffer of at least `nbytes` bytes.

        A released buffer of the same size class is reused once no work queued before its release
        can still touch it; otherwise a new one is carved (a new arena where none has room).

        Raises
        ------
        TypeError
            `nbytes` is not an int (a float, a string or a bool).
        ValueError
            `nbytes` < 0, or more than any pinned buffer can hold (`MAX_BYTES`).
        PoolError
            The pool is closed, or no pinned memory could be had (the message says why; the
            pool is left as it was, its next arenas still mapped on huge pages where offered).
        """
        return self._acquire(nbytes, PinnedBuffer)

    def _acquire(self, nbytes, kind) -> PinnedBuffer:
        nbytes = _byte_count("nbytes", nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if nbytes > MAX_BYTES:
            # refused before any arena is tried: a failed mapping would turn the pool to cuMemHostAlloc
            raise ValueError(f"nbytes: {nbytes} is more than a pinned buffer can hold ({MAX_BYTES} bytes)")
        cls = size_class(nbytes)
        with self._lock:
            self._check_open("acquire")
            self._collect(cls)
            free = self._free.get(cls)
            if free:
                slot = free.pop()
                self._reuses += 1
            else:
                slot = self._carve(cls)
            buf = kind(self, slot, nbytes)
            slot.owner = buf
            self._held.add(slot)
            self._in_use += cls
            return buf

    def release(self, buf: PinnedBuffer, stream: int | None = None) -> None:
        """Give `buf` back to the pool.

        With `stream`, an event is recorded on it and the buffer is not handed out again before
        the event completes: pass the stream of the last asynchronous copy or kernel that uses it.
        Without, the buffer is reusable at once.

        Raises
        ------
        PoolError
            `buf` was already released, comes from another pool (or is not a buffer), or the pool
            is closed.
        CudaError
            The driver refused to record the event; `buf` is then still held (not released).
        """
        with self._lock:
            self._check_open("release")
            if not isinstance(buf, PinnedBuffer) or buf.pool is not self:
                raise PoolError(f"PinnedPool.release: {buf!r} was not handed out by this pool")
            slot = buf._slot
            if slot.owner is not buf:
                raise PoolError(f"PinnedPool.release: pinned buffer at {buf.ptr:#x} released twice")
            if slot.pins:
                raise PoolError(f"PinnedPool.release: pinned buffer at {buf.ptr:#x} is read and written in place "
                                "by a zero-copy binding (bind_greeks(..., out=...)); drop the binding first")
            if stream is not None:
                # The event first: should the driver refuse it, the buffer stays its holder's
                # (still releasable) rather than lost to both the holder and the free lists.
                self.context.enter()
                if slot.event is None:
                    slot.event = self.driver.event_create()
                self.driver.event_record(slot.event, stream)
            slot.owner = None
            self._held.discard(slot)
            self._in_use -= slot.cls
            if stream is None:
                self._free.setdefault(slot.cls, []).append(slot)
            else:
                self._pending.setdefault(slot.cls, []).append(slot)

    def stats(self) -> dict:
        """The pool's state.

        Returns
        -------
        dict
            ``arenas`` (count), ``reserved`` (bytes in arenas), ``in_use`` (bytes of buffers held,
            by capacity), ``in_flight`` (released buffers whose stream has not reached the release
            yet) and ``in_flight_bytes``, ``reuses`` (acquires served by a released buffer),
            ``buffers`` (slots carved), ``backing`` ("hugetlb", "thp", "pages", "cuMemHostAlloc",
            None before the first arena), ``fallback_reason`` (why cuMemHostAlloc, else None) and
            ``huge_pages`` (what the OS offers: `huge_pages_offered`).
        """
        with self._lock:
            if not self._closed:
                for cls in list(self._pending):
                    self._collect(cls)
            flying = [s for v in self._pending.values() for s in v]
            return {"arenas": len(self._arenas), "reserved": sum(a.size for a in self._arenas),
                    "in_use": self._in_use, "in_flight": len(flying),
                    "in_flight_bytes": sum(s.cls for s in flying), "reuses": self._reuses, "buffers": self._slots,
                    "backing": self._backing, "fallback_reason": self._fallback_reason,
                    "huge_pages": dict(self.offered)}

    def close(self) -> None:
        """Wait for in-flight buffers, unregister and unmap every arena.

        Buffers still held are reported (a ResourceWarning) and become unusable: their `array`
        and `release` raise PoolError. NOTE: NumPy views taken from them earlier point at memory
        that is unmapped here; they must not be used after close.

        Raises
        ------
        PoolError
            A buffer of the pool is in use in place: the runtime's staging (the runtime context's
            pool, `default_pinned_pool`, holds it for the life of the context) or the arrays of a
            zero-copy binding (`bind_greeks(..., out=...)`). Nothing is closed then: the GPU would
            go on reading and writing memory that is no longer mapped.
        """
        from tickgpu._native import ffi, lib

        with self._lock:
            if self._closed:
                return
            in_place = [s for s in self._held if s.pins]
            if in_place:
                raise PoolError(f"PinnedPool.close: {len(in_place)} of its buffers are read and written in place "
                                "by the GPU (the runtime's staging, or the arrays of a zero-copy binding); drop "
                                "the bindings first (the runtime context's own pool stays open for the life of "
                                "the context)")
            self._closed = True
            self.context.enter()
            for slots in self._pending.values():
                for s in slots:
                    self.driver.event_synchronize(s.event)
            for slots in (*self._free.values(), *self._pending.values()):
                for s in slots:
                    if s.event is not None:
                        self.driver.event_destroy(s.event)
            if self._in_use:
                warnings.warn(f"PinnedPool.close: {self._in_use} bytes of buffers still held", ResourceWarning,
                              stacklevel=2)
            for a in self._arenas:
                if a.backing == "cuMemHostAlloc":
                    self.driver.mem_free_host(a.base)
                else:
                    self.driver.mem_host_unregister(a.base)
                    lib.tg_host_unmap(ffi.cast("void *", a.base), a.mapped_bytes)
            self._arenas.clear()
            self._free.clear()
            self._pending.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Dropped without close(): unregister and unmap its arenas. Nothing can still point into
        # them: buffers, their views and zero-copy bindings all hold the pool.
        try:
            if not self._closed:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ResourceWarning)
                    self.close()
        except Exception:   # the context (or the interpreter) is gone first
            pass


class _BufferView:
    """NumPy's base for `PinnedBuffer.array`: the buffer's bytes, holding the buffer."""

    __slots__ = ("buf", "__array_interface__")

    def __init__(self, buf: PinnedBuffer, nbytes: int):
        self.buf = buf
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (buf.ptr, False), "version": 3}


_every_pool: "weakref.WeakSet" = weakref.WeakSet()   # every PinnedPool made, for mapped_address
_every_lock = threading.Lock()
_pools_lock = threading.Lock()


def default_pinned_pool(context=None, *, arena_bytes: int | None = None) -> PinnedPool:
    """The process's pinned pool for a runtime context (default `tickgpu.runtime.context()`),
    created on first use with the default settings (`arena_bytes`, if given, applies to that
    creation only)."""
    if context is None:
        import tickgpu.runtime as rt

        context = rt.context()
    with _pools_lock:
        # Kept on the context, not in a registry keyed by it: the pool refers to its context, so a
        # registry's entry would keep every context alive for good (a cycle the GC collects instead).
        pool = getattr(context, "_default_pinned_pool", None)
        if pool is None or pool._closed:
            pool = context._default_pinned_pool = (PinnedPool(context) if arena_bytes is None
                                                   else PinnedPool(context, arena_bytes=arena_bytes))
        return pool


def mapped_address(ptr: int, nbytes: int) -> int | None:
    """The device's address of host bytes [ptr, ptr + nbytes) where they lie in one held (not
    released) buffer of a mapped, open pinned pool (the memory of `mapped`, `mapped_array` and
    mapped `PinnedPool` buffers), else None."""
    found = _held_slot(ptr, nbytes)
    return None if found is None else found[1].dev + (ptr - found[1].ptr)


def _held_slot(ptr: int, nbytes: int):
    """(pool, slot) of the held mapped buffer holding [ptr, ptr + nbytes), else None."""
    with _every_lock:
        pools = [p for p in _every_pool if not p._closed and p.mapped]
    for pool in pools:
        with pool._lock:
            for s in pool._held:
                if s.dev is not None and s.ptr <= ptr and ptr + nbytes <= s.ptr + s.cls:
                    return pool, s
    return None


def hold_in_place(buf: PinnedBuffer):
    """Pin `buf` (a held buffer) as the runtime's staging: its pool refuses to close while it is
    held so. Returns the call that ends it (before the buffer's release)."""
    pool, slot = buf.pool, buf._slot
    with pool._lock:
        pool._check_open("hold")
        slot.pins += 1
    return _unpin_once(pool, slot)


def _unpin_once(pool, slot):
    """The call that ends one pin of `slot`; calling it again does nothing (a second call would
    take another holder's pin, or leave a count below zero and the buffer never releasable)."""
    pinned = [True]

    def unpin():
        with pool._lock:
            if pinned:
                pinned.clear()
                slot.pins -= 1

    return unpin


def pin_mapped(ptr: int, nbytes: int):
    """(device address, unpin) for host bytes [ptr, ptr + nbytes) of a held mapped buffer, which
    cannot be released until ``unpin()`` is called (its release raises PoolError): for a zero-copy
    binding, whose kernel reads and writes the memory on every call. None where the bytes lie in no
    such buffer."""
    found = _held_slot(ptr, nbytes)
    if found is None:
        return None
    pool, slot = found
    with pool._lock:
        if slot.owner is None:      # released since it was found
            return None
        slot.pins += 1
    return slot.dev + (ptr - slot.ptr), _unpin_once(pool, slot)


class _MappedOwner(_BufferView):
    """The owner of a `mapped_array`: NumPy's base for it, returning its buffer to the pool when
    the array and every view of it are gone."""

    __slots__ = ()

    def __del__(self):
        try:
            if not self.buf.released:
                self.buf.release()
        except Exception:   # the pool (or the interpreter) is gone first
            pass


def mapped_array(shape, dtype=np.float64, context=None) -> np.ndarray:
    """A NumPy array in pinned host memory that the GPU reads and writes in place (zero copy).

    From the default pinned pool (`mapped`); its buffer goes back to the pool when the array and
    every view of it are gone. Uninitialised, like `numpy.empty`. For the arrays of a zero-copy
    binding (`tickgpu.runtime.bind_greeks(..., out=...)`).
    """
    dtype = _plain_dtype(dtype)
    shape = _shape(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"mapped_array: shape must not be negative, got {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_BYTES:
        raise ValueError(f"mapped_array: shape {shape} of {dtype} is {nbytes} bytes, more than any pinned "
                         f"buffer ({MAX_BYTES} bytes)")
    buf = mapped(max(1, nbytes), context)
    return np.asarray(_MappedOwner(buf, nbytes)).view(dtype).reshape(shape)


def mapped(nbytes: int, context=None) -> MappedBuffer:
    """A pinned buffer of `nbytes` bytes with a device address, from the default pinned pool.

    Release it with ``buf.release(stream)`` after the last kernel reading it was queued.
    """
    pool = default_pinned_pool(context)
    if not pool.mapped:
        raise PoolError("mapped: the default pinned pool does not map its arenas into the device")
    return pool._acquire(nbytes, MappedBuffer)
