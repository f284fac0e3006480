"""Greeks and implied vols bound to fixed GPU arrays: checked once, then one kernel launch a call.

The device twin of `tickgpu.runtime.bound`. A GPU-resident tick loop (quotes kept in CuPy or
PyTorch arrays, updated in place on the GPU) pays, on every `tickgpu.greeks` call, for reading
each argument's interface, checking it, allocating ten outputs through its library and choosing
and packing a kernel: on an H200 host about 100 us of Python around a launch of a few. A binding
does all of that once; each call is then one launch from a descriptor built at binding, on the
arrays' stream, with no host wait::

    spot = cupy.asarray(spots, dtype=cupy.float32); ...   # the loop's own GPU arrays
    tick = tickgpu.runtime.bind_greeks(spot, strike, t, rate, vol, div, call, dtype=np.float32)
    g = tick.outputs                # the binding's Greeks: GPU arrays, rewritten by every call
    while True:
        spot[...] = latest_spots()  # in place, on the binding's stream
        tick()                      # queued on that stream; returns `g`
        hedge(g.delta)              # work queued after it on the stream sees the new values

The results live in arrays made once, at binding, by the inputs' own library; every call writes
them again (copy what must outlive the next call). The launch goes to the stream the inputs
named when bound (CuPy: its current stream then; PyTorch: its current stream then; otherwise the
legacy default stream), so updates queued on that stream before the call are read, and work
queued after it sees the results. The kernel is the one `tickgpu.greeks` picks for these
arrays, so the results equal its own on them, bit for bit.

Single numbers (a chain's rate, a call flag) are fixed at binding: each is copied once into a
one-element device array of the binding's and read with stride 0.

**Zero copy from the host.** NumPy arrays in mapped pinned memory (`tickgpu.memory.mapped_array`)
bound with ``out=`` (a (10, n) array there too) take the same path: the kernel reads the inputs and
writes the results across PCIe in place, on the runtime's stream, and each call waits for it, so no
staging copy and no allocation is left in a tick::

    spot = tickgpu.memory.mapped_array(1024, np.float32); ...      # the loop's arrays, pinned
    out = tickgpu.memory.mapped_array((10, 1024), np.float32)
    tick = tickgpu.runtime.bind_greeks(spot, strike, t, rate, vol, div, call, dtype=np.float32, out=out)
    spot[:] = latest_spots(); g = tick()                           # g.delta is out[1], just written

For a few thousand options this beats staging (the copies cost more than the kernel's reads over
the link); for large arrays the staged and pipelined paths are faster.
"""
from __future__ import annotations

import weakref

import numpy as np

from tickgpu.finance import _checks
from tickgpu.finance.greeks import Greeks, _greeks_of
from tickgpu.memory.errors import PoolError
from tickgpu.runtime import ops
from tickgpu.runtime.arrays import DeviceArray, view_or_none
from tickgpu.runtime.direct import outputs_and_stream
from tickgpu.runtime.launch import MAX_ELEMENTS_PER_LAUNCH, Launcher
from tickgpu.runtime.staged import DTYPE_CODE

__all__ = ["DeviceBoundGreeks", "DeviceBoundImpliedVol", "has_device_array", "host_array_length"]

CU_STREAM_LEGACY = 1
_FLAG_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_), np.dtype(np.int8))


def has_device_array(values) -> bool:
    """Whether any of `values` is a GPU array (the bindings' choice between host and device)."""
    return any(view_or_none(x, "") is not None for x in values if type(x) not in _checks.SCALAR_TYPES)


