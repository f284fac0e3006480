"""GPU arrays in, GPU arrays out: the kernel launched on the caller's own device memory.

No copy and no host wait: the kernel is queued on the producer's stream and outputs are made by
the producer's library, so whatever the caller queues next on that stream sees the results.

Which stream: the one the CUDA Array Interface (v3) names; for PyTorch, whose interface names
none, its current stream; otherwise the legacy default stream, which orders after all work on
the blocking streams of the context (DLPack producers are asked to order before it, too).
"""
from __future__ import annotations

import math

import numpy as np

from tickgpu.finance import _checks
from tickgpu.runtime.arrays import (DeviceArray, adopt_outputs, device_view, empty_outputs, producer_stream,
                                    view_or_none)
from tickgpu.runtime.launch import MAX_ELEMENTS_PER_LAUNCH
from tickgpu.runtime.staged import DTYPE_CODE

__all__ = ["device_call"]

CU_STREAM_LEGACY = 1

_FLAG_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_), np.dtype(np.int8))


def device_call(ctx, fam, dtype, shape, inputs, grid, extra) -> list:
    """Run `fam` on GPU-array inputs (host scalars and arrays may be mixed in); outputs of the inputs' kind."""
    source, outs, owned = _device_call(ctx, fam, dtype, shape, inputs, grid, extra)
    # Outside the runtime's lock: a library taking over our arrays (JAX) may wait on its own work.
    return adopt_outputs(source, outs) if owned else outs


def _device_call(ctx, fam, dtype, shape, inputs, grid, extra) -> tuple[object, list, bool]:
    """`device_call`'s launch: (an input GPU array, the outputs, whether they are the runtime's own)."""
    n = math.prod(shape)
    flag = fam.flag
    with ctx.lock:
        ctx.enter()
        views = {}
        named = False   # a view has named the stream (CuPy's: then the others need not)
        ordinal = ctx.ordinal
        for name, x in zip(fam.inputs, inputs):
            v = view_or_none(x, name, CU_STREAM_LEGACY, not named)
            if v is not None:
                # The usual input passes these at once; anything else gets _check_view's verdict.
                if not ((v.dtype in _FLAG_DTYPES if name == flag else v.dtype is dtype) and v.size == n and v.contiguous
                        and v.ptr and not v.ptr % v.dtype.itemsize and (v.device_id is None or v.device_id == ordinal)):
                    _check_view(v, name, x, fam, dtype, shape, n, ordinal)
                views[name] = v
                named = named or v.stream is not None
        first = next(iter(views.values()))
        out_dtypes = out_dtypes_of(fam, dtype)
        made, owned, launch_stream = outputs_and_stream(ctx, fam, views, shape, out_dtypes)
        out_arrays = [o for o, _ in made]
        out_ptrs = [p for _, p in made]
        if n == 0:
            _checks.refuse_non_numbers(fam.inputs, inputs, fam.flag, skip=views)   # as at any other size
            return first.source, out_arrays, owned

        ptrs, strides, scalars, uploaded = [], [], [], False
        for slot, (name, x) in enumerate(zip(fam.inputs, inputs)):
            v = views.get(name)
            if v is not None:
                ptrs.append(v.ptr)
                strides.append(0 if v.size == 1 else 1)
                continue
            # A host value mixed in: real numbers only, as on the host path (NumPy would parse
            # strings, drop imaginary parts and make None a NaN).
            want = np.uint8 if name == flag else dtype
            a = _checks.real_array(name, x, flags=name == flag)
            if a.size == 1:
                scalars.append((len(ptrs), np.ascontiguousarray(a, dtype=want).reshape(1)))
                ptrs.append(0)
                strides.append(0)
            else:
                host = np.ascontiguousarray(np.broadcast_to(a, shape), dtype=want)
                ptrs.append(ctx.upload(slot, host, launch_stream))
                strides.append(1)
                uploaded = True
        if scalars:
            for (i, _), p in zip(scalars, ctx.constants.put([v for _, v in scalars], launch_stream)):
                ptrs[i] = p
        grid_ptrs = ctx.resident_grid(grid) if grid else []
        low = 0   # the low bits of every address: 16-byte aligned where none is set
        for p in ptrs:
            low |= p
        for p in out_ptrs:
            low |= p
        for p in grid_ptrs:
            low |= p
        aligned = not low & 15
        dts = DTYPE_CODE[dtype]
        if n <= MAX_ELEMENTS_PER_LAUNCH:   # one launch, bound once per size and stream
            bound = _launch_of(ctx, fam.name, dts, n, aligned and n % 16 == 0, launch_stream)
            bound.launcher.args.pack(*fam.contract(grid_ptrs, ptrs, strides, out_ptrs, n, extra))
            bound()
        else:
            out_size = [odt.itemsize for odt in out_dtypes]
            in_size = [1 if name == flag else dtype.itemsize for name in fam.inputs]
            for start in range(0, n, MAX_ELEMENTS_PER_LAUNCH):
                m = min(MAX_ELEMENTS_PER_LAUNCH, n - start)
                bound = _launch_of(ctx, fam.name, dts, m, aligned and m % 16 == 0, launch_stream)
                p_in = [p + start * sz * s for p, s, sz in zip(ptrs, strides, in_size)]
                p_out = [p + start * sz for p, sz in zip(out_ptrs, out_size)]
                bound.launcher.args.pack(*fam.contract(grid_ptrs, p_in, strides, p_out, m, extra))
                bound()
        if owned or uploaded:
            # A consumer we cannot order with, or upload scratch the next call may reuse.
            ctx.driver.stream_synchronize(launch_stream)
        return first.source, out_arrays, owned


