"""The GPU backend of the finance operations (CONTRACTS.md, "Finance module -> GPU runtime").

Which path a call takes:

* GPU arrays in (CuPy, PyTorch, anything with ``__cuda_array_interface__`` or DLPack): the kernel
  is launched on the arrays' own memory, on the stream their library handed out, and outputs are
  made by that library; no copy, no wait (the library's stream orders what follows). Broadcast
  Python scalars come from a small device constant ring; host arrays mixed in are uploaded.
* NumPy in, at most one staged chunk (``staging_elements``, 2**17 by default): one replay of the
  op's CUDA graph through the native round trip (inputs into pinned staging, H2D, kernel, D2H,
  results out), GIL released, nothing allocated but the NumPy results.
* NumPy in, more than a chunk: the same graphs, two of them alternating, so the host copies of
  chunk k+1 overlap the GPU's work on chunk k.

Whether the GPU is used at all ("auto") is decided in `tickgpu.dispatch`, not here.
The inputs' shapes and strictness were checked by the finance layer before the call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tickgpu.runtime.arrays import DeviceArray, device_view, empty_like_kind, is_device_array
from tickgpu.runtime.bundle import GREEKS_OUTPUTS
from tickgpu.runtime.graph import plan_layout
from tickgpu.runtime.launch import MAX_ELEMENTS_PER_LAUNCH

__all__ = ["greeks", "implied_vol", "surface_eval", "warmup"]


@dataclass(frozen=True)
class _Family:
    name: str
    inputs: tuple[str, ...]               # element-wise inputs, in kernel order
    flag: str | None                      # the uint8 input (call), if any
    outputs: tuple[tuple[str, str], ...]  # (name, "value" | "int8")
    n_grid: int = 0                       # leading whole-array inputs (surface grid)

    def out_dtype(self, role: str, value_dtype: np.dtype) -> np.dtype:
        return value_dtype if role == "value" else np.dtype(np.int8)

    def contract(self, grid, ptrs, strides, outs, n, extra) -> tuple:
        """The kernel's parameter values in contract order (CONTRACTS.md, "Kernel bundle")."""
        if self.name == "surface":
            nk, nt, mode, what = extra
            return (grid[0], grid[1], grid[2], nk, nt, mode, ptrs[0], strides[0], ptrs[1], strides[1],
                    outs[0], what, n)
        vals = []
        for p, s in zip(ptrs, strides):
            vals += (p, s)
        return (*vals, *outs, n)


GREEKS = _Family("greeks", ("spot", "strike", "t", "rate", "vol", "div", "call"), "call",
                 tuple((o, "value") for o in GREEKS_OUTPUTS))
IMPLIED_VOL = _Family("implied_vol", ("price", "spot", "strike", "t", "rate", "div", "call"), "call",
                      (("vol", "value"), ("status", "int8")))
SURFACE = _Family("surface", ("strike", "t"), None, (("out", "value"),), n_grid=3)
FAMILIES = (GREEKS, IMPLIED_VOL, SURFACE)

_DTYPE_CODE = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
_FLAG_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_), np.dtype(np.int8))


def _context():
    from tickgpu.runtime import context

    return context()


