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

import time
from dataclasses import dataclass

import numpy as np

from tickgpu._native import ffi as _ffi
from tickgpu.runtime import direct, staged
from tickgpu.runtime.arrays import is_device_array
from tickgpu.runtime.bundle import GREEKS_OUTPUTS, QUANT_FAMILY
from tickgpu.runtime.launch import Launcher
from tickgpu.runtime.staged import DTYPE_CODE, bucket, plan_for, tick

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

_context_fn = None


def _context():
    # tickgpu.runtime imports this module lazily; look its context() up once, not per call.
    global _context_fn
    if _context_fn is None:
        from tickgpu.runtime import context

        _context_fn = context
    return _context_fn()


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
    if dtype not in DTYPE_CODE:
        raise TypeError(f"{fam.name}: dtype must be float64 or float32, got {dtype}")
    if any(is_device_array(x) for x in inputs):
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


def _bucket_sizes(chunk: int):
    """One size in every tick bucket up to `chunk`."""
    n = 1
    while n <= chunk:
        yield n
        n += max(16, 1 << max(0, n.bit_length() - 4))


def warmup(ctx) -> dict:
    """Launch every loaded kernel variant once and replay every staged graph once.

    Element-wise kernels run over 16 elements of a placeholder block; quant kernels on a 1 x 16 x 16
    problem of valid buffers (`KernelRuntime.warm`).

    Lazy module loading is the driver's default, so a kernel's first launch pays for loading
    its code; this pays it up front, and captures and instantiates the graphs, so the first
    real call costs what the thousandth does. Returns {"seconds": s, "kernels": k, "graphs": g}.
    """
    t0 = time.perf_counter()
    ctx.enter()
    d = ctx.driver
    with ctx.lock:
        # Every variant, directly, over 16 elements (the aligned variants want n % 16 == 0) of a
        # placeholder block of ones; inputs broadcast, outputs may overlap: only loading matters.
        if not ctx.dummy:
            ctx.dummy = d.mem_alloc(4096)
            ones = np.ones(512, dtype=np.float64)
            d.memcpy_htod(ctx.dummy, ones.ctypes.data, ones.nbytes)
        fams = {f.name: f for f in FAMILIES}
        for lk in ctx.bundle.kernels.values():
            fam = fams.get(lk.spec.family)
            if fam is None:
                continue   # quant kernels: warmed below on shapes of their own
            lau = ctx.launchers.get(lk.variant)
            if lau is None:
                lau = ctx.launchers[lk.variant] = Launcher(d, lk)
            ctx.bundle.ensure_scratch(lk, 1)
            extra = (1, 1, 0, 0) if fam.name == "surface" else None
            outs = [ctx.dummy + 1024 + 128 * i for i in range(len(fam.outputs))]
            lau.args.pack(*fam.contract([ctx.dummy] * 3, [ctx.dummy] * len(fam.inputs), [0] * len(fam.inputs),
                                        outs, 16, extra))
            lau.launch(16, ctx.stream, sync=True)
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
                    plan = plan_for(ctx, fam, dtype, 16, index, (False,) * len(fam.inputs), grid, extra)
                    plan.bind()
                    plan.fill_inputs(vals, grid, 0, 1)
                    for j, o in enumerate(outs):
                        plan.t_rows[j].dst = _ffi.from_buffer(o)
                        plan.t_rows[j].bytes = o.nbytes
                    tick(ctx, plan, plan.t_rows, len(outs))
                    graphs += 1
                if fam.name != "surface":
                    # Plans of every tick bucket for all-array inputs (an option chain's usual
                    # shape), so that a first tick of any size finds its plan built.
                    for b in sorted({bucket(n, ctx.staging_elements) for n in _bucket_sizes(ctx.staging_elements)}):
                        plan_for(ctx, fam, dtype, b, 0, (True,) * len(fam.inputs), grid, extra)
        # The quant kernels take matrices, not elements: launched on a tiny valid problem each.
        if any(lk.spec.family == QUANT_FAMILY for lk in ctx.bundle.kernels.values()):
            kernel_runtime_of(ctx).warm()
        d.ctx_synchronize()
        ctx.warm = True
    return {"seconds": time.perf_counter() - t0, "kernels": len(ctx.bundle.kernels), "graphs": graphs}
