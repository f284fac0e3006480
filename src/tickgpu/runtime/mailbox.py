"""Resident kernels: a persistent greeks kernel per dtype, answering through a mapped mailbox.

The fastest hot path (DESIGN.md, "The hot path", 1): the kernel is already running when a call
comes. A call writes its inputs into mapped pinned host memory, bumps a sequence number and spins
(in C, GIL released) until the kernel has written the ten greeks back into the same memory: no
launch, no copy engine, no driver call. The layout and the rules of the mailbox are in
csrc/hot/mailbox_protocol.h, the host side in csrc/hot/mailbox.c, the kernel in
csrc/cuda/mailbox.cu (the same greeks source as the CPU backend).

Measured (H200, benchmarks/results/h200-2026-11-30-g/resident-*.json), the native round trip
(`tg_mailbox_call`: inputs in, kernel, outputs out) against the floor's mailbox round trip
(5.3 us, 4 KB each way and no host copies): float32 6.3 us for 1 option, 5.7 us for 64, 15.3 us
for 1,024 (28 KB in, 40 KB out); float64 8.0 / 8.1 / 22.2 us. Each PCIe round trip the kernel
waits on costs ~1 us, so a request costs the poll, one read of the inputs, one fence and `done`
(mailbox_protocol.h); before that protocol (n and the mask read after the poll, `served` read
back, three fences, 256 threads for 1,024 options) the same trips took 11.0 / 10.9 / 22.1 us.
The Python call around it (checks, staging pointers, ten output rows) is most of what remains; a
`bind_greeks` binding, whose request is made once, goes through an open kernel too: 8.5 us for one
float32 option from Python against `tickgpu.greeks`'s 16.3 us (benchmarks/results/h200-2026-11-30-m/).
Opt-in, and measured by `tickgpu bench --suite gpu` (section "resident") beside the graph path,
so that choosing it stays a measured choice.

Opt-in, because a resident kernel holds an SM and polls the PCIe link while it waits::

    with tickgpu.runtime.mailbox.resident("greeks", dtype=np.float64, capacity=4096):
        g = tickgpu.greeks(spot, strikes, t, r, vol, backend="gpu")   # no launch

While one is open for (op, dtype), `tickgpu.greeks` with NumPy inputs of at most `capacity`
options on the GPU backend goes through it (tickgpu.runtime.ops); anything else (GPU arrays, more
options) takes the usual paths.

NOTE: a resident kernel never finishes by itself while it is in use, so a plain wait for the whole
context (``cuCtxSynchronize``) would wait until the kernel returns on idle (``idle_timeout``, 2 s
by default). The runtime's own context-wide waits (`RuntimeContext.synchronize`: warm-up, the
constant ring wrapping, grid and scratch blocks replaced) park open resident kernels first
(`ResidentGreeks.park`: asked to return, relaunched by the next call); code of one's own that
waits for the whole context should do the same, or wait for its own streams or events. Open
resident kernels after `tickgpu.warmup()`: the first launch of any kernel loads its code (the
driver's lazy loading), and that waits for work in flight, a running resident kernel included
(measured on an H200: a warm-up begun with one open waited out its idle timeout).

The kernel returns by itself after `idle_timeout` seconds without a request (so a forgotten
mailbox never holds SMs for ever); the next call relaunches it, transparently (a launch, ~10 us,
paid once). A call that gets no answer within `timeout` seconds raises `ResidentTimeout` and
closes the mailbox: the kernel is hung or was preempted, and the caller is never left spinning.
"""
from __future__ import annotations

import atexit
import threading
import time
import weakref

import numpy as np

from tickgpu._native import ffi, lib
from tickgpu.errors import TickGpuError
from tickgpu.finance._checks import host_shape as _host_shape
from tickgpu.runtime import ops
from tickgpu.runtime.staged import host_inputs

__all__ = ["ResidentGreeks", "ResidentError", "ResidentTimeout", "resident", "open_residents",
           "DEFAULT_CAPACITY", "DEFAULT_IDLE_TIMEOUT_S", "DEFAULT_TIMEOUT_S"]