def _n_of(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ---- public entry points (CONTRACTS.md) ---------------------------------------------------------
def greeks(spot, strike, t, rate, vol, div, call, *, dtype, shape) -> dict:
    """Black-Scholes-Merton price and greeks on the GPU; dict of the 10 arrays of `shape`.

    Units and invalid-element behaviour are those of `tickgpu.greeks` (NaN in every output).
    """
    outs = _call(GREEKS, np.dtype(dtype), tuple(shape), (spot, strike, t, rate, vol, div, call))
    return dict(zip(GREEKS_OUTPUTS, outs))


def implied_vol(price, spot, strike, t, rate, div, call, *, dtype, shape):
    """Implied Black-Scholes vol on the GPU: (vol, status int8 of tg_iv_status values)."""
    vol, status = _call(IMPLIED_VOL, np.dtype(dtype), tuple(shape), (price, spot, strike, t, rate, div, call))
    return vol, status


def surface_eval(strikes, expiries, vols, mode, strike, t, *, what, shape):
    """Vol (what=0) or total variance (what=1) from a strike x expiry grid, float64.

    mode 0 interpolates total variance bilinearly (QuantLib BlackVarianceSurface), 1 the vol.
    """
    grid = tuple(np.ascontiguousarray(g, dtype=np.float64) for g in (strikes, expiries, vols))
    for name, g in zip(("strikes", "expiries", "vols"), (strikes, expiries, vols)):
        if is_device_array(g):
            raise TypeError(f"surface_eval: {name} must be a host array (the grid is uploaded once and kept)")
    nk, nt = grid[0].size, grid[1].size
    if nk < 1 or nt < 1 or grid[2].size != nk * nt:
        raise ValueError(f"surface_eval: vols has {grid[2].size} values for {nt} expiries x {nk} strikes")
    if int(mode) not in (0, 1) or int(what) not in (0, 1):
        raise ValueError(f"surface_eval: mode and what must be 0 or 1, got mode={mode}, what={what}")
    (out,) = _call(SURFACE, np.dtype(np.float64), tuple(shape), (strike, t), grid=grid,
                   extra=(nk, nt, int(mode), int(what)))
    return out


def _call(fam: _Family, dtype: np.dtype, shape: tuple, inputs: tuple, grid=(), extra=None) -> list:
    if dtype not in _DTYPE_CODE:
        raise TypeError(f"{fam.name}: dtype must be float64 or float32, got {dtype}")
    if any(is_device_array(x) for x in inputs):
        return _device_call(fam, dtype, shape, inputs, grid, extra)
    return _host_call(fam, dtype, shape, inputs, grid, extra)


# ---- NumPy in, NumPy out: staged graph replays --------------------------------------------------
def _host_input(x, shape, dtype) -> tuple[np.ndarray, int]:
    from tickgpu._native import as_input

    return as_input(x, shape, dtype)


def _host_call(fam, dtype, shape, inputs, grid, extra) -> list:
    n = _n_of(shape)
    ins = [_host_input(x, shape, np.uint8 if name == fam.flag else dtype) for name, x in zip(fam.inputs, inputs)]
    # One allocation per output dtype; the outputs are its rows.
    counts: dict = {}
    for _, role in fam.outputs:
        odt = fam.out_dtype(role, dtype)
        counts[odt] = counts.get(odt, 0) + 1
    blocks = {odt: np.empty((c, n), odt) for odt, c in counts.items()}
    used = dict.fromkeys(blocks, 0)
    outs = []
    for _, role in fam.outputs:
        odt = fam.out_dtype(role, dtype)
        outs.append(blocks[odt][used[odt]])
        used[odt] += 1
    if n:
        ctx = _context()
        ctx.enter()
        with ctx.lock:
            _run_staged(ctx, fam, _DTYPE_CODE[dtype], n, ins, outs, grid, extra)
    return [o.reshape(shape) for o in outs]


def _layout(fam, ins, outs, grid, m):
    return plan_layout([g.nbytes for g in grid] + [a.itemsize * (m if s else 1) for a, s in ins],
                       [o.itemsize * m for o in outs])


def _stage(ctx, fam, dts, index, ins, outs, grid, extra, start, m):
    """Point runner `index` at elements [start, start+m): (runner, input copies, output copies)."""
    lay = _layout(fam, ins, outs, grid, m)
    full = _layout(fam, ins, outs, grid, ctx.staging_elements)
    runner = ctx.runner(fam.name, dts, index, lay, full)
    ng = len(grid)
    dev_in = [runner.in_dev + o for o in lay.in_offsets]
    out_ptrs = [runner.out_dev + o for o in lay.out_offsets]
    lau = ctx.launcher(fam.name, dts, m, aligned16=True)   # staging offsets are 64-byte aligned
    ctx.bundle.ensure_scratch(lau.kernel, lau.grid(m)[0])
    lau.args.pack(*fam.contract(dev_in[:ng], dev_in[ng:], [s for _, s in ins], out_ptrs, m, extra))
    runner.prepare(lau, m, lay)
    cin = [(o, g.ctypes.data, g.nbytes) for o, g in zip(lay.in_offsets[:ng], grid)]
    for (a, s), o in zip(ins, lay.in_offsets[ng:]):
        cin.append((o, a.ctypes.data + start * a.itemsize, m * a.itemsize) if s else (o, a.ctypes.data, a.itemsize))
    cout = [(o, out.ctypes.data + start * out.itemsize, m * out.itemsize) for o, out in zip(lay.out_offsets, outs)]
    return runner, cin, cout


def _run_staged(ctx, fam, dts, n, ins, outs, grid, extra) -> None:
    chunk = ctx.staging_elements
    if n <= chunk:
        runner, cin, cout = _stage(ctx, fam, dts, 0, ins, outs, grid, extra, 0, n)
        runner.roundtrip(cin, cout)
        return
    # Pipeline: while the GPU runs chunk k on one runner, the host stages chunk k+1 on the other.
    pending = [None, None]
    order = []
    try:
        for k, start in enumerate(range(0, n, chunk)):
            i = k % 2
            if pending[i] is not None:
                pending[i][0].collect(pending[i][1])
                pending[i] = None
            runner, cin, cout = _stage(ctx, fam, dts, i, ins, outs, grid, extra, start, min(chunk, n - start))
            runner.submit(cin)
            pending[i] = (runner, cout)
            order.append(i)
        for i in order[-2:]:
            if pending[i] is not None:
                pending[i][0].collect(pending[i][1])
                pending[i] = None
    except BaseException:
        # Leave no copy in flight into staging (the next call reuses it).
        for p in pending:
            if p is not None:
                try:
                    ctx.driver.stream_synchronize(p[0].stream)
                except Exception:
                    pass
        raise


# ---- GPU arrays in, GPU arrays out --------------------------------------------------------------
def _device_call(fam, dtype, shape, inputs, grid, extra) -> list:
    ctx = _context()
    ctx.enter()
    n = _n_of(shape)
    with ctx.lock:
        views = {}
        for name, x in zip(fam.inputs, inputs):
            if is_device_array(x):
                views[name] = _check_view(device_view(x, name, dlpack_stream=ctx.stream), name, x, fam, dtype,
                                          shape, n, ctx.ordinal)
        first = next(v for v in views.values())
        out_arrays = []
        for _, role in fam.outputs:
            odt = fam.out_dtype(role, dtype)
            o = empty_like_kind(first.source, shape, odt, ctx.ordinal)
            out_arrays.append(o if o is not None else DeviceArray(ctx, shape, odt))
        out_views = [device_view(o, name) for o, (name, _) in zip(out_arrays, fam.outputs)]
        # Order on the producer's stream when it named one (CAI v3): our work then sits between
        # its producer and whatever the caller queues next, with no host wait.
        stream = next((v.stream for v in (*views.values(), *out_views) if v.stream), None)
        launch_stream = int(stream) if stream is not None else ctx.stream
        if n == 0:
            return out_arrays

        ptrs, strides, scalars, uploaded = [], [], [], False
        for slot, (name, x) in enumerate(zip(fam.inputs, inputs)):
            want = np.uint8 if name == fam.flag else dtype
            v = views.get(name)
            if v is not None:
                ptrs.append(v.ptr)
                strides.append(0 if v.size == 1 else 1)
                continue
            a = np.asarray(x)
            if a.size == 1:
                scalars.append((len(ptrs), np.ascontiguousarray(a, dtype=want).reshape(1)))
                ptrs.append(0)
                strides.append(0)
            else:
                host = np.ascontiguousarray(np.broadcast_to(a, shape), dtype=want)
                ptrs.append(ctx.upload(slot, host, launch_stream))
                strides.append(1)
                uploaded = True
        for (i, _), p in zip(scalars, ctx.constants.put([v for _, v in scalars], launch_stream)):
            ptrs[i] = p
        grid_ptrs = ctx.resident_grid(grid) if grid else []
        out_ptrs = [v.ptr for v in out_views]
        aligned = all(p % 16 == 0 for p in (*ptrs, *out_ptrs, *grid_ptrs))
        dts = _DTYPE_CODE[dtype]
        out_size = [np.dtype(v.dtype).itemsize for v in out_views]
        in_size = [1 if name == fam.flag else dtype.itemsize for name in fam.inputs]
        for start in range(0, n, MAX_ELEMENTS_PER_LAUNCH):
            m = min(MAX_ELEMENTS_PER_LAUNCH, n - start)
            lau = ctx.launcher(fam.name, dts, m, aligned)
            ctx.bundle.ensure_scratch(lau.kernel, lau.grid(m)[0])
            p_in = [p + start * sz * s for p, s, sz in zip(ptrs, strides, in_size)]
            p_out = [p + start * sz for p, sz in zip(out_ptrs, out_size)]
            lau.args.pack(*fam.contract(grid_ptrs, p_in, strides, p_out, m, extra))
            lau.launch(m, launch_stream)
        if stream is None or uploaded:
            # Unknown consumer stream, or scratch that the next call may reuse: finish here.
            ctx.driver.stream_synchronize(launch_stream)
        return out_arrays


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
    return v


# ---- warm-up ------------------------------------------------------------------------------------
_WARM_INPUTS = {
    "greeks": (100.0, 100.0, 1.0, 0.01, 0.2, 0.0, True),
    "implied_vol": (10.0, 100.0, 100.0, 1.0, 0.01, 0.0, True),
    "surface": (100.0, 0.5),
}


def warmup(ctx) -> dict:
    """Launch every loaded kernel variant once and replay every staged graph once.

    Lazy module loading is the driver's default, so a kernel's first launch pays for loading
    its code; this pays it up front, and captures and instantiates the graphs, so the first
    real call costs what the thousandth does. Returns {"seconds": s, "kernels": k, "graphs": g}.
    """
    import time

    t0 = time.perf_counter()
    ctx.enter()
    d = ctx.driver
    with ctx.lock:
        # Every variant, directly, over one element of a scratch block of ones.
        if getattr(ctx, "dummy", 0) == 0:
            ctx.dummy = d.mem_alloc(4096)
            ones = np.ones(512, dtype=np.float64)
            d.memcpy_htod(ctx.dummy, ones.ctypes.data, ones.nbytes)
        fams = {f.name: f for f in FAMILIES}
        for lk in ctx.bundle.kernels.values():
            fam = fams[lk.spec.family]
            lau = ctx.launchers.get(lk.variant)
            if lau is None:
                from tickgpu.runtime.launch import Launcher

                lau = ctx.launchers[lk.variant] = Launcher(d, lk)
            ctx.bundle.ensure_scratch(lk, 1)
            extra = (1, 1, 0, 0) if fam.name == "surface" else None
            outs = [ctx.dummy + 1024 + 64 * i for i in range(len(fam.outputs))]
            lau.args.pack(*fam.contract([ctx.dummy] * 3, [ctx.dummy] * len(fam.inputs), [0] * len(fam.inputs),
                                        outs, 1, extra))
            lau.launch(1, ctx.stream, sync=True)
        # Every staged graph (both runners of each op and dtype in the bundle), one tick each.
        graphs = 0
        have = {(k.spec.family, k.spec.dtype) for k in ctx.bundle.kernels.values()}
        for fam in FAMILIES:
            for dts, dtype in (("f64", np.dtype(np.float64)), ("f32", np.dtype(np.float32))):
                if (fam.name, dts) not in have or (fam.name == "surface" and dts == "f32"):
                    continue
                ins = [_host_input(x, (1,), np.uint8 if name == fam.flag else dtype)
                       for name, x in zip(fam.inputs, _WARM_INPUTS[fam.name])]
                outs = [np.empty(1, fam.out_dtype(role, dtype)) for _, role in fam.outputs]
                grid, extra = (), None
                if fam.name == "surface":
                    grid = (np.array([90.0, 110.0]), np.array([0.25, 1.0]), np.full(4, 0.2))
                    extra = (2, 2, 0, 0)
                for index in (0, 1):
                    runner, cin, cout = _stage(ctx, fam, dts, index, ins, outs, grid, extra, 0, 1)
                    runner.roundtrip(cin, cout)
                    graphs += 1
        d.ctx_synchronize()
        ctx.warm = True
    return {"seconds": time.perf_counter() - t0, "kernels": len(ctx.bundle.kernels), "graphs": graphs}