_OUT_DTYPES: dict = {}


def out_dtypes_of(fam, dtype) -> list:
    """The dtype of each of `fam`'s outputs at `dtype` (remembered)."""
    key = (fam.name, dtype)
    hit = _OUT_DTYPES.get(key)
    if hit is None:
        hit = _OUT_DTYPES[key] = [fam.out_dtype(role, dtype) for _, role in fam.outputs]
    return hit


def outputs_and_stream(ctx, fam, views: dict, shape: tuple[int, ...], out_dtypes, reuse: bool = True
                       ) -> tuple[list, bool, int]:
    """The results of `fam` on the GPU arrays `views` (by input name) and the stream to launch on:
    ((array, device address) per output, whether the arrays are the runtime's own, the stream).

    The results are made by the inputs' library where it makes arrays, else they are the runtime's
    own `DeviceArray`s, which no library orders (their caller waits for the launch). The stream is
    the one the inputs name, else the one the outputs' library names, else the legacy default.
    ``reuse=False``: never results a call dropped (`empty_outputs`), for a binding that keeps its own."""
    stream = next((s for s in map(producer_stream, views.values()) if s is not None), None)
    made = empty_outputs(next(iter(views.values())).source, shape, out_dtypes, ctx.ordinal,
                         stream if reuse else None)
    owned = made is None
    if owned:
        made = [(o, o.ptr) for o in (DeviceArray(ctx, shape, odt) for odt in out_dtypes)]
    if stream is None and not owned:
        stream = next((s for s in (producer_stream(device_view(o, name))
                                   for (o, _), (name, _) in zip(made, fam.outputs)) if s is not None), None)
    return made, owned, CU_STREAM_LEGACY if stream is None else int(stream)


def _launch_of(ctx, family: str, dts: str, m: int, aligned16: bool, stream: int):
    """The `BoundLaunch` of `m` elements on `stream` (the context's launcher for that size, its
    kernel's scratch sized for the grid): remembered per (op, dtype, size, alignment, stream) in
    the context, up to `_LAUNCHES` of them, so a repeated call skips the choice and launches in one
    native call. Its arguments are the launcher's buffer, packed by the caller under the lock."""
    key = (family, dts, m, aligned16, stream)
    cache = ctx.device_launches
    bound = cache.get(key)
    if bound is not None:
        return bound
    lau = ctx.launcher(family, dts, m, aligned16)
    bound = lau.bind(m, stream)
    ctx.bundle.ensure_scratch(lau.kernel, bound.grid[0])
    if len(cache) >= _LAUNCHES:
        cache.clear()
    cache[key] = bound
    return bound


_LAUNCHES = 256


def _check_view(v, name, x, fam, dtype, shape, n, ordinal):
    if v.device_id is not None and v.device_id != ordinal:
        raise ValueError(f"{name}: GPU array is on device {v.device_id}, tickgpu runs on device {ordinal} "
                         f"(set TICKGPU_DEVICE before first use)")
    if name == fam.flag:
        if v.dtype not in _FLAG_DTYPES:
            raise TypeError(f"{name}: GPU array must be bool or uint8, got {v.dtype}")
    elif v.dtype != dtype:
        raise TypeError(f"{name}: GPU array has dtype {v.dtype}, the call asks for {dtype}; convert it on the "
                        f"device first (e.g. x.astype({dtype.name}))")
    if v.size not in (1, n):
        raise ValueError(f"{name}: GPU array of shape {v.shape} must have the broadcast shape {shape} or a single "
                         f"element; broadcast it on the device first (a contiguous copy)")
    if v.size > 1 and not v.contiguous:
        raise ValueError(f"{name}: GPU array of shape {v.shape} is not C-contiguous; pass a contiguous copy "
                         f"(cupy.ascontiguousarray(x) or x.contiguous())")
    if v.ptr == 0 and v.size:
        raise ValueError(f"{name}: GPU array has a null data pointer")
    if v.ptr % v.dtype.itemsize:
        raise ValueError(f"{name}: GPU array's data at {v.ptr:#x} is not aligned to its {v.dtype.itemsize}-byte "
                         f"elements; pass an aligned copy")
    return v


