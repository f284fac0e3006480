"""Fetch -> compute -> write on three streams: host arrays far larger than a tick, at PCIe speed.

`Pipeline` cuts a call's arrays into chunks. Chunk k's input slices are copied host -> device on
the *fetch* stream into input slot ``k % depth``, the kernel runs on the *compute* stream into
output slot ``k % depth``, and the results are copied device -> host on the *write* stream straight
into the caller's output arrays. Events order the stages:

* compute k waits for ``fetched[s]`` (its inputs arrived) and ``written[s]`` of chunk k - depth
  (its output slot was copied out);
* fetch k waits for ``computed[s]`` of chunk k - depth (its input slot was read);
* write k waits for ``computed[s]`` of chunk k.

So with depth >= 2 the copy engines move chunk k+1 in and chunk k-1 out while chunk k computes:
the run takes about as long as the slower PCIe direction, not the sum of the three stages.

Memory. Copies from and to page-locked (pinned) host memory run at full PCIe speed and
asynchronously; pass inputs and ``out=`` arrays from `tickgpu.memory.PinnedPool` for that.
Pageable NumPy arrays are still correct, but the driver copies them through its own staging at a
fraction of the speed, and a copy into pageable memory returns only once done. Device buffers
(depth input and depth output slots, sized for one chunk) are allocated once per `Pipeline`
and grown only when a later call needs bigger chunks. Broadcast values live in a small device
constant block written once per call (per batch in `Pipeline.stream`).

`Pipeline.serial` does the same work on one stream, one chunk after another: the baseline that
shows what the overlap buys.
"""
from __future__ import annotations

import collections
import math
import time

import numpy as np

from tickgpu.runtime.stream_batch import CONST_AREA as _CONST_AREA
from tickgpu.runtime.stream_batch import CONST_SLOT as _CONST_SLOT
from tickgpu.runtime.stream_batch import PipelineCall as _Call
from tickgpu.runtime.stream_batch import PipelineStats

__all__ = ["Pipeline", "PipelineStats"]