DEFAULT_CAPACITY = 4096
#: The kernel returns by itself after this long without a request.
DEFAULT_IDLE_TIMEOUT_S = 2.0
#: A call raises after this long without an answer (an answer takes microseconds).
DEFAULT_TIMEOUT_S = 1.0
#: After an answer the kernel polls flat out this long, then backs off with sleeps of up to
#: DEFAULT_SLEEP_MAX_S (the extra latency of the first call after a quiet spell).
DEFAULT_SPIN_S = 0.01
DEFAULT_SLEEP_MAX_S = 2e-6
#: Threads per block of the resident kernel (the manifest's block; csrc/cuda/mailbox.cu).
BLOCK = 1024
MAX_BLOCKS = 64
#: How long close() waits for the kernel to return after asking it to quit.
QUIT_WAIT_S = 1.0

_DTYPES = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
_U8, _BOOL = np.dtype(np.uint8), np.dtype(np.bool_)
_INPUTS = ("spot", "strike", "t", "rate", "vol", "div", "call")
_OUTPUTS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
_HOST_TYPES = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.bool_, np.uint8, np.int64})
_from_buffer = ffi.from_buffer
_call_block = lib.tg_mailbox_call_block
_empty = np.empty
_ndarray = np.ndarray


class ResidentError(TickGpuError):
    """A resident kernel refused a request, or could not be (re)started."""


class ResidentTimeout(ResidentError):
    """A resident kernel gave no answer in time: it is hung or was preempted; its mailbox is closed."""


# Blocks the resident kernel runs by default. Measured on an H200 (1,024 float32 options from
# NumPy, p50 of `tickgpu.greeks`, blocks of 256 threads then): 1 block 50.5 us, 2 blocks 53.8, 4
# blocks 61.2, 8 blocks 92.3 -- every extra block polls the link and checks in over system-scope
# fences, which costs more than its share of the work saves. With blocks of 1,024 threads, 2
# blocks still cost 1-3 us more than 1 in the native round trip (resident-*.json).
DEFAULT_BLOCKS = 1


