"""The GPU backend of the finance operations (CONTRACTS.md, "Finance module -> GPU runtime").

Which path a call takes:

* GPU arrays in (CuPy, PyTorch, anything with ``__cuda_array_interface__`` or DLPack): the kernel
  is launched on the arrays' own memory, on the stream their library handed out, and outputs are
  made by that library; no copy, no wait (the library's stream orders what follows). A library
  that makes none (JAX) or an unknown producer gets results of the runtime's own, finished
  (JAX's handed to ``jax.dlpack.from_dlpack``; others as `DeviceArray`, DLPack-exportable). Broadcast
  Python scalars come from a small device constant ring; host arrays mixed in are uploaded.
* NumPy in, at most one staged chunk (``staging_elements``, 2**17 by default): one replay of the
  graph of the call's size bucket through the native round trip (inputs into pinned staging,
  H2D, kernel, D2H, results out), GIL released, nothing allocated but the NumPy results.
* NumPy in, more than a chunk: a pipeline over three graph runners in one native call, the host
  copies of chunk k+1 (on several threads) overlapping the GPU's work on chunk k.

Whether the GPU is used at all ("auto") is decided in `tickgpu.dispatch`, not here.
The inputs' shapes and strictness were checked by the finance layer before the call.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tickgpu.runtime import direct, staged
from tickgpu.runtime.arrays import is_device_array
from tickgpu.runtime.bundle import GREEKS_OUTPUTS, QUANT_FAMILY
from tickgpu.runtime.launch import Launcher, grid_for
from tickgpu.runtime.staged import DTYPE_CODE, bucket, bucket_sizes, plan_for

__all__ = ["greeks", "implied_vol", "surface_eval", "warmup", "bucket", "greeks_arrays"]


@dataclass(frozen=True)
class _Family:
    name: str
    inputs: tuple[str, ...]               # element-wise inputs, in kernel order
    flag: str | None                      # the uint8 input (call), if any
    outputs: tuple[tuple[str, str], ...]  # (name, "value" | "int8")
    n_grid: int = 0                       # leading whole-array inputs (surface grid)
    flag_index: int = field(init=False, default=-1)

    def __post_init__(self):
        object.__setattr__(self, "flag_index", self.inputs.index(self.flag) if self.flag else -1)

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

_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)
_DTYPES = {np.float64: _F64, np.float32: _F32, _F64: _F64, _F32: _F32}
# Types that are never GPU arrays: checked by type first, so host calls skip the probing.
_HOST_TYPES = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.bool_, np.uint8, np.int64})
_context_fn = None
#: Open resident kernels by (op, dtype): tickgpu.runtime.mailbox registers them; each answers host
#: calls of up to its capacity (`host_call` returns None for a call it does not take).
RESIDENT: dict = {}


def _context():
    # tickgpu.runtime imports this module lazily; look its context() up once, not per call.
    global _context_fn
    if _context_fn is None:
        from tickgpu.runtime import context

        _context_fn = context
    return _context_fn()


def _dtype(dtype) -> np.dtype:
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):
        return np.dtype(dtype)


# ---- public entry points (CONTRACTS.md) ---------------------------------------------------------
def greeks(spot, strike, t, rate, vol, div, call, *, dtype, shape) -> dict:
    """Black-Scholes-Merton price and greeks on the GPU; dict of the 10 arrays of `shape`.

    Units and invalid-element behaviour are those of `tickgpu.greeks` (NaN in every output).
    """
    outs = _call(GREEKS, _dtype(dtype), tuple(shape), (spot, strike, t, rate, vol, div, call))
    return dict(zip(GREEKS_OUTPUTS, outs))


def greeks_arrays(inputs: tuple, dtype: np.dtype, shape: tuple, on_device: bool | None = None) -> list | tuple:
    """`greeks` for callers that have checked everything: `inputs` (spot, strike, t, rate, vol,
    div, call), `dtype` a NumPy float dtype, `shape` a tuple; the 10 arrays in GREEKS_OUTPUTS order.
    `on_device` False says that the caller found no GPU array among the inputs (None: look)."""
    return _call(GREEKS, dtype, shape, inputs, on_device=on_device)


def implied_vol(price, spot, strike, t, rate, div, call, *, dtype, shape):
    """Implied Black-Scholes vol on the GPU: (vol, status int8 of tg_iv_status values)."""
    vol, status = _call(IMPLIED_VOL, _dtype(dtype), tuple(shape), (price, spot, strike, t, rate, div, call))
    return vol, status


def surface_eval(strikes, expiries, vols, mode, strike, t, *, what, shape):
    """Vol (what=0) or total variance (what=1) from a strike x expiry grid, float64.

    mode 0 interpolates total variance bilinearly (QuantLib BlackVarianceSurface), 1 the vol.
    """
    for name, g in zip(("strikes", "expiries", "vols"), (strikes, expiries, vols)):
        if is_device_array(g):
            raise TypeError(f"surface_eval: {name} must be a host array (the grid is uploaded once and kept)")
    grid = tuple(np.ascontiguousarray(g, dtype=np.float64) for g in (strikes, expiries, vols))
    nk, nt = grid[0].size, grid[1].size
    if nk < 1 or nt < 1 or grid[2].size != nk * nt:
        raise ValueError(f"surface_eval: vols has {grid[2].size} values for {nt} expiries x {nk} strikes")
    if int(mode) not in (0, 1) or int(what) not in (0, 1):
        raise ValueError(f"surface_eval: mode and what must be 0 or 1, got mode={mode}, what={what}")
    (out,) = _call(SURFACE, _F64, tuple(shape), (strike, t), grid=grid, extra=(nk, nt, int(mode), int(what)))
    return out


def _call(fam: _Family, dtype: np.dtype, shape: tuple, inputs: tuple, grid=(), extra=None,
          on_device: bool | None = None) -> list | tuple:
    if dtype not in DTYPE_CODE:
        raise TypeError(f"{fam.name}: dtype must be float64 or float32, got {dtype}")
    if RESIDENT:   # empty unless a resident kernel is open: one truth test on every other call
        r = RESIDENT.get((fam.name, dtype))
        if r is not None:
            outs = r.host_call(inputs, shape)
            if outs is not None:
                return outs
    if on_device:   # the caller found a GPU array among the inputs
        return direct.device_call(_context(), fam, dtype, shape, inputs, grid, extra)
    if on_device is None:
        for x in inputs:
            if type(x) not in _HOST_TYPES and is_device_array(x):
                return direct.device_call(_context(), fam, dtype, shape, inputs, grid, extra)
    return staged.host_call(_context, fam, dtype, shape, inputs, grid, extra)


def kernel_runtime_of(ctx):
    """The context's `KernelRuntime` (named kernels on device buffers), made on first use."""
    rt = ctx.kernel_runtime
    if rt is None:
        from tickgpu.runtime.kernels_api import KernelRuntime

        rt = ctx.kernel_runtime = KernelRuntime(ctx)
    return rt