# Device regions are aligned like cuMemAlloc's own blocks, so every region suits every variant.
_ALIGN = 256


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _up16(x: int) -> int:
    return -(-x // 16) * 16


def _up_align(x: int) -> int:
    return -(-x // _ALIGN) * _ALIGN


class Pipeline:
    """Greeks or implied vol over host arrays of any size, as overlapped fetch / compute / write.

    Parameters
    ----------
    op : {"greeks", "implied_vol"}
        The operation; inputs and outputs are those of `tickgpu.greeks` / `tickgpu.implied_vol`.
    dtype : numpy.float32 or numpy.float64
        Precision of the inputs, the computation and the results.
    chunk : int
        Options per chunk (>= 1). Each chunk's copies and launch cost some microseconds, so chunks
        of a few million options keep that below 1%; the device buffers hold 2 x depth chunks.
    depth : int
        Buffer slots per stage (>= 2): how many chunks may be in flight.
    context : tickgpu.runtime.device.Context, optional
        The runtime context (default `tickgpu.runtime.context()`, created on first use).

    Raises
    ------
    ValueError
        Unknown op, dtype, chunk < 1 or depth < 2.

    Notes
    -----
    A Pipeline owns device buffers and three streams; `close` returns them (or use it as a context
    manager). Calls hold the context's lock while they queue and wait, so one Pipeline serves one
    call at a time; a second call while a `stream` generator is open raises RuntimeError.
    """

    def __init__(self, op: str = "greeks", *, dtype=np.float32, chunk: int = 1 << 22, depth: int = 2,
                 context=None):
        from tickgpu.runtime import ops
        from tickgpu.runtime.staged import DTYPE_CODE

        fams = {"greeks": ops.GREEKS, "implied_vol": ops.IMPLIED_VOL}
        if op not in fams:
            raise ValueError(f"op: must be one of {', '.join(fams)}, got {op!r}")
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPE_CODE:
            raise ValueError(f"dtype: must be float32 or float64, got {self.dtype}")
        if int(chunk) != chunk or chunk < 1:
            raise ValueError(f"chunk: must be an integer >= 1, got {chunk!r}")
        if int(depth) != depth or depth < 2:
            raise ValueError(f"depth: must be an integer >= 2 (double buffering at least), got {depth!r}")
        if context is None:
            from tickgpu.runtime import context as _context

            context = _context()
        self.op, self.fam, self.code = op, fams[op], DTYPE_CODE[self.dtype]
        self.chunk, self.depth = int(chunk), int(depth)
        self.ctx = ctx = context
        self.driver = d = ctx.driver
        self._tokens: dict[int, object] = {}   # device pointer -> its BufferSource token
        self.last: PipelineStats | None = None
        self._busy = False
        self._closed = False
        self._cap = 0                       # elements per slot the device buffers hold
        self._in_blocks: list[int] = []     # per slot: one device block for every input region
        self._out_blocks: list[int] = []
        self._launchers: dict = {}          # (slot, variant) -> [Launcher, key of what it holds]
        with ctx.lock:
            ctx.enter()
            self.fetch_stream, self.compute_stream, self.write_stream = (d.stream_create() for _ in range(3))
            mk = lambda: [d.event_create() for _ in range(self.depth)]  # noqa: E731
            self._fetched, self._computed, self._written = mk(), mk(), mk()
            # Timing events (flags 0: timing enabled) for first_result_s, and one "batch done"
            # event per constant area for stream().
            self._t_start, self._t_first = d.event_create(flags=0), d.event_create(flags=0)
            self._areas = self.depth + 1
            self._done = [d.event_create() for _ in range(self._areas)]
            self._const_host = d.mem_host_alloc(self._areas * _CONST_AREA)
            self._const_dev = self._device_alloc(self._areas * _CONST_AREA)
        self._const_view = np.ctypeslib.as_array(
            (np.ctypeslib.ctypes.c_uint8 * (self._areas * _CONST_AREA)).from_address(self._const_host))
        self._wait = d.stream_wait_event
        k = len(self.fam.inputs)
        isz = [1 if name == self.fam.flag else self.dtype.itemsize for name in self.fam.inputs]
        self._in_isz = isz
        self._out_isz = [self.fam.out_dtype(role, self.dtype).itemsize for _, role in self.fam.outputs]
        self._k = k

    # ---- device memory (one place, so a pool can stand in for the driver) -------------------------
    def _device_alloc(self, nbytes: int) -> int:
        """Device memory for the slots and constants, from the context's device pool (its
        `BufferSource`; the driver's cuMemAlloc on a stand-in driver)."""
        ptr, token = self.ctx.memory.device(nbytes)
        self._tokens[ptr] = token
        return ptr

    def _device_free(self, ptr: int) -> None:
        self.ctx.memory.free_device(self._tokens.pop(ptr))

    def _regions(self, sizes: list[int], cap: int) -> tuple[list[int], int]:
        offs, cursor = [], 0
        for s in sizes:
            offs.append(cursor)
            cursor += _up_align(cap * s)
        return offs, cursor

    def _reserve(self, n: int) -> None:
        """Slots for chunks of min(n, chunk) elements; grown (never shrunk) when a call needs more."""
        need = _up16(min(n, self.chunk))
        if need <= self._cap:
            return
        self._sync_all()     # nothing of ours may still read or write the old blocks
        for p in self._in_blocks + self._out_blocks:
            self._device_free(p)
        self._in_blocks, self._out_blocks = [], []
        self._launchers.clear()
        self._in_off, in_bytes = self._regions(self._in_isz, need)
        self._out_off, out_bytes = self._regions(self._out_isz, need)
        for _ in range(self.depth):
            self._in_blocks.append(self._device_alloc(in_bytes))
            self._out_blocks.append(self._device_alloc(out_bytes))
        self._cap = need

    # ---- kernels ----------------------------------------------------------------------------------
    def _launcher(self, slot: int, m: int, call: _Call, area: int):
        """The slot's launcher for m elements, its argument buffer packed for this slot, the call's
        pattern of arrays and single values and constant area; only n changes per chunk."""
        from tickgpu.runtime.launch import Launcher

        ctx = self.ctx
        # Slots are 256-byte aligned and constant slots 16-byte aligned: n decides alignment.
        kernel = ctx.bundle.select(self.fam.name, self.code, m, m % 16 == 0, ctx.sm_count)
        ctx.bundle.ensure_scratch(kernel, -(-self._cap // kernel.spec.elements_per_block))
        entry = self._launchers.get((slot, kernel.variant))
        if entry is None:
            entry = self._launchers[(slot, kernel.variant)] = [Launcher(self.driver, kernel), None]
        lau = entry[0]
        key = (call.pattern, area, ctx.bundle.scratch_epoch)
        if entry[1] != key:
            ptrs, strides = [], []
            const = self._const_dev + area * _CONST_AREA
            for i in range(self._k):
                if (call.pattern >> i) & 1:
                    ptrs.append(self._in_blocks[slot] + self._in_off[i])
                    strides.append(1)
                else:
                    ptrs.append(const + i * _CONST_SLOT)
                    strides.append(0)
            outs = [self._out_blocks[slot] + o for o in self._out_off]
            lau.args.pack(*self.fam.contract((), ptrs, strides, outs, m, None))
            entry[1] = key
        lau.args.set(lau.kernel.spec.n_contract - 1, m)   # n is the contract's last parameter
        return lau

    def _write_constants(self, call: _Call, area: int, stream: int) -> None:
        """The call's single values into constant `area` (pinned), and one copy to the device."""
        base = area * _CONST_AREA
        for i, v in enumerate(call.values):
            if not (call.pattern >> i) & 1:
                dt = np.uint8 if self.fam.inputs[i] == self.fam.flag else self.dtype
                b = np.array([v], dtype=dt).view(np.uint8)
                self._const_view[base + i * _CONST_SLOT: base + i * _CONST_SLOT + b.size] = b
        self.driver.memcpy_htod_async(self._const_dev + base, self._const_host + base, _CONST_AREA, stream)

    # ---- the three stages ---------------------------------------------------------------------------
    def _fetch(self, call, start, m, slot, reuse, stream):
        d = self.driver
        if reuse:   # the input slot is free once chunk k - depth's kernel has read it
            self._wait(stream, self._computed[slot])
        base = self._in_blocks[slot]
        for i, v in enumerate(call.values):
            if (call.pattern >> i) & 1:
                s = self._in_isz[i]
                d.memcpy_htod_async(base + self._in_off[i], _addr(v) + start * s, m * s, stream)

    def _compute(self, call, m, slot, area, stream):
        self._launcher(slot, m, call, area).launch(m, stream)

    def _write_out(self, call, start, m, slot, stream):
        d = self.driver
        base = self._out_blocks[slot]
        for (name, _), off, s in zip(call.out_specs, self._out_off, self._out_isz):
            d.memcpy_dtoh_async(_addr(call.outputs[name]) + start * s, base + off, m * s, stream)

    def _queue(self, call: _Call, area: int, seq: int, first_event: bool) -> int:
        """Queue every chunk of `call` on the three streams; returns the next chunk sequence number.

        `seq` numbers chunks across calls of one `stream()` so slots and their waits follow on.
        Writes are queued `depth - 1` chunks behind: a copy into pageable memory returns only once
        done, so this way the next chunks' fetch and compute are queued before the host blocks.
        That lag is the most the events allow: compute k waits on write k - depth, which must be
        queued (recorded) before that wait is, else the wait would see an older record.
        """
        d, depth = self.driver, self.depth
        fs, cs, ws = self.fetch_stream, self.compute_stream, self.write_stream
        n, c = call.n, self.chunk
        chunks = -(-n // c)
        lag = depth - 1
        for k in range(chunks + lag):
            if k < chunks:
                g, start = seq + k, k * c
                m, slot = min(c, n - start), (seq + k) % depth
                self._fetch(call, start, m, slot, g >= depth, fs)
                d.event_record(self._fetched[slot], fs)
                self._wait(cs, self._fetched[slot])
                if g >= depth:   # the output slot is free once chunk k - depth was copied out
                    self._wait(cs, self._written[slot])
                self._compute(call, m, slot, area, cs)
                d.event_record(self._computed[slot], cs)
            j = k - lag
            if 0 <= j < chunks:
                slot, start = (seq + j) % depth, j * c
                self._wait(ws, self._computed[slot])
                self._write_out(call, start, min(c, n - start), slot, ws)
                d.event_record(self._written[slot], ws)
                if j == 0 and first_event:
                    d.event_record(self._t_first, ws)
        return seq + chunks

    def _queue_serial(self, call: _Call, stream: int) -> None:
        """Every chunk on one stream: copy in, kernel, copy out, one after another (slot 0)."""
        n, c = call.n, self.chunk
        for k in range(-(-n // c)):
            start = k * c
            m = min(c, n - start)
            self._fetch(call, start, m, 0, False, stream)
            self._compute(call, m, 0, 0, stream)
            self._write_out(call, start, m, 0, stream)
            if k == 0:
                self.driver.event_record(self._t_first, stream)

    def _sync_all(self) -> None:
        for s in (self.fetch_stream, self.compute_stream, self.write_stream):
            self.driver.stream_synchronize(s)

    def _drain(self) -> None:
        """After an error: wait for all three streams, so no copy stays in flight into the caller's
        arrays (the error being raised is the one to report, so later ones are dropped)."""
        for s in (self.fetch_stream, self.compute_stream, self.write_stream):
            try:
                self.driver.stream_synchronize(s)
            except Exception:
                pass

    # ---- calls ------------------------------------------------------------------------------------
    def run(self, *, out: dict | None = None, h2d_bw: float | None = None, d2h_bw: float | None = None,
            **inputs) -> dict:
        """Compute over host arrays as an overlapped fetch / compute / write pipeline.

        Parameters
        ----------
        **inputs
            The op's inputs by name (spot, strike, t, rate, vol, div, call for greeks; price,
            spot, strike, t, rate, div, call for implied_vol; div defaults to 0 and call to True).
            Each a number (broadcast) or a 1-D array; arrays share one length n >= 1. Arrays of
            another dtype are converted first (a host copy: pass the Pipeline's dtype, ideally in
            pinned memory, to avoid it); a call array may be bool, uint8 or any number (nonzero = call).
        out : dict of numpy.ndarray, optional
            Arrays to write outputs into (e.g. pinned ones), by output name; shape (n,), the output's
            dtype, C-contiguous. Outputs not given are allocated.
        h2d_bw, d2h_bw : float, optional
            Measured pinned copy bandwidths in bytes/s; with both, ``last.pcie_bound_s`` is set.

        Returns
        -------
        dict of numpy.ndarray
            greeks: price, delta, ... charm (units of `tickgpu.greeks`); implied_vol: vol and
            status (int8, `tickgpu.IVStatus` values). Invalid elements give NaN as those functions do.

        Raises
        ------
        TypeError
            An unknown or missing input name.
        ValueError
            An input that is not a number or 1-D numeric array, lengths that differ, a bad ``out``
            array; the message names the argument.
        CudaError
            A driver call failed (its error name in the message); all three streams were
            synchronized first, so no copy is still writing into the outputs.
        """
        return self._call(inputs, out, h2d_bw, d2h_bw, serial=False)

    def serial(self, *, out: dict | None = None, h2d_bw: float | None = None, d2h_bw: float | None = None,
               **inputs) -> dict:
        """`run`'s work on one stream, a chunk at a time with nothing overlapped (the baseline).

        Same parameters, results and errors as `run`.
        """
        return self._call(inputs, out, h2d_bw, d2h_bw, serial=True)

    def _call(self, inputs, out, h2d_bw, d2h_bw, serial: bool) -> dict:
        t0 = time.perf_counter()
        self._check_free()
        call = _Call(self.fam, self.dtype, inputs, out)
        mode = "serial" if serial else "pipeline"
        if call.n == 0:   # nothing to move: no driver call at all
            self.last = self._stats(mode, 0, 0, 0.0, time.perf_counter() - t0, 0, 0, h2d_bw, d2h_bw)
            return call.outputs
        d, ctx = self.driver, self.ctx
        first = 0.0
        with ctx.lock:
            ctx.enter()
            self._busy = True
            try:
                self._reserve(call.n)
                stream = self.fetch_stream
                self._write_constants(call, 0, stream)
                d.event_record(self._t_start, stream)
                t_queued = time.perf_counter()
                if serial:
                    self._queue_serial(call, stream)
                else:
                    self._queue(call, 0, 0, first_event=True)
                self._sync_all()
                first = (t_queued - t0) + d.event_elapsed_ms(self._t_start, self._t_first) / 1e3
            except BaseException:
                self._drain()
                raise
            finally:
                self._busy = False
        total = time.perf_counter() - t0
        self.last = self._stats(mode, call.n, -(-call.n // self.chunk), first, total, call.bytes_in,
                                call.bytes_out, h2d_bw, d2h_bw)
        return call.outputs

    def stream(self, batches, *, h2d_bw: float | None = None, d2h_bw: float | None = None):
        """Outputs of each batch of an iterable, in order, as soon as its copies out completed.

        Parameters
        ----------
        batches : iterable of dict
            Each the inputs of one `run` call (numbers and 1-D arrays by name; batches may differ
            in length). Up to `depth` batches are in flight: batch b + depth is queued before
            batch b is handed out, so the GPU keeps working while the caller handles results.
        h2d_bw, d2h_bw : float, optional
            As in `run`, for ``last.pcie_bound_s`` over all batches.

        Yields
        ------
        dict of numpy.ndarray
            Each batch's outputs, as `run` returns them (freshly allocated per batch).

        Raises
        ------
        TypeError, ValueError, CudaError
            As `run`; on any error (or when the generator is closed early) all three streams are
            synchronized before it ends.

        Notes
        -----
        The context's lock is held while queueing and waiting, not while the caller handles a
        yielded batch, so other calls may run between batches.
        """
        self._check_free()
        self._busy = True
        t0 = time.perf_counter()
        pending: collections.deque = collections.deque()
        seq, b, first, n_total, chunks, b_in, b_out = 0, 0, None, 0, 0, 0, 0
        finished = False
        ctx = self.ctx
        try:
            for batch in batches:
                call = _Call(self.fam, self.dtype, dict(batch), None)
                area = None
                if call.n:
                    area = b % self._areas   # its last user, batch b - areas, was handed out already
                    with ctx.lock:
                        ctx.enter()
                        self._reserve(call.n)
                        self._write_constants(call, area, self.fetch_stream)
                        seq = self._queue(call, area, seq, first_event=False)
                        self.driver.event_record(self._done[area], self.write_stream)
                pending.append((call, area))
                n_total, chunks, b_in, b_out = (n_total + call.n, chunks + -(-call.n // self.chunk),
                                                b_in + call.bytes_in, b_out + call.bytes_out)
                b += 1
                # Hand out what is done already, and block only to keep at most depth in flight.
                # (While the iterable itself blocks for its next batch nothing can be handed out:
                # a generator yields only between pulls.)
                while pending and (len(pending) > self.depth or self._is_done(pending[0])):
                    res = self._finish(pending.popleft())
                    first = time.perf_counter() - t0 if first is None else first
                    yield res
            while pending:
                res = self._finish(pending.popleft())
                first = time.perf_counter() - t0 if first is None else first
                yield res
            finished = True
        finally:
            if not finished:   # an error, or the caller stopped early: leave nothing in flight
                with ctx.lock:
                    ctx.enter()
                    self._drain()
            self._busy = False
        total = time.perf_counter() - t0
        self.last = self._stats("stream", n_total, chunks, first or 0.0, total, b_in, b_out, h2d_bw, d2h_bw)

    def _is_done(self, item) -> bool:
        area = item[1]
        if area is None:
            return True
        with self.ctx.lock:
            self.ctx.enter()
            return self.driver.event_query(self._done[area])

    def _finish(self, item) -> dict:
        call, area = item
        if area is None:
            return call.outputs
        with self.ctx.lock:
            self.ctx.enter()
            self.driver.event_synchronize(self._done[area])
        return call.outputs

    def _check_free(self) -> None:
        if self._closed:
            raise RuntimeError("Pipeline: used after close()")
        if self._busy:
            raise RuntimeError("Pipeline: a call or stream() of this Pipeline is still running; "
                               "make one Pipeline per concurrent user")

    @staticmethod
    def _stats(mode, n, chunks, first, total, b_in, b_out, h2d_bw, d2h_bw) -> PipelineStats:
        bound = None
        if h2d_bw and d2h_bw:
            bound = max(b_in / h2d_bw, b_out / d2h_bw)
        return PipelineStats(mode, n, chunks, first, total, b_in, b_out, n / total if total > 0 else math.inf, bound)

    # ---- lifetime -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for the streams and return device buffers, pinned constants, events and streams.

        Raises
        ------
        RuntimeError
            While a `stream` generator of this Pipeline is still open (its batches use the
            buffers): finish it or ``close()`` it first.
        """
        if self._closed:
            return
        if self._busy:
            raise RuntimeError("Pipeline.close: a stream() of this Pipeline is still open; exhaust it or "
                               "call its close() first")
        d = self.driver
        with self.ctx.lock:
            self.ctx.enter()
            self._sync_all()
            for p in self._in_blocks + self._out_blocks + [self._const_dev]:
                self._device_free(p)
            d.mem_free_host(self._const_host)
            for e in (*self._fetched, *self._computed, *self._written, *self._done, self._t_start, self._t_first):
                if hasattr(d, "event_destroy"):
                    d.event_destroy(e)
            for s in (self.fetch_stream, self.compute_stream, self.write_stream):
                d.stream_destroy(s)
        self._in_blocks, self._out_blocks, self._launchers = [], [], {}
        self._closed = True

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        # Dropped without close(): return its device buffers, streams and events all the same.
        try:
            if not getattr(self, "_closed", True) and not self._busy:
                self.close()
        except Exception:   # the context (or the interpreter) is gone first
            pass
