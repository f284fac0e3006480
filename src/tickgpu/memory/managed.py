"""Managed (unified) arrays, prefetched in blocks; explicit copies where managed memory is degraded.

A managed array is one address valid on the host and the device; the driver migrates its pages on
demand. On demand is slow: a kernel's first touch of 100 MB took 34 ms of page faults against
0.18 ms once resident (DESIGN.md). So the array is prefetched before kernels read it, and only the
blocks that are not already there: residency is tracked per block (64 KB by default) on both
sides, host writes (`ManagedArray.write`, `ManagedArray.mark_dirty`) invalidate the device's copy
of their blocks, and a prefetch moves just the invalid blocks of the range it is asked for.

Where the platform cannot share memory concurrently (``CONCURRENT_MANAGED_ACCESS`` 0: WSL2,
Windows; or no managed memory at all), the same object keeps a pinned host array and a device
array and "prefetch" becomes asynchronous copies of the same invalid blocks: mode "explicit".
"""
from __future__ import annotations

import math
import os

import numpy as np

from tickgpu.memory.errors import PoolError
from tickgpu.memory.host import _plain_dtype, _shape

__all__ = ["ManagedArray", "FREE_MARGIN_BYTES", "free_margin"]

_SMALL_PAGE = 4096
# Left free on the device when sizing a request: the driver's own allocations (module loads,
# launch and page-table memory, a second context) need room, and on these machines
# over-subscribing managed memory can hang the GPU rather than fail cleanly. 1 GiB, or 3% of the
# card where that is more (4.2 GiB on an H200).
FREE_MARGIN_BYTES = 1 << 30


def free_margin(total: int) -> int:
    """Bytes a request must leave free on a device of `total` bytes (see FREE_MARGIN_BYTES)."""
    return max(FREE_MARGIN_BYTES, total * 3 // 100)


def _runs(mask: np.ndarray):
    """(first, stop) block index pairs of the runs of True in `mask`."""
    if not mask.any():
        return []
    m = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(m))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