class ResidentGreeks:
    """A persistent greeks kernel of one dtype and the mailbox it answers through.

    Parameters
    ----------
    context : tickgpu.runtime.device.Context
        The runtime context (`tickgpu.runtime.context()`); its bundle must hold the
        ``resident_greeks`` kernels (``tickgpu build-kernels``).
    dtype : numpy.float64 or numpy.float32
        Precision of inputs, computation and results.
    capacity : int
        Most options per call (1 to 2**24); the mailbox holds 6 * capacity values and capacity
        call flags in, 10 * capacity values out, in mapped pinned memory.
    blocks : int, optional
        Blocks of `BLOCK` threads the kernel runs (1 to 64; default `DEFAULT_BLOCKS`).
    idle_timeout : float
        Seconds without a request after which the kernel returns (0: never); the next call
        relaunches it.
    timeout : float
        Seconds a call waits for its answer before raising `ResidentTimeout`.
    spin, sleep_max : float
        Seconds the kernel polls flat out after an answer, and its longest sleep between polls
        after that.

    Raises
    ------
    ValueError, TypeError
        A bad capacity, blocks, timing or dtype.
    tickgpu.runtime.bundle.BundleError
        The bundle has no resident greeks kernel for this dtype.
    ResidentError
        The kernel did not answer its first (warm-up) request.
    """

    def __init__(self, context, dtype=np.float64, capacity: int = DEFAULT_CAPACITY, blocks: int | None = None, *,
                 idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S, timeout: float = DEFAULT_TIMEOUT_S,
                 spin: float = DEFAULT_SPIN_S, sleep_max: float = DEFAULT_SLEEP_MAX_S):
        dt = np.dtype(dtype)
        if dt not in _DTYPES:
            raise TypeError(f"resident greeks: dtype must be float64 or float32, got {dt}")
        capacity, blocks = int(capacity), DEFAULT_BLOCKS if blocks is None else int(blocks)
        if not 1 <= capacity <= 1 << 24:
            raise ValueError(f"resident greeks: capacity must be 1 to 2**24 options, got {capacity}")
        if not 1 <= blocks <= MAX_BLOCKS:
            raise ValueError(f"resident greeks: blocks must be 1 to {MAX_BLOCKS}, got {blocks}")
        # The C side takes nanoseconds as int64 (sleep_max as int32): refuse what does not fit
        # (inf, NaN, centuries) here, with the argument's name, not as an OverflowError later.
        for name, v, most in (("idle_timeout", idle_timeout, 9e9), ("spin", spin, 9e9), ("sleep_max", sleep_max, 2.0),
                              ("timeout", timeout, 9e9)):
            if not 0 <= v <= most:
                raise ValueError(f"resident greeks: {name} must be 0 to {most:g} seconds, got {v}")
        if not timeout > 0:
            raise ValueError(f"resident greeks: timeout must be > 0 seconds, got {timeout}")
        self.op, self.dtype, self.capacity, self.blocks = "greeks", dt, capacity, blocks
        self.timeout, self.idle_timeout = float(timeout), float(idle_timeout)
        self.launches = 0      # kernel launches: 1 + relaunches after idle exits
        self._parked = False   # asked to return by park(): the next call relaunches
        self.calls = 0
        self.closed = False
        self._ctx = context
        self._lock = threading.Lock()
        self._timeout_ns = int(self.timeout * 1e9)
        self._what = f"resident greeks ({dt.name})"

        from tickgpu.runtime.bundle import BundleError
        from tickgpu.runtime.launch import Launcher

        code = _DTYPES[dt]
        kernels = [k for k in context.bundle.kernels.values()
                   if k.spec.family == "resident_greeks" and k.spec.dtype == code]
        if not kernels:
            raise BundleError(f"{self._what}: the kernel bundle at {context.manifest.root} has no resident_greeks "
                              f"kernel for {code} on {context.bundle.arch}: run `tickgpu build-kernels`")
        if kernels[0].spec.block != (BLOCK, 1, 1):
            raise BundleError(f"{self._what}: kernel {kernels[0].variant} has block {kernels[0].spec.block}, "
                              f"expected ({BLOCK}, 1, 1)")
        self._launcher = Launcher(context.driver, kernels[0])
        self.nbytes = int(lib.tg_mailbox_bytes(capacity, dt.itemsize))
        d = context.driver
        self._host = self._dev = self._arrive = self._stream = self._event = 0
        with context.lock:
            context.enter()
            try:
                # Mapped pinned memory (PORTABLE | DEVICEMAP, the driver's default here): the kernel
                # reads and writes it over PCIe; page-aligned, so 128-byte aligned.
                self._host = d.mem_host_alloc(self.nbytes)
                self._dev = d.host_device_pointer(self._host)
                self._arrive = d.mem_alloc(256)
                self._stream = d.stream_create()
                self._event = d.event_create()
            except Exception:
                self._free()
                raise
        self._box = ffi.cast("void *", self._host)
        self._zeros = np.zeros(4, dtype=np.uint32)   # what arrive[] is reset to before a launch
        st = lib.tg_mailbox_init(self._box, self.nbytes, dt.itemsize, capacity, int(self.idle_timeout * 1e9),
                                 int(spin * 1e9), int(sleep_max * 1e9))
        if st != lib.TG_OK:
            self._free()
            raise ResidentError(f"{self._what}: mailbox setup refused ({ffi.string(lib.tg_status_name(st)).decode()})")
        # Per-call state made once: the C argument struct and the scalar slots. The struct is
        # written through flat views (tg_bsm_inputs is 7 x {pointer, int64 stride}): indexed
        # stores cost less than field access.
        self._in = ffi.new("tg_bsm_inputs *")
        self._in_ptr = ffi.cast("void **", self._in)
        self._in_stride = ffi.cast("int64_t *", self._in)
        self._pattern = -1     # which inputs the struct holds as arrays (strides written only on change)
        self._status = ffi.new("uint32_t *")
        self._scalars = np.zeros(6, dtype=dt)
        self._flag = np.zeros(1, dtype=np.uint8)
        base = _from_buffer(self._scalars)
        self._scalar_ptr = [ffi.cast("void *", ffi.cast("char *", base) + k * dt.itemsize) for k in range(6)]
        self._scalar_ptr.append(ffi.cast("void *", _from_buffer(self._flag)))
        self._keep = (base,)
        self._pool_hold = _hold_context_waits(context, True)
        try:
            self._launch()
            # The first request pays for loading the module and starting the blocks; pay it now.
            self._call((100.0, 100.0, 1.0, 0.01, 0.2, 0.0, True), (1,), 1)
        except BaseException:
            self.close()
            raise
        _OPEN.add(self)

    # ---- kernel lifetime ---------------------------------------------------------------------
    def _launch(self) -> None:
        """(Re)start the kernel: mailbox rearmed, arrive[] zeroed on its stream, launch."""
        # Everything here is the mailbox's own (stream, launcher, event), guarded by its lock; the
        # context's lock is not taken, so that `park` may run under it (RuntimeContext.synchronize).
        ctx, d = self._ctx, self._ctx.driver
        ctx.enter()
        lib.tg_mailbox_rearm(self._box)
        # Stream order puts this after any earlier kernel on the stream (one returning on idle
        # may still be finishing), so the new kernel's blocks start from zero.
        d.memcpy_htod_async(self._arrive, self._zeros.ctypes.data, self._zeros.nbytes, self._stream)
        self._launcher.args.pack(self._dev, self._arrive)
        self._launcher.launch_grid((self.blocks, 1, 1), self._stream)
        d.event_record(self._event, self._stream)
        self._parked = False
        self.launches += 1

    def state(self) -> dict:
        """The mailbox's control words: {"seq", "done", "exited", "served"} (tests, diagnostics)."""
        if self.closed:
            raise ResidentError(f"{self._what}: closed")
        seq, done, served = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("uint64_t *")
        exited = ffi.new("uint32_t *")
        lib.tg_mailbox_state(self._box, seq, done, exited, served)
        return {"seq": int(seq[0]), "done": int(done[0]), "exited": int(exited[0]), "served": int(served[0])}

    def close(self, wait: float = QUIT_WAIT_S) -> bool:
        """Ask the kernel to return, wait for it (at most `wait` seconds), free the mailbox.

        Returns True when the kernel returned and everything was freed; False when it did not
        return in time: its mailbox memory is then left allocated (freeing memory a running
        kernel still writes into would be worse than the leak). Idempotent.
        """
        with self._lock:
            if self.closed:
                return True
            self.closed = True
        _unregister(self)
        _OPEN.discard(self)
        if getattr(self, "_pool_hold", None) is not None:
            _hold_context_waits(self._ctx, False)
            self._pool_hold = None
        if not self._host:
            return True
        lib.tg_mailbox_quit(self._box)
        ctx, d = self._ctx, self._ctx.driver
        returned = True
        if self.launches:
            deadline = time.monotonic() + wait
            with ctx.lock:
                ctx.enter()
                while not d.event_query(self._event):
                    if time.monotonic() > deadline:
                        returned = False
                        break
                    time.sleep(1e-4)
        if returned:
            with ctx.lock:
                ctx.enter()
                self._free()
        return returned

    def park(self, wait: float = QUIT_WAIT_S) -> bool:
        """Ask the running kernel to return, and wait for it (at most `wait` seconds); the mailbox
        stays open and the next call relaunches the kernel (as after an idle exit).

        What a wait for the whole context needs first (`RuntimeContext.synchronize`): a resident
        kernel in use never finishes by itself. Takes neither this mailbox's lock nor the context's
        Takes this mailbox's lock (a call in flight finishes first) and never the context's, which
        the caller may hold: a call through the mailbox never waits for the context's lock.
        Returns True when the kernel is not running (returned, or never launched).
        """
        with self._lock:   # no call in flight; a call never waits for the context's lock
            if self.closed or not self.launches or not self._host or self._parked:
                return True
            lib.tg_mailbox_quit(self._box)
            d = self._ctx.driver
            deadline = time.monotonic() + wait
            while not d.event_query(self._event):
                if time.monotonic() > deadline:
                    return False
                time.sleep(1e-5)
            self._parked = True   # a quit is not an idle exit: the next call relaunches first
        return True

    def _free(self) -> None:
        d = self._ctx.driver
        for attr, free in (("_event", d.event_destroy), ("_stream", d.stream_destroy), ("_arrive", d.mem_free),
                           ("_host", d.mem_free_host)):
            h = getattr(self, attr)
            if h:
                setattr(self, attr, 0)
                free(h)

    def __enter__(self) -> "ResidentGreeks":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.calls} calls, {self.launches} launches"
        return f"<ResidentGreeks {self.dtype.name} capacity={self.capacity} blocks={self.blocks}: {state}>"

    # ---- calls -------------------------------------------------------------------------------
    def __call__(self, spot, strike, t, rate, vol, div=0.0, call=True) -> dict:
        """The greeks of up to `capacity` options: dict of the ten NumPy arrays (as `tickgpu.greeks`).

        Inputs broadcast like `tickgpu.greeks`'s (a single value is sent once, not n times).

        Raises
        ------
        ValueError
            More than `capacity` options, or shapes that do not broadcast.
        ResidentTimeout
            No answer within `timeout` (the mailbox is closed).
        ResidentError
            The mailbox is closed, or the kernel refused the request.
        """
        values = (spot, strike, t, rate, vol, div, call)
        shape = _host_shape(values)   # NumPy arrays of one shape and scalars: no broadcasting to work out
        if shape is None:
            shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        n = 1
        for d in shape:
            n *= d
        if n > self.capacity:
            raise ValueError(f"{self._what}: {n} options exceed the mailbox capacity of {self.capacity}")
        if n == 0:
            return {k: np.empty(shape, self.dtype) for k in _OUTPUTS}
        return dict(zip(_OUTPUTS, self._call(values, shape, n)))

    def host_call(self, inputs: tuple, shape: tuple) -> list | None:
        """The ten outputs for checked host `inputs` of `shape` (tickgpu.runtime.ops's hook); None
        when this call is not for a resident kernel (GPU arrays, empty, more than `capacity`)."""
        n = 1
        for d in shape:
            n *= d
        if n == 0 or n > self.capacity or self.closed:
            return None
        for x in inputs:
            if type(x) not in _HOST_TYPES:
                from tickgpu.runtime.arrays import is_device_array

                if is_device_array(x):
                    return None
        return self._call(inputs, shape, n)

    def _call(self, inputs, shape, n: int) -> list:
        dt = self.dtype
        vals, pattern = host_inputs(ops.GREEKS, dt, shape, n, inputs)
        block = _empty((10, n), dt)
        with self._lock:
            if self.closed:
                raise ResidentError(f"{self._what}: the mailbox is closed")
            if self._parked:
                self._launch()
            ptrs = self._in_ptr
            if pattern != self._pattern:
                strides = self._in_stride
                for k in range(7):
                    strides[2 * k + 1] = (pattern >> k) & 1
                    if not (pattern >> k) & 1:
                        ptrs[2 * k] = self._scalar_ptr[k]   # one value: sent once, from its own slot
                self._pattern = pattern
            for k, v in enumerate(vals):
                if (pattern >> k) & 1:
                    ptrs[2 * k] = _from_buffer(v)
                elif k == 6:
                    self._flag[0] = v
                else:
                    self._scalars[k] = v
            st = self._request(self._in, n, block)
        del vals
        if st != lib.TG_OK:
            self._fail(st, n)
        outs = list(block)
        if len(shape) == 1:
            return outs
        return [o.reshape(shape) for o in outs]

    def call_bound(self, inputs, n: int):
        """One request for a binding's fixed arrays (`tickgpu.runtime.bind_greeks`): `inputs` a
        ``tg_bsm_inputs`` the binding made once (seven arrays of n, stride 1). Returns the answer
        as a (10, n) block, or None where this mailbox cannot take it (closed, or more than
        `capacity` options): the binding then takes its graph."""
        if n > self.capacity or self.closed:
            return None
        block = _empty((10, n), self.dtype)
        with self._lock:
            if self.closed:
                return None
            if self._parked:
                self._launch()
            st = self._request(inputs, n, block)
        if st != lib.TG_OK:
            self._fail(st, n)
        return block

    def _request(self, inputs, n: int, block) -> int:
        """Post one request and wait for its answer, which lands in `block` as one (10, n) copy;
        the native status. Under the mailbox's lock, the kernel running."""
        out = _from_buffer(block)
        st = _call_block(self._box, n, inputs, out, self._timeout_ns, self._status)
        if st == lib.TG_MB_EXITED:
            # The kernel returned on idle (nothing is pending): start it again and retry once.
            self._launch()
            st = _call_block(self._box, n, inputs, out, self._timeout_ns, self._status)
        self.calls += 1
        return st

    def _fail(self, st: int, n: int):
        if st == lib.TG_MB_TIMEOUT:
            returned = self.close()
            raise ResidentTimeout(
                f"{self._what}: no answer within {self.timeout:g} s for {n} options: the resident kernel is hung "
                f"or was preempted; its mailbox is closed"
                + ("" if returned else " (the kernel did not return when asked; its memory is left allocated)"))
        if st == lib.TG_MB_EXITED:
            raise ResidentError(f"{self._what}: the kernel returned right after being relaunched "
                                f"(state {self.state()})")
        if st == lib.TG_MB_REFUSED:
            why = {1: "bad request", 2: "the mailbox's configuration is not this kernel's"}.get(int(self._status[0]),
                                                                                                "unknown")
            raise ResidentError(f"{self._what}: the kernel refused the request ({why}, status {int(self._status[0])})")
        if st == lib.TG_ERANGE:
            raise ValueError(f"{self._what}: {n} options exceed the mailbox capacity of {self.capacity}")
        raise ResidentError(f"{self._what}: call refused ({ffi.string(lib.tg_status_name(st)).decode()})")