def _gpu_inputs(fam, api: str, values, dt: np.dtype, ordinal: int) -> tuple[dict, int]:
    """({input name: DeviceView} of the GPU arrays among `values`, their common length), every
    array checked: a GPU array on `ordinal`, of `dt` (the flag: bool, uint8 or int8), 1-D,
    contiguous, of one nonzero length; numbers are left to the caller."""
    views, n, first = {}, None, None
    for name, x in zip(fam.inputs, values):
        if type(x) in _checks.SCALAR_TYPES:
            continue
        v = view_or_none(x, name, dlpack_stream=CU_STREAM_LEGACY)
        if v is None:
            raise TypeError(f"{api}: {name} is a {type(x).__name__}, not a GPU array; a binding's arrays "
                            f"are all GPU arrays or all NumPy arrays (single numbers may be mixed in)")
        if v.device_id is not None and v.device_id != ordinal:
            raise ValueError(f"{api}: {name} is on device {v.device_id}, tickgpu runs on device {ordinal}")
        want = _FLAG_DTYPES if name == fam.flag else (dt,)
        if v.dtype not in want:
            raise TypeError(f"{api}: {name} must be of dtype {' or '.join(map(str, want))}, got {v.dtype}")
        if len(v.shape) != 1 or not v.contiguous:
            raise ValueError(f"{api}: {name} must be one-dimensional and C-contiguous, got shape {v.shape}"
                             f"{'' if v.contiguous else ', not contiguous'}")
        if v.ptr == 0:
            raise ValueError(f"{api}: {name} has a null data pointer")
        if v.ptr % v.dtype.itemsize:
            raise ValueError(f"{api}: {name}'s data at {v.ptr:#x} is not aligned to its {v.dtype.itemsize}-byte "
                             f"elements")
        if n is None:
            n, first = v.shape[0], name
        elif v.shape[0] != n:
            raise ValueError(f"{api}: {name} has {v.shape[0]} elements, {first} has {n}")
        views[name] = v
    if not n:
        raise ValueError(f"{api}: {first} has no elements" if first else
                         f"{api}: at least one input must be an array")
    return views, n


def host_array_length(api: str, name: str, x, flag: bool, dt: np.dtype, kind: str = "a NumPy array") -> int:
    """The length of NumPy array `x`, bound as input `name`, after checking what a binding needs of
    it: a NumPy array (else TypeError naming `kind`), of `dt` (a flag: bool or uint8), 1-D and
    C-contiguous (else ValueError)."""
    if type(x) is not np.ndarray:
        raise TypeError(f"{api}: {name} must be {kind} or a single number, got {type(x).__name__}")
    want = (np.dtype(np.bool_), np.dtype(np.uint8)) if flag else (dt,)
    if x.dtype not in want:
        raise TypeError(f"{api}: {name} must be of dtype {' or '.join(map(str, want))}, got {x.dtype}")
    if x.ndim != 1 or not x.flags.c_contiguous:
        raise ValueError(f"{api}: {name} must be one-dimensional and C-contiguous, got shape {x.shape}"
                         f"{'' if x.flags.c_contiguous else ', not contiguous'}")
    return x.shape[0]


def _pinned_address(x: np.ndarray, unpins: list) -> int | None:
    """The device address of `x`'s bytes in a held mapped pinned buffer, pinned there (its release
    refused) until the binding is gone: `unpins` gets the call that ends it. None if not in one."""
    from tickgpu.memory.host import pin_mapped

    got = pin_mapped(x.ctypes.data, x.nbytes)
    if got is None:
        return None
    unpins.append(got[1])
    return got[0]


def _unpin_all(unpins: list) -> None:
    for unpin in unpins:
        unpin()
    unpins.clear()


def _mapped_inputs(fam, api: str, values, dt: np.dtype, unpins: list) -> tuple[dict, int]:
    """({input name: device address} of the NumPy arrays among `values`, their common length),
    every array checked: in mapped pinned memory (`tickgpu.memory.mapped_array`), of `dt` (the
    flag: bool or uint8), 1-D, contiguous, of one nonzero length; numbers are left to the caller.
    Each array's buffer is pinned (`_pinned_address`)."""
    ptrs, n, first = {}, None, None
    for name, x in zip(fam.inputs, values):
        if type(x) in _checks.SCALAR_TYPES:
            continue
        m = host_array_length(api, name, x, name == fam.flag, dt, "a NumPy array in mapped pinned memory")
        if n is None:
            n, first = m, name
        elif m != n:
            raise ValueError(f"{api}: {name} has {m} elements, {first} has {n}")
        if x.ctypes.data % x.dtype.itemsize:
            raise ValueError(f"{api}: {name}'s data at {x.ctypes.data:#x} is not aligned to its "
                             f"{x.dtype.itemsize}-byte elements")
        addr = _pinned_address(x, unpins)
        if addr is None:
            raise ValueError(f"{api}: {name} is not in mapped pinned memory (or its buffer was released); with "
                             f"out= the GPU reads the arrays in place: make them with tickgpu.memory.mapped_array")
        ptrs[name] = addr
    if not n:
        raise ValueError(f"{api}: {first} has no elements" if first else f"{api}: at least one input must be an array")
    return ptrs, n


