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

import math
import struct
from dataclasses import dataclass

import numpy as np

from tickgpu._native import as_input as _as_input
from tickgpu._native import ffi as _ffi

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
    global _context_fn
    if _context_fn is None:
        from tickgpu.runtime import context

        _context_fn = context
    return _context_fn()


_context_fn = None


def _host_input(x, shape, dtype) -> tuple[np.ndarray, int]:
    return _as_input(x, shape, dtype)


def _n_of(shape) -> int:
    return math.prod(shape)


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
# The per-call Python work is kept to what changes per call: the caller's addresses and the
# broadcast values. Everything else about a tick -- runner, kernel, staging layout, argument
# values, copy sizes -- depends only on (op, dtype, n, which inputs are arrays) and is a cached
# `_TickPlan`.

def _addr(a: np.ndarray) -> int:
    # ffi.from_buffer is ~4x cheaper than a.ctypes.data, which builds a ctypes object per call.
    return int(_ffi.cast("uintptr_t", _ffi.from_buffer(a)))


def _is_scalar(x) -> bool:
    return isinstance(x, (float, int, np.generic)) or (isinstance(x, np.ndarray) and x.size == 1)


def _scalar_value(x, flag: bool):
    v = x.reshape(-1)[0] if isinstance(x, np.ndarray) else x
    return int(bool(v)) if flag else float(v)


_BLOCKS: dict = {}


def _output_blocks(fam, dtype):
    """([(dtype, rows)] per output block, [(block, row)] per output) for `fam` at `dtype`.

    Outputs of one dtype share a block (one allocation, and one copy out of staging per tick).
    """
    key = (fam.name, dtype)
    hit = _BLOCKS.get(key)
    if hit is None:
        spec, rows = [], []
        for _, role in fam.outputs:
            odt = fam.out_dtype(role, dtype)
            b = next((i for i, (d, _) in enumerate(spec) if d == odt), None)
            if b is None:
                b = len(spec)
                spec.append((odt, 0))
            rows.append((b, spec[b][1]))
            spec[b] = (odt, spec[b][1] + 1)
        hit = _BLOCKS[key] = (spec, rows)
    return hit