class ManagedArray:
    """A C-contiguous array readable by the host and by GPU kernels, moved in blocks on request.

    Parameters
    ----------
    shape : int or tuple of int
        Elements; 0 elements are allowed (nothing is allocated).
    dtype : dtype
    context : tickgpu.runtime.device.Context, optional
        Default `tickgpu.runtime.context()`.
    block_bytes : int
        Residency granule: a positive multiple of 4 KB (64 KB default; the driver migrates at
        least a 4 KB page, and 64 KB is what its fault handler moves at a time).
    read_mostly : bool
        Advise SET_READ_MOSTLY (managed mode): prefetching to the device copies pages instead of
        moving them, so host reads stay local; a write anywhere invalidates the other copies.
    prefer_device : bool
        Advise SET_PREFERRED_LOCATION to the device (managed mode).
    mode : {"auto", "managed", "explicit"}
        "auto" picks managed memory where the device offers it with concurrent access and
        ``$TICKGPU_MANAGED`` is not "explicit"; "explicit" forces the fallback; "managed" refuses
        (PoolError) where managed memory is unavailable.

    Attributes
    ----------
    host : numpy.ndarray
        The host's view (managed mode: the managed memory itself; explicit mode: a pinned copy).
    mode : str
        "managed" or "explicit"; `reason` says why explicit ("" in managed mode).

    Raises
    ------
    PoolError
        The array would not fit in the device's free memory less `free_margin` (requested and free
        bytes in the message), or mode "managed" where it is unavailable.
    ValueError
        A bad shape, block size or mode.

    Notes
    -----
    Host writes must go through `write` or be declared with `mark_dirty`: in explicit mode the
    device copy is otherwise stale, and in managed mode the next block prefetch would skip them
    (the kernel still reads correct data, through page faults, only slower).
    NOTE: one array is not thread-safe; share it between threads under the caller's lock.
    """

    def __init__(self, shape, dtype=np.float64, *, context=None, block_bytes: int = 65536, read_mostly: bool = True,
                 prefer_device: bool = False, mode: str = "auto"):
        if context is None:
            import tickgpu.runtime as rt

            context = rt.context()
        if mode not in ("auto", "managed", "explicit"):
            raise ValueError(f"mode must be 'auto', 'managed' or 'explicit', got {mode!r}")
        block_bytes = int(block_bytes)
        if block_bytes <= 0 or block_bytes % _SMALL_PAGE:
            raise ValueError(f"block_bytes must be a positive multiple of 4096, got {block_bytes}")
        self.shape = _shape(shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"shape must be >= 0, got {self.shape}")
        self.dtype = _plain_dtype(dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.context, self.driver, self.device = context, context.driver, context.device
        self.block_bytes, self.read_mostly = block_bytes, bool(read_mostly)
        self.prefer_device = bool(prefer_device)
        self.nblocks = -(-self.nbytes // block_bytes)
        self.mode, self.reason = self._choose_mode(mode)
        # Residency per block: does the device / the host hold the current bytes?
        self.on_device = np.zeros(self.nblocks, dtype=bool)
        self.on_host = np.ones(self.nblocks, dtype=bool)
        self.ptr = self.dev = 0
        self._pinned = None
        self._sync_stream = None     # stream of the last prefetch, for consumers to order on
        self._event = None           # recorded after each explicit-mode copy (host writes wait on it)
        self._closed = False
        self._mem = None             # the memory's owner (_Memory), None when there is none
        self._allocate()

    # ---- setup --------------------------------------------------------------------------------
    def _choose_mode(self, mode: str) -> tuple[str, str]:
        if mode == "explicit":
            return "explicit", "mode='explicit' requested"
        if mode == "auto" and os.environ.get("TICKGPU_MANAGED", "").lower() == "explicit":
            return "explicit", "$TICKGPU_MANAGED=explicit"
        try:
            managed = self.driver.device_attribute("MANAGED_MEMORY", self.device)
            concurrent = self.driver.device_attribute("CONCURRENT_MANAGED_ACCESS", self.device)
        except Exception as e:   # an unknown attribute (old driver, stand-in): do not gamble on it
            return self._degraded(mode, f"device attributes unreadable ({type(e).__name__}: {e})")
        if not managed:
            return self._degraded(mode, "the device reports no managed memory (MANAGED_MEMORY 0)")
        if not concurrent:
            return self._degraded(mode, "no concurrent managed access (CONCURRENT_MANAGED_ACCESS 0, e.g. WSL2): "
                                        "the host may not touch managed memory while any kernel runs, "
                                        "and prefetch is unsupported")
        return "managed", ""

    @staticmethod
    def _degraded(mode: str, reason: str) -> tuple[str, str]:
        if mode == "managed":
            raise PoolError(f"ManagedArray(mode='managed'): {reason}")
        return "explicit", reason

    def _allocate(self) -> None:
        self.context.enter()
        free, total = self.driver.mem_get_info()
        margin = free_margin(total)
        if self.nbytes > free - margin:
            raise PoolError(f"ManagedArray: {self.nbytes} bytes requested, {free} bytes free on the device "
                            f"and {margin} kept free (over-subscribing managed memory can hang the GPU)")
        if self.nbytes == 0:
            self.host = np.empty(self.shape, dtype=self.dtype)
            return
        mem = self._mem = _Memory(self.context, self.mode)
        if self.mode == "managed":
            self.ptr = self.dev = mem.ptr = self.driver.mem_alloc_managed(self.nbytes)
            if self.read_mostly:
                self.driver.mem_advise(self.ptr, self.nbytes, "SET_READ_MOSTLY", self.device)
            if self.prefer_device:
                self.driver.mem_advise(self.ptr, self.nbytes, "SET_PREFERRED_LOCATION", self.device)
        else:
            from tickgpu.memory.host import default_pinned_pool

            self.dev = mem.dev = self.driver.mem_alloc(self.nbytes)
            self._pinned = mem.pinned = default_pinned_pool(self.context).acquire(self.nbytes)
            self.ptr = self._pinned.ptr
            self._event = mem.event = self.driver.event_create()
        # The memory's owner is the host view's base: a view kept past close() keeps it alive.
        mem.__array_interface__ = {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                                   "version": 3}
        self.host = np.asarray(mem)

    # ---- host side ----------------------------------------------------------------------------
    def _blocks(self, start: int, stop: int | None) -> tuple[int, int]:
        """Blocks covering elements [start, stop) of the flattened array; checks the range."""
        stop = self.size if stop is None else int(stop)
        start = int(start)
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"element range [{start}, {stop}) outside the array of {self.size} elements")
        if start == stop:
            return 0, 0
        item = self.dtype.itemsize
        return start * item // self.block_bytes, -(-stop * item // self.block_bytes)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise PoolError(f"ManagedArray.{what}: the array is closed")

    def _wait_copies(self) -> None:
        # Explicit mode: a queued copy may still be reading the pinned host array or writing it.
        if self._event is not None and self._sync_stream is not None:
            self.driver.event_synchronize(self._event)

    def mark_dirty(self, start: int = 0, stop: int | None = None, *, side: str = "host") -> None:
        """Declare elements [start, stop) (flattened) written by `side` ("host" or "device"): the
        other side's copy of their blocks is stale until the next prefetch there."""
        self._check_open("mark_dirty")
        if side not in ("host", "device"):
            raise ValueError(f"side must be 'host' or 'device', got {side!r}")
        b0, b1 = self._blocks(start, stop)
        if side == "host":
            self.on_host[b0:b1], self.on_device[b0:b1] = True, False
        else:
            self.on_device[b0:b1], self.on_host[b0:b1] = True, False

    def write(self, start: int, values) -> None:
        """Write `values` at flattened element `start` from the host and mark their blocks dirty.

        Raises
        ------
        IndexError
            The values would run past the end of the array.
        """
        self._check_open("write")
        values = np.asarray(values, dtype=self.dtype).reshape(-1)
        b0, b1 = self._blocks(start, int(start) + values.size)
        if b0 == b1:
            return
        self._wait_copies()
        if not self.on_host[b0:b1].all():
            # Blocks only the device holds: bring them back first, or the unwritten rest of each
            # block would go back to the device stale at the next prefetch.
            self.prefetch(start, int(start) + values.size, to="host")
        self.host.reshape(-1)[int(start):int(start) + values.size] = values
        self.mark_dirty(start, int(start) + values.size)

    # ---- movement ----------------------------------------------------------------------------
    def prefetch(self, start: int = 0, stop: int | None = None, *, to: str = "device", stream: int | None = None,
                 blocks: bool = True) -> int:
        """Make elements [start, stop) (flattened) current on `to`, ordered on `stream`.

        With ``blocks=True`` only the blocks covering the range that `to` does not hold move, one
        driver call per run of consecutive such blocks (a call per 64 KB block would cost a
        driver call each; a run of dirty blocks moves as one). With ``blocks=False`` the whole
        array moves in one call, whatever is resident (the benchmark's comparison).

        Work queued on `stream` (default: the runtime's stream) after this sees the data. To the
        host, the call also waits for the stream, since the host is about to read.

        Returns
        -------
        int
            Bytes asked to move.

        Raises
        ------
        IndexError
            The range is outside the array.
        ValueError
            `to` is neither "device" nor "host".
        """
        self._check_open("prefetch")
        if to not in ("device", "host"):
            raise ValueError(f"to must be 'device' or 'host', got {to!r}")
        stream = self.context.stream if stream is None else stream
        if blocks:
            b0, b1 = self._blocks(start, stop)
            have = self.on_device if to == "device" else self.on_host
            runs = [(b0 + a, b0 + b) for a, b in _runs(~have[b0:b1])]
        else:
            runs = [(0, self.nblocks)] if self.nblocks else []
        moved = 0
        if runs:
            self.context.enter()
            if self.mode == "explicit":
                self._wait_copies()
        for a, b in runs:
            off = a * self.block_bytes
            n = min(self.nbytes, b * self.block_bytes) - off
            moved += n
            self._move(off, n, to, stream)
            self._mark_moved(a, b, to)
        if runs:
            self._sync_stream = self._mem.stream = stream
            if self._event is not None:
                self.driver.event_record(self._event, stream)
            if to == "host":
                self.driver.stream_synchronize(stream)
        return moved

    def _move(self, off: int, n: int, to: str, stream: int) -> None:
        if self.mode == "managed":
            self.driver.mem_prefetch_async(self.ptr + off, n, self.device if to == "device" else None, stream)
        elif to == "device":
            self.driver.memcpy_htod_async(self.dev + off, self.ptr + off, n, stream)
        else:
            self.driver.memcpy_dtoh_async(self.ptr + off, self.dev + off, n, stream)

    def _mark_moved(self, a: int, b: int, to: str) -> None:
        # Explicit copies and read-mostly prefetches duplicate; a plain managed prefetch migrates.
        keep_both = self.mode == "explicit" or self.read_mostly
        if to == "device":
            self.on_device[a:b] = True
            if not keep_both:
                self.on_host[a:b] = False
        else:
            self.on_host[a:b] = True
            if not keep_both:
                self.on_device[a:b] = False

    @property
    def __cuda_array_interface__(self) -> dict:
        """CAI version 3 over the device view (managed memory, or the device copy in explicit
        mode, current as of the last prefetch); ``stream`` is the last prefetch's stream, for the
        consumer to order on, or None where nothing was queued."""
        self._check_open("__cuda_array_interface__")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (int(self.dev), False), "strides": None,
                "version": 3, "stream": self._sync_stream}

    def close(self) -> None:
        """Free the memory (after queued copies finish); further use raises PoolError.

        A NumPy view of `host` still held elsewhere keeps the memory until it is gone (then freed
        the same way), so it never reads or writes freed memory. Dropping the array without
        closing it frees the memory too, once it and its views are collected."""
        if self._closed:
            return
        self._closed = True
        self.host = None
        self._pinned = None
        self._mem = None        # the owner frees the memory here, or when the last view goes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"ManagedArray(shape={self.shape}, dtype={self.dtype}, mode={self.mode!r}, "
                f"device blocks {int(self.on_device.sum())}/{self.nblocks})")


class _Memory:
    """A ManagedArray's memory and NumPy's base for its host view: freed, after the last queued
    copy or prefetch finishes, once the array is closed (or collected) and no view is left."""

    def __init__(self, context, mode: str):
        self.context, self.driver, self.mode = context, context.driver, mode
        self.ptr = self.dev = 0
        self.pinned = self.event = self.stream = None

    def __del__(self):
        try:
            self.context.enter()
            if self.stream is not None:
                self.driver.stream_synchronize(self.stream)
            if self.mode == "managed":
                if self.ptr:
                    self.driver.mem_free(self.ptr)
            else:
                if self.dev:
                    self.driver.mem_free(self.dev)
                if self.pinned is not None and not self.pinned.released:
                    self.pinned.release()
                if self.event is not None:
                    self.driver.event_destroy(self.event)
        except Exception:    # the context (or the interpreter) is gone first
            pass
