"""NumPy in, NumPy out: a tick as a replayed CUDA graph through pinned staging.

n up to ``staging_elements`` is one replay through the native round trip (GIL released); more is
a pipeline over two graph runners, the host staging chunk k+1 while the GPU runs chunk k.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from tickgpu._native import as_input as _as_input
from tickgpu._native import ffi as _ffi
from tickgpu.runtime.graph import plan_layout

__all__ = ["host_call", "bucket", "plan_for", "tick", "addr", "DTYPE_CODE"]

DTYPE_CODE = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}


# The per-call Python work is kept to what changes per call: the caller's addresses and the
# broadcast values. Everything else about a tick -- runner, kernel, staging layout, argument
# values, copy sizes -- depends only on (op, dtype, n, which inputs are arrays) and is a cached
# `_TickPlan`.

def addr(a: np.ndarray) -> int:
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
        dts = DTYPE_CODE[dtype]
        self.m = self.mpad = m          # a bucket: a multiple of 16
        self.blocks, rows = _output_blocks(fam, dtype)
        self.itemsizes = [1 if name == fam.flag else dtype.itemsize for name in fam.inputs]
        in_sizes = list(grid_sizes) + [s * (m if arr else 1) for s, arr in zip(self.itemsizes, is_array)]
        self.layout = lay = plan_layout(in_sizes, [odt.itemsize * cnt * self.mpad for odt, cnt in self.blocks])
        chunk = ctx.staging_elements
        full = plan_layout(list(grid_sizes) + [s * chunk for s in self.itemsizes],
                           [odt.itemsize * cnt * chunk for odt, cnt in self.blocks])
        self.runner = r = ctx.runner(fam.name, dts, index, lay, full)
        # Staging is 64-byte aligned and a bucket a multiple of 16: the aligned variants apply.
        self.launcher = lau = ctx.launcher(fam.name, dts, m, aligned16=True)
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


def plan_for(ctx, fam, dtype, m, index, is_array, grid, extra) -> _TickPlan:
    key = (fam.name, dtype.char, m, index, is_array, extra)
    plan = ctx.plans.get(key)
    if plan is None or plan.runner is not ctx.runners.get((fam.name, DTYPE_CODE[dtype], index)) \
            or ctx.bundle.scratch_epoch != plan.epoch:
        if len(ctx.plans) >= 2048:
            ctx.plans.clear()
        plan = _TickPlan(ctx, fam, dtype, m, index, is_array, extra, [g.nbytes for g in grid])
        plan.epoch = ctx.bundle.scratch_epoch
        ctx.plans[key] = plan
    return plan


def host_call(context, fam, dtype, shape, inputs, grid, extra) -> list:
    """Run `fam` on host inputs; NumPy outputs of `shape`. `context()` gives the runtime context
    (called only when there is work, so an empty call touches no driver)."""
    n = math.prod(shape)
    vals, is_array = [], []
    for name, x in zip(fam.inputs, inputs):
        if _is_scalar(x):
            vals.append(x)
            is_array.append(False)
        else:
            a, stride = _as_input(x, shape, np.uint8 if name == fam.flag else dtype)
            vals.append(a)
            is_array.append(bool(stride))
    is_array = tuple(is_array)
    spec, rows = _output_blocks(fam, dtype)
    if n == 0:
        return [np.empty(shape, spec[b][0]) for b, _ in rows]
    ctx = context()
    with ctx.lock:
        ctx.enter()
        if n <= ctx.staging_elements:
            plan = plan_for(ctx, fam, dtype, bucket(n, ctx.staging_elements), 0, is_array, grid, extra)
            blocks = [np.empty((cnt, plan.mpad), odt) for odt, cnt in spec]
            plan.bind()
            plan.fill_inputs(vals, grid, 0, n)
            for b, blk in enumerate(blocks):
                plan.t_blocks[b].dst = _ffi.from_buffer(blk)
            tick(ctx, plan, plan.t_blocks, len(blocks))
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
            plan = plan_for(ctx, fam, dtype, bucket(m, chunk), i, is_array, grid, extra)
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


def tick(ctx, plan, out_table, k_out: int) -> None:
    """One blocking replay: stage in, graph, wait, stage out -- a single native call."""
    r = plan.runner
    ctx.driver.roundtrip(plan.t_in, plan.k_in, r.exec, r.stream, out_table, k_out)
    r.stats["replays"] += 1


def _collect(ctx, plan, check, lib) -> None:
    ctx.driver.stream_synchronize(plan.runner.stream)
    check(lib.tg_hot_stage(plan.t_rows, len(plan.rows)), "staging outputs")


