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
"""
from __future__ import annotations

import numpy as np

from tickgpu.finance import _checks
from tickgpu.finance.greeks import Greeks, _greeks_of
from tickgpu.runtime import ops
from tickgpu.runtime.arrays import DeviceArray, device_view, empty_outputs, producer_stream, view_or_none
from tickgpu.runtime.launch import MAX_ELEMENTS_PER_LAUNCH, Launcher
from tickgpu.runtime.staged import DTYPE_CODE

__all__ = ["DeviceBoundGreeks", "DeviceBoundImpliedVol", "has_device_array"]

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
        if n is None:
            n, first = v.shape[0], name
        elif v.shape[0] != n:
            raise ValueError(f"{api}: {name} has {v.shape[0]} elements, {first} has {n}")
        views[name] = v
    if not n:
        raise ValueError(f"{api}: {first} has no elements" if first else
                         f"{api}: at least one input must be an array")
    return views, n


class _DeviceBoundTick:
    """What a device binding of one element-wise op does: check once, then one launch a call."""

    _fam = None          # the op's family (tickgpu.runtime.ops)
    _api = ""            # the public name, for messages

    def __init__(self, values, dtype):
        from tickgpu.runtime import context

        ctx = context()
        fam, dt = self._fam, _checks.check_dtype(dtype)
        views, n = _gpu_inputs(fam, self._api, values, dt, ctx.ordinal)
        self.n, self.dtype, self._ctx = n, dt, ctx
        src = next(iter(views.values())).source
        out_dtypes = [fam.out_dtype(role, dt) for _, role in fam.outputs]
        made = empty_outputs(src, (n,), out_dtypes, ctx.ordinal)
        # Arrays of our own have no library to order them: a call waits for its launch, as
        # tickgpu.greeks does for them.
        self._owned = made is None
        if self._owned:
            made = [(o, o.ptr) for o in (DeviceArray(ctx, (n,), odt) for odt in out_dtypes)]
        self._outs = [o for o, _ in made]
        stream = next((s for s in map(producer_stream, views.values()) if s is not None), None)
        if stream is None and not self._owned:
            stream = next((s for s in (producer_stream(device_view(o, nm))
                                       for o, (nm, _) in zip(self._outs, fam.outputs)) if s is not None), None)
        self.stream = CU_STREAM_LEGACY if stream is None else int(stream)
        # Single values: one element each in device memory of the binding's, read with stride 0.
        ptrs, strides, keep = [], [], []
        with ctx.lock:
            ctx.enter()
            for name, x in zip(fam.inputs, values):
                v = views.get(name)
                if v is not None:
                    ptrs.append(v.ptr)
                    strides.append(1)
                    continue
                one = np.array([x], dtype=np.uint8 if name == fam.flag else dt)
                cell = DeviceArray(ctx, (1,), one.dtype)
                ctx.driver.memcpy_htod(cell.ptr, one.ctypes.data, one.nbytes)
                keep.append(cell)
                ptrs.append(cell.ptr)
                strides.append(0)
            # The arrays and cells stay referenced: their addresses are in the packed arguments.
            self.arrays = tuple(v.source if v is not None else None for v in map(views.get, fam.inputs))
            self._cells = keep
            # Torch tensors can be reallocated in place (resize_): their addresses are checked per call.
            self._movable = [(o, p) for o, p in [*((v.source, v.ptr) for v in views.values()), *made]
                             if hasattr(o, "data_ptr")]
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
                self._launches.append((lau, m, values_of, lau.bind(m, self.stream)))
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
        with ctx.lock:
            ctx.enter()
            if self._epoch != ctx.bundle.scratch_epoch:
                self._pack()
            for *_, bound in self._launches:
                bound(self._owned)

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

    Attributes
    ----------
    outputs : Greeks
        The ten result arrays (made by the inputs' library), rewritten by every call.
    stream : int
        The CUDA stream every call launches on.

    Raises
    ------
    TypeError
        A host array among GPU arrays, or a GPU array of the wrong dtype, naming the input.
    ValueError
        An array that is not one-dimensional and C-contiguous, lengths that differ, no elements,
        or an array on another device, naming the input.
    """

    _fam, _api = ops.GREEKS, "bind_greeks"

    def __init__(self, spot, strike, t, rate, vol, div, call, *, dtype=np.float64):
        super().__init__((spot, strike, t, rate, vol, div, call), dtype)
        self.outputs: Greeks = _greeks_of(self._outs)

    def __call__(self) -> Greeks:
        """Queue the greeks of the bound arrays' contents on `stream`; returns `outputs`.

        No host wait (except for outputs of tickgpu's own, which no library orders): work queued
        on `stream` after this call reads the new results."""
        self._launch()
        return self.outputs


class DeviceBoundImpliedVol(_DeviceBoundTick):
    """Implied vols of fixed GPU arrays into fixed GPU arrays: one kernel launch a call.

    Made by `tickgpu.runtime.bind_implied_vol` when its inputs are GPU arrays; inputs as
    `DeviceBoundGreeks`'s, with `price` first. ``outputs`` is ``(vol, status)``: n vols of `dtype`
    and n `IVStatus` codes (int8), rewritten by every call.
    """

    _fam, _api = ops.IMPLIED_VOL, "bind_implied_vol"

    def __init__(self, price, spot, strike, t, rate, div, call, *, dtype=np.float64):
        super().__init__((price, spot, strike, t, rate, div, call), dtype)
        self.outputs: tuple = (self._outs[0], self._outs[1])

    def __call__(self) -> tuple:
        """Queue the implied vols of the bound arrays' contents on `stream`; returns `outputs`."""
        self._launch()
        return self.outputs