def bucket(n: int, chunk: int) -> int:
    """The element count a tick of `n` runs as: n rounded up to 1/8 of its power of two (multiples
    of 16 below 128), at most `chunk`.

    A tick's graph, plan and argument values depend only on the bucket, so ticks whose size moves
    a little (an option chain gaining a strike) replay the same graph with no update; the price is
    at most 12.5% more elements copied and computed (the kernel runs the bucket; the tail of its
    output is never handed out).
    """
    step = max(16, 1 << max(0, n.bit_length() - 4))
    return min(-(-n // step) * step, chunk)


class _TickPlan:
    """Everything about one staged tick that does not change from call to call.

    Built for (op, dtype, bucket of m elements, runner index, which inputs are arrays, surface
    grid) and cached; per call only the caller's addresses and sizes go into the copy tables
    (cffi-owned ``tg_hot_copy[]``) and broadcast values straight into pinned staging.

    Output staging holds each output block as rows of the bucket size, so a tick's results leave
    staging in one copy per block straight into a NumPy block of the same shape (the caller gets
    row views), while a pipeline chunk copies row by row into the caller's arrays at its offset.
    """

    def __init__(self, ctx, fam, dtype, m, index, is_array, extra, grid_sizes):
        dts = _DTYPE_CODE[dtype]
        self.m = self.mpad = m          # a bucket: a multiple of 16
        self.blocks, rows = _output_blocks(fam, dtype)
        self.itemsizes = [1 if name == fam.flag else dtype.itemsize for name in fam.inputs]
        in_sizes = list(grid_sizes) + [s * (m if arr else 1) for s, arr in zip(self.itemsizes, is_array)]
        self.layout = lay = plan_layout(in_sizes, [odt.itemsize * cnt * self.mpad for odt, cnt in self.blocks])
        chunk = ctx.staging_elements
        full = plan_layout(list(grid_sizes) + [s * chunk for s in self.itemsizes],
                           [odt.itemsize * cnt * chunk for odt, cnt in self.blocks])
        self.runner = r = ctx.runner(fam.name, dts, index, lay, full)
        self.launcher = lau = ctx.launcher(fam.name, dts, m, aligned16=True)   # staging is 64-byte aligned
        ctx.bundle.ensure_scratch(lau.kernel, lau.grid(m)[0])
        ng = len(grid_sizes)
        dev_in = [r.in_dev + o for o in lay.in_offsets]
        row_offsets = [lay.out_offsets[b] + row * self.mpad * self.blocks[b][0].itemsize for b, row in rows]
        strides = [1 if arr else 0 for arr in is_array]
        lau.args.pack(*fam.contract(dev_in[:ng], dev_in[ng:], strides, [r.out_dev + o for o in row_offsets],
                                    m, extra))
        self.args = lau.args.values.copy()
        # Inputs: grid arrays, then element-wise arrays; dst and size fixed, src per call.
        self.ng = ng
        self.array_inputs = [i for i, arr in enumerate(is_array) if arr]
        self.k_in = ng + len(self.array_inputs)
        self.t_in = _ffi.new("tg_hot_copy[]", max(self.k_in, 1))
        for row, i in enumerate(list(range(ng)) + [ng + i for i in self.array_inputs]):
            self.t_in[row].dst = _ffi.cast("void *", r.in_host + lay.in_offsets[i])
            self.t_in[row].bytes = in_sizes[i]
        self.scalars = [(i, lay.in_offsets[ng + i], "<B" if name == fam.flag else ("<d" if dtype.itemsize == 8 else "<f"),
                         name == fam.flag)
                        for i, (name, arr) in enumerate(zip(fam.inputs, is_array)) if not arr]
        # Outputs, tick: one copy per block. Pipeline chunk: one copy per output row.
        self.t_blocks = _ffi.new("tg_hot_copy[]", len(self.blocks))
        for b, (odt, cnt) in enumerate(self.blocks):
            self.t_blocks[b].src = _ffi.cast("void *", r.out_host + lay.out_offsets[b])
            self.t_blocks[b].bytes = odt.itemsize * cnt * self.mpad
        self.rows = rows
        self.t_rows = _ffi.new("tg_hot_copy[]", len(rows))
        for j, ((b, _), off) in enumerate(zip(rows, row_offsets)):
            self.t_rows[j].src = _ffi.cast("void *", r.out_host + off)
            self.t_rows[j].bytes = self.blocks[b][0].itemsize * m

    def bind(self) -> None:
        """Make the runner's graph this plan's (a no-op when it already is)."""
        r = self.runner
        if r.bound is not self:
            self.launcher.args.values[:] = self.args
            r.prepare(self.launcher, self.m, self.layout)
            r.bound = self

    def fill_inputs(self, inputs, grid, start: int, m: int) -> None:
        """This call's input addresses and sizes (m elements from `start` on) and broadcast values."""
        t = self.t_in
        for row, g in enumerate(grid):
            t[row].src = _ffi.from_buffer(g)
        for row, i in enumerate(self.array_inputs, self.ng):
            t[row].src = _ffi.from_buffer(inputs[i]) + start * self.itemsizes[i]
            t[row].bytes = m * self.itemsizes[i]
        view = self.runner.in_view
        for i, off, code, flag in self.scalars:
            struct.pack_into(code, view, off, _scalar_value(inputs[i], flag))


def _plan(ctx, fam, dtype, m, index, is_array, grid, extra) -> _TickPlan:
    key = (fam.name, dtype.char, m, index, is_array, extra)
    plan = ctx.plans.get(key)
    if plan is None or plan.runner is not ctx.runners.get((fam.name, _DTYPE_CODE[dtype], index)) \
            or ctx.bundle.scratch_epoch != plan.epoch:
        if len(ctx.plans) >= 2048:
            ctx.plans.clear()
        plan = _TickPlan(ctx, fam, dtype, m, index, is_array, extra, [g.nbytes for g in grid])
        plan.epoch = ctx.bundle.scratch_epoch
        ctx.plans[key] = plan
    return plan


def _host_call(fam, dtype, shape, inputs, grid, extra) -> list:
    n = math.prod(shape)
    vals, is_array = [], []
    for name, x in zip(fam.inputs, inputs):
        if _is_scalar(x):
            vals.append(x)
            is_array.append(False)
        else:
            a, stride = _host_input(x, shape, np.uint8 if name == fam.flag else dtype)
            vals.append(a)
            is_array.append(bool(stride))
    is_array = tuple(is_array)
    spec, rows = _output_blocks(fam, dtype)
    if n == 0:
        return [np.empty(shape, spec[b][0]) for b, _ in rows]
    ctx = _context()
    with ctx.lock:
        ctx.enter()
        if n <= ctx.staging_elements:
            plan = _plan(ctx, fam, dtype, bucket(n, ctx.staging_elements), 0, is_array, grid, extra)
            blocks = [np.empty((cnt, plan.mpad), odt) for odt, cnt in spec]
            plan.bind()
            plan.fill_inputs(vals, grid, 0, n)
            for b, blk in enumerate(blocks):
                plan.t_blocks[b].dst = _ffi.from_buffer(blk)
            _tick(ctx, plan, plan.t_blocks, len(blocks))
            outs = [blocks[b][r, :n] for b, r in rows]
        else:
            blocks = [np.empty((cnt, n), odt) for odt, cnt in spec]
            outs = [blocks[b][r] for b, r in rows]
            _run_pipeline(ctx, fam, dtype, n, vals, is_array, outs, grid, extra)
    if len(shape) == 1:
        return outs
    return [o.reshape(shape) for o in outs]


def _run_pipeline(ctx, fam, dtype, n, vals, is_array, outs, grid, extra) -> None:
    """More than one chunk: while the GPU runs chunk k on one runner, the host stages k+1 on the other."""
    from tickgpu._native import check, lib

    chunk = ctx.staging_elements
    out_cdata = [_ffi.from_buffer(o) for o in outs]
    pending = [None, None]
    try:
        for k, start in enumerate(range(0, n, chunk)):
            i = k % 2
            if pending[i] is not None:
                _collect(ctx, pending[i], check, lib)
                pending[i] = None
            m = min(chunk, n - start)
            plan = _plan(ctx, fam, dtype, bucket(m, chunk), i, is_array, grid, extra)
            plan.bind()
            plan.fill_inputs(vals, grid, start, m)
            for j, ((b, _), o) in enumerate(zip(plan.rows, out_cdata)):
                size = plan.blocks[b][0].itemsize
                plan.t_rows[j].dst = o + start * size
                plan.t_rows[j].bytes = m * size
            check(lib.tg_hot_stage(plan.t_in, plan.k_in), "staging inputs")
            ctx.driver.graph_launch(plan.runner.exec, plan.runner.stream)
            plan.runner.stats["replays"] += 1
            pending[i] = plan
        for i in (0, 1):
            if pending[i] is not None:
                _collect(ctx, pending[i], check, lib)
                pending[i] = None
    except BaseException:
        # Leave no copy in flight into staging (the next call reuses it).
        for p in pending:
            if p is not None:
                try:
                    ctx.driver.stream_synchronize(p.runner.stream)
                except Exception:
                    pass
        raise


def _tick(ctx, plan, out_table, k_out: int) -> None:
    """One blocking replay: stage in, graph, wait, stage out -- a single native call."""
    r = plan.runner
    ctx.driver.roundtrip(plan.t_in, plan.k_in, r.exec, r.stream, out_table, k_out)
    r.stats["replays"] += 1


def _collect(ctx, plan, check, lib) -> None:
    ctx.driver.stream_synchronize(plan.runner.stream)
    check(lib.tg_hot_stage(plan.t_rows, len(plan.rows)), "staging outputs")


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


def _bucket_sizes(chunk: int):
    n = 1
    while n <= chunk:
        yield n
        n += max(16, 1 << max(0, n.bit_length() - 4))


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
                vals = list(_WARM_INPUTS[fam.name])
                outs = [np.empty(1, fam.out_dtype(role, dtype)) for _, role in fam.outputs]
                grid, extra = (), None
                if fam.name == "surface":
                    grid = (np.array([90.0, 110.0]), np.array([0.25, 1.0]), np.full(4, 0.2))
                    extra = (2, 2, 0, 0)
                for index in (0, 1):
                    plan = _plan(ctx, fam, dtype, 16, index, (False,) * len(fam.inputs), grid, extra)
                    plan.bind()
                    plan.fill_inputs(vals, grid, 0, 1)
                    for j, o in enumerate(outs):
                        plan.t_rows[j].dst = _ffi.from_buffer(o)
                        plan.t_rows[j].bytes = o.nbytes
                    _tick(ctx, plan, plan.t_rows, len(outs))
                    graphs += 1
                if fam.name != "surface":
                    # Plans of every tick bucket for all-array inputs (an option chain's usual
                    # shape), so that a first tick of any size finds its plan built.
                    for b in sorted({bucket(n, ctx.staging_elements) for n in _bucket_sizes(ctx.staging_elements)}):
                        _plan(ctx, fam, dtype, b, 0, (True,) * len(fam.inputs), grid, extra)
        d.ctx_synchronize()
        ctx.warm = True
    return {"seconds": time.perf_counter() - t0, "kernels": len(ctx.bundle.kernels), "graphs": graphs}