def _mapped_outputs(api: str, rows: list, n: int, out_dtypes, unpins: list) -> list[tuple[np.ndarray, int]]:
    """(array, device address) of each result array the caller gave, checked (and pinned) like the inputs."""
    made = []
    for i, (r, want) in enumerate(zip(rows, out_dtypes)):
        what = f"{api}: out[{i}]"
        if type(r) is not np.ndarray or r.dtype != want or r.shape != (n,) or not r.flags.c_contiguous:
            got = f"{r.dtype} {r.shape}" if isinstance(r, np.ndarray) else type(r).__name__
            raise ValueError(f"{what} must be a C-contiguous NumPy array of {n} {want}, got {got}")
        if not r.flags.writeable:
            raise ValueError(f"{what} is read-only")
        if r.ctypes.data % r.dtype.itemsize:
            raise ValueError(f"{what}'s data at {r.ctypes.data:#x} is not aligned to its {r.dtype.itemsize}-byte "
                             f"elements")
        addr = _pinned_address(r, unpins)
        if addr is None:
            raise ValueError(f"{what} is not in mapped pinned memory (or its buffer was released): make it with "
                             "tickgpu.memory.mapped_array")
        made.append((r, addr))
    return made


def _refuse_overlaps(api: str, fam, values, rows: list) -> None:
    """ValueError naming the first result row that shares memory with another row or with an
    input: the kernel writes it while reading the other, so results would change from call to call."""
    named = [(f"out[{i}]", r) for i, r in enumerate(rows)]
    inputs = [(name, x) for name, x in zip(fam.inputs, values) if type(x) is np.ndarray]
    for i, (what, r) in enumerate(named):
        for other, x in (*named[i + 1:], *inputs):
            if np.shares_memory(r, x):
                raise ValueError(f"{api}: {what} shares memory with {other}; results and inputs must not overlap")