# ---- warm-up ------------------------------------------------------------------------------------
_WARM_INPUTS = {
    "greeks": (100.0, 100.0, 1.0, 0.01, 0.2, 0.0, True),
    "implied_vol": (10.0, 100.0, 100.0, 1.0, 0.01, 0.0, True),
    "surface": (100.0, 0.5),
}
_WARM_GRID = (np.array([90.0, 110.0]), np.array([0.25, 1.0]), np.full(4, 0.2))


def warmup(ctx) -> dict:
    """Launch every kernel variant once, build and replay every staged graph, and run each path once.

    Element-wise kernels run over 16 elements of a placeholder block; quant kernels on a 1 x 16 x 16
    problem of valid buffers (`KernelRuntime.warm`).

    Lazy module loading is the driver's default, so a kernel's first launch pays for loading its
    code, and a graph's first launch for uploading it; this pays both up front. It also builds
    the plan and graph of every tick size bucket (so a first tick of any size finds them made),
    the pipeline's, and runs the staged call path once with arrays and once with single values
    (and once as a pipeline, which starts the copy threads), so the first real call costs what
    the thousandth does. Returns {"seconds": s, "kernels": k, "graphs": g}.
    """
    t0 = time.perf_counter()
    d = ctx.driver
    with ctx.lock:
        ctx.enter()
        chunk = ctx.staging_elements
        # Scratch for the largest grid a staged launch uses, before any plan captures its address.
        staged_families = {f.name for f in FAMILIES}
        for lk in ctx.bundle.kernels.values():
            if lk.spec.family in staged_families:
                ctx.bundle.ensure_scratch(lk, grid_for(chunk, lk.spec.elements_per_block)[0])
        # Every variant, directly, over 16 elements (the aligned variants want n % 16 == 0) of a
        # placeholder block of ones; inputs broadcast, outputs may overlap: only loading matters.
        if not ctx.dummy:
            ctx.dummy = d.mem_alloc(4096)
            ones = np.ones(512, dtype=np.float64)
            d.memcpy_htod(ctx.dummy, staged.addr(ones), ones.nbytes)
        fams = {f.name: f for f in FAMILIES}
        for lk in ctx.bundle.kernels.values():
            fam = fams.get(lk.spec.family)
            if lk.spec.family == "noop":
                lau = ctx.launcher("noop", lk.spec.dtype, 1, False)
                lau.args.pack(1)
                lau.launch(1, ctx.stream, sync=True)
                continue
            if lk.spec.family == "scale":
                lau = ctx.launcher("scale", lk.spec.dtype, 16, False)
                lau.args.pack(ctx.dummy, ctx.dummy + 1024, 16)
                lau.launch(16, ctx.stream, sync=True)
                continue
            if fam is None:
                continue   # quant and resident kernels: warmed on shapes (or launches) of their own
            lau = ctx.launchers.get(lk.variant)
            if lau is None:
                lau = ctx.launchers[lk.variant] = Launcher(d, lk)
            ctx.bundle.ensure_scratch(lk, 1)
            extra = (1, 1, 0, 0) if fam.name == "surface" else None
            outs = [ctx.dummy + 1024 + 128 * i for i in range(len(fam.outputs))]
            lau.args.pack(*fam.contract([ctx.dummy] * 3, [ctx.dummy] * len(fam.inputs), [0] * len(fam.inputs),
                                        outs, 16, extra))
            lau.launch(16, ctx.stream, sync=True)
        have = {(k.spec.family, k.spec.dtype) for k in ctx.bundle.kernels.values()}
        for fam in FAMILIES:
            for dtype in (_F64, _F32):
                if (fam.name, DTYPE_CODE[dtype]) not in have or (fam.name == "surface" and dtype is _F32):
                    continue
                grid, extra = ((), None) if not fam.n_grid else (_WARM_GRID, (2, 2, 0, 0))
                # A graph per tick bucket (runner 0), each launched once: a graph's first launch
                # uploads it. A surface's ticks share runner 0's graph.
                if not fam.n_grid:
                    for m in bucket_sizes(chunk):
                        plan = plan_for(ctx, fam, dtype, m, 0, grid, extra)
                        plan.runner.replay(plan.graph)
                # The call path, as callers run it: ticks with arrays and with single values, and a
                # pipeline (which captures the shared graphs of runners 0, 1 and 2 and starts the
                # copy threads).
                _warm_calls(ctx, fam, dtype, grid, extra)
        graphs = sum(1 for r in ctx.runners.values() for g in r.graphs if g.exec)
        # The quant kernels take matrices, not elements: launched on a tiny valid problem each.
        if any(lk.spec.family == QUANT_FAMILY for lk in ctx.bundle.kernels.values()):
            kernel_runtime_of(ctx).warm()
        ctx.synchronize()
        ctx.warm = True
    # The first "auto" call reads the measured GPU ranges; read them now.
    from tickgpu import dispatch

    dispatch.gpu_range()
    return {"seconds": time.perf_counter() - t0, "kernels": len(ctx.bundle.kernels), "graphs": graphs}