# ---- registry: what tickgpu.runtime.ops routes through ------------------------------------------
_OPEN: "weakref.WeakSet[ResidentGreeks]" = weakref.WeakSet()
_OPS = {"greeks": ResidentGreeks}


def resident(op: str = "greeks", dtype=np.float64, capacity: int = DEFAULT_CAPACITY, **options) -> ResidentGreeks:
    """Open a resident kernel for `op` and route that op's small host calls through it.

    Parameters
    ----------
    op : {"greeks"}
        The operation.
    dtype : numpy.float64 or numpy.float32
    capacity : int
        Most options per call; larger calls take the usual GPU paths.
    **options
        `blocks`, `idle_timeout`, `timeout`, `spin`, `sleep_max` of `ResidentGreeks`.

    Returns
    -------
    ResidentGreeks
        Also a context manager; `close()` (or leaving the ``with``) stops the routing. While it is
        open, ``tickgpu.greeks(..., dtype=dtype)`` with NumPy inputs of at most `capacity` options
        that go to the GPU backend (``backend="gpu"``, or "auto" choosing it) are answered by it.
        Opening another for the same (op, dtype) replaces it in the routing.

    Raises
    ------
    ValueError
        An unknown `op`.
    tickgpu.errors.BackendUnavailable
        No usable GPU (the message says why).
    """
    from tickgpu.errors import BackendUnavailable
    from tickgpu.runtime import available, context, unavailable_reason

    cls = _OPS.get(op)
    if cls is None:
        raise ValueError(f"resident: no resident kernel for {op!r}; available: {sorted(_OPS)}")
    if not available():
        raise BackendUnavailable(f"resident: no usable GPU ({unavailable_reason()})")
    r = cls(context(), dtype, capacity, **options)
    _register(r)
    return r


def _hold_context_waits(ctx, hold: bool):
    """Add or drop a hold on the context's device pool's context-wide waits (a flush with a resident
    kernel running must not wait for the whole context); returns the pool, or None without one."""
    memory = getattr(ctx, "memory", None)
    try:
        pool = memory.device_pool if memory is not None else None   # made now if not yet
        if pool is None:
            return None
        pool.hold_context_waits(hold)
    except Exception:   # noqa: BLE001 - a closed pool has nothing to flush
        return None
    return pool


def open_residents() -> list[ResidentGreeks]:
    """The resident kernels not yet closed."""
    return [r for r in list(_OPEN) if not r.closed]


def _register(r: ResidentGreeks) -> None:
    ops.RESIDENT[(r.op, r.dtype)] = r


def _unregister(r: ResidentGreeks) -> None:
    key = (r.op, r.dtype)
    if ops.RESIDENT.get(key) is r:
        del ops.RESIDENT[key]


@atexit.register
def _close_all() -> None:
    # A kernel left polling would keep the process's context busy at exit; ask each to return.
    for r in list(_OPEN):
        try:
            r.close(wait=0.2)
        except Exception:   # noqa: BLE001 - the interpreter is going away; nothing to report to
            pass