class _DeviceBoundTick:
    """What a device binding of one element-wise op does: check once, then one launch a call."""

    _fam = None          # the op's family (tickgpu.runtime.ops)
    _api = ""            # the public name, for messages

    def __init__(self, values, dtype, out=None):
        from tickgpu.runtime import context

        ctx = context()
        fam, dt = self._fam, _checks.check_dtype(dtype)
        out_dtypes = [fam.out_dtype(role, dt) for _, role in fam.outputs]
        if out is not None:   # NumPy arrays in mapped pinned memory: the kernel reads and writes them in place
            # Their buffers cannot be released while this binding lives (the kernel would write
            # into whoever got the memory next): pinned now, unpinned when it is collected.
            unpins: list = []
            try:
                ptrs, n = _mapped_inputs(fam, self._api, values, dt, unpins)
                made = _mapped_outputs(self._api, self._out_rows(out, n, dt), n, out_dtypes, unpins)
                _refuse_overlaps(self._api, fam, values, [r for r, _ in made])
                self._bind(ctx, values, dt, n, ptrs, made, out_dtypes, ctx.stream, wait=True, movable=[],
                           closable=[])
            except BaseException:
                _unpin_all(unpins)
                raise
            weakref.finalize(self, _unpin_all, unpins)
            return
        views, n = _gpu_inputs(fam, self._api, values, dt, ctx.ordinal)
        # Arrays of our own have no library to order them: a call waits for its launch, as
        # tickgpu.greeks does for them.
        made, owned, stream = outputs_and_stream(ctx, fam, views, (n,), out_dtypes, reuse=False)
        # Torch tensors can be reallocated in place (resize_): their addresses are checked per call.
        movable = [(o, p) for o, p in [*((v.source, v.ptr) for v in views.values()), *made] if hasattr(o, "data_ptr")]
        # A ManagedArray can be closed (its memory freed) under the binding: checked per call.
        from tickgpu.memory.managed import ManagedArray

        closable = [(name, v.source) for name, v in views.items() if isinstance(v.source, ManagedArray)]
        self._bind(ctx, values, dt, n, {name: v.ptr for name, v in views.items()}, made, out_dtypes,
                   stream, wait=owned, movable=movable, closable=closable)

    def _bind(self, ctx, values, dt, n, in_ptrs: dict, made: list, out_dtypes, stream: int, wait: bool,
              movable: list, closable: list) -> None:
        """The launches over inputs at `in_ptrs` (by name; the others single values) into `made`
        ((array, address) per output) on `stream`, packed once; `wait`: each call waits for them."""
        fam = self._fam
        self.n, self.dtype, self._ctx, self.stream, self._wait = n, dt, ctx, stream, wait
        self._outs = [o for o, _ in made]
        self._movable = movable
        self._closable = closable
        # Single values: one element each in device memory of the binding's, read with stride 0.
        ptrs, strides, keep = [], [], []
        with ctx.lock:
            ctx.enter()
            for name, x in zip(fam.inputs, values):
                p = in_ptrs.get(name)
                if p is not None:
                    ptrs.append(p)
                    strides.append(1)
                    continue
                one = (np.array([_checks.call_flag(f"{self._api}: {name}", x)], np.uint8) if name == fam.flag
                       else np.array([x], dtype=dt))
                cell = DeviceArray(ctx, (1,), one.dtype)
                ctx.driver.memcpy_htod(cell.ptr, one.ctypes.data, one.nbytes)
                keep.append(cell)
                ptrs.append(cell.ptr)
                strides.append(0)
            # The arrays and cells stay referenced: their addresses are in the packed arguments.
            self.arrays = tuple(x if name in in_ptrs else None for name, x in zip(fam.inputs, values))
            self._cells = keep
            out_ptrs = [p for _, p in made]
            aligned = n % 16 == 0 and all(p % 16 == 0 for p in (*ptrs, *out_ptrs))
            dts = DTYPE_CODE[dt]
            in_size = [1 if name == fam.flag else dt.itemsize for name in fam.inputs]
            out_size = [odt.itemsize for odt in out_dtypes]
            self._launches = []
            for start in range(0, n, MAX_ELEMENTS_PER_LAUNCH):
                m = min(MAX_ELEMENTS_PER_LAUNCH, n - start)
                # A launcher of the binding's own: its argument buffer is packed once and kept.
                lau = Launcher(ctx.driver, ctx.bundle.select(fam.name, dts, m, aligned and m % 16 == 0,
                                                             ctx.sm_count))
                values_of = fam.contract([], [p + start * sz * s for p, s, sz in zip(ptrs, strides, in_size)],
                                         strides, [p + start * sz for p, sz in zip(out_ptrs, out_size)], m, None)
                # The launch makes the context current itself (in C): a call makes no Python call for it.
                self._launches.append((lau, m, values_of, lau.bind(m, self.stream, context=ctx.ctx)))
            self._pack()

    def _pack(self) -> None:
        """Pack every launch's arguments (again after a kernel's scratch block moved)."""
        ctx = self._ctx
        for lau, m, values_of, _ in self._launches:
            ctx.bundle.ensure_scratch(lau.kernel, lau.grid(m)[0])
            lau.args.pack(*values_of)
        self._epoch = ctx.bundle.scratch_epoch

    def _launch(self) -> None:
        ctx = self._ctx
        for o, p in self._movable:
            if o.data_ptr() != p:
                raise RuntimeError(f"{self._api}: a bound tensor was reallocated (resize_); bind again")
        for name, o in self._closable:
            if o._closed:
                raise PoolError(f"{self._api}: {name} is a closed ManagedArray (its memory is freed); bind again")
        with ctx.lock:
            if self._epoch != ctx.bundle.scratch_epoch:
                ctx.enter()
                self._pack()
            for *_, bound in self._launches:
                bound(self._wait)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dtype.name} n={self.n} stream={self.stream:#x}>"


class DeviceBoundGreeks(_DeviceBoundTick):
    """Greeks of fixed GPU arrays into fixed GPU arrays: one kernel launch a call.

    Made by `tickgpu.runtime.bind_greeks` when its inputs are GPU arrays (CuPy, PyTorch, anything
    with ``__cuda_array_interface__`` or DLPack).

    Parameters
    ----------
    spot, strike, t, rate, vol, div : GPU array or number
        One-dimensional, C-contiguous GPU arrays of `dtype`, all of one length n >= 1, on the
        runtime's device, read on every call; or single numbers, fixed at binding.
    call : GPU array or bool
        Of the same length, bool, uint8 or int8 (nonzero: a call); or one bool.
    dtype : numpy.float64 or numpy.float32
    out : numpy.ndarray, optional
        A (10, n) array of `dtype` in mapped pinned memory: then the inputs are NumPy arrays there
        too (bool or uint8 for `call`), and every call launches on the runtime's stream, waits,
        and leaves the results in the rows of `out` (the module's "Zero copy from the host").

    Attributes
    ----------
    outputs : Greeks
        The ten result arrays (made by the inputs' library), rewritten by every call.
    stream : int
        The CUDA stream every call launches on.

    Raises
    ------
    TypeError
        A host array among GPU arrays, or an array of the wrong dtype, naming the input.
    ValueError
        An array that is not one-dimensional and C-contiguous, lengths that differ, no elements,
        an array on another device, or (with `out`) an array or result row outside mapped pinned
        memory or an `out` of the wrong shape, naming it.
    """

    _fam, _api = ops.GREEKS, "bind_greeks"

    def __init__(self, spot, strike, t, rate, vol, div, call, *, dtype=np.float64, out=None):
        super().__init__((spot, strike, t, rate, vol, div, call), dtype, out)
        self.outputs: Greeks = _greeks_of(self._outs)

    @staticmethod
    def _out_rows(out, n: int, dt: np.dtype) -> list:
        if type(out) is not np.ndarray or out.shape != (10, n):
            got = out.shape if isinstance(out, np.ndarray) else type(out).__name__
            raise ValueError(f"bind_greeks: out must be a NumPy array of shape (10, {n}) (one row a result, "
                             f"in the order of Greeks), got {got}")
        return list(out)

    def __call__(self) -> Greeks:
        """Queue the greeks of the bound arrays' contents on `stream`; returns `outputs`.

        No host wait (except for outputs of tickgpu's own, which no library orders): work queued
        on `stream` after this call reads the new results."""
        self._launch()
        return self.outputs


class DeviceBoundImpliedVol(_DeviceBoundTick):
    """Implied vols of fixed GPU arrays into fixed GPU arrays: one kernel launch a call.

    Made by `tickgpu.runtime.bind_implied_vol` when its inputs are GPU arrays, or NumPy arrays in
    mapped pinned memory with ``out=(vol, status)`` (n `dtype` and n int8 there); inputs as
    `DeviceBoundGreeks`'s, with `price` first. ``outputs`` is ``(vol, status)``: n vols of `dtype`
    and n `IVStatus` codes (int8), rewritten by every call.
    """

    _fam, _api = ops.IMPLIED_VOL, "bind_implied_vol"

    def __init__(self, price, spot, strike, t, rate, div, call, *, dtype=np.float64, out=None):
        super().__init__((price, spot, strike, t, rate, div, call), dtype, out)
        self.outputs: tuple = (self._outs[0], self._outs[1])

    @staticmethod
    def _out_rows(out, n: int, dt: np.dtype) -> list:
        if not isinstance(out, tuple) or len(out) != 2:
            raise ValueError(f"bind_implied_vol: out must be a tuple (vol, status) of NumPy arrays of {n} {dt} "
                             f"and {n} int8, got {type(out).__name__}")
        return list(out)

    def __call__(self) -> tuple:
        """Queue the implied vols of the bound arrays' contents on `stream`; returns `outputs`."""
        self._launch()
        return self.outputs