def _warm_calls(ctx, fam, dtype, grid, extra) -> None:
    """The staged call path, run as a caller would: arrays, single values, and a pipeline."""
    values = _WARM_INPUTS[fam.name]

    def arrays(n):
        return tuple(np.full(n, v, dtype=np.uint8 if name == fam.flag else dtype)
                     for name, v in zip(fam.inputs, values))

    context = lambda: ctx  # noqa: E731
    n = 16
    # The pipeline first: what runs last stays in the caches for the first real call.
    for inputs in (arrays(2 * ctx.staging_elements + n), arrays(n), values):
        shape = (inputs[0].size,) if isinstance(inputs[0], np.ndarray) else (n,)
        staged.host_call(context, fam, dtype, shape, inputs, grid, extra)
    if fam.n_grid:
        return
    # A tick of every size bucket, half arrays and half single values: each bucket's plan has
    # staging of its own (pages the host has not touched yet, single-value slots not yet filled)
    # and an output block of its own size (heap the allocator has not handed out yet). Measured on
    # an H200 host, a first 1,024-option call after a warm-up that skipped this paid 62-93 us
    # against 28-36 us in steady state, 5-10 us of it in the native round trip.
    for m in bucket_sizes(ctx.staging_elements):
        mixed = tuple(a if i % 2 == 0 else v for i, (a, v) in enumerate(zip(arrays(m), values)))
        staged.host_call(context, fam, dtype, (m,), mixed, grid, extra)
