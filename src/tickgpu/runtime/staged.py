"""NumPy in, NumPy out: a tick as a replayed CUDA graph through pinned staging.

n up to ``staging_elements`` is one replay through the native round trip (inputs into pinned
staging, graph, wait, results out: one C call, GIL released). Up to ``mapped_elements`` the graph
is the kernel alone, reading and writing the staging through its device mapping; above, it is
H2D copy -> kernel -> D2H copy. More than a chunk is a pipeline: chunks alternate between two
graph runners (the last on a third), and one native call (`tg_hot_pipeline`) stages chunk k+1 and
copies chunk k-1 out, with several copy threads, while the GPU runs chunk k.

What a call costs in Python is kept to what changes per call: the caller's array addresses and
sizes go into the plan's copy table, broadcast values straight into pinned staging, and one
NumPy block per output dtype is allocated. Everything else about a tick -- runner, kernel,
staging layout, argument values, copy sizes, its graph -- depends only on (op, dtype, size
bucket) and is a cached `_TickPlan`, built for every bucket by warm-up.

Broadcast values. In a tick every input has a slot of the bucket's size in staging whether the
call passes an array or a single value, and the kernel reads every input with stride 1: a single
value is filled into its slot, and only when the slot does not hold it already (a steady stream
of calls with the same rate and vol writes nothing). So nothing about a tick's graph depends on
which inputs are single values: every bucket's graph is built once, by warm-up, and never
updated, and the first call costs what the thousandth does. Pipeline chunks instead give a single
value one element and stride 0 (so their copies move arrays only) and re-point the shared graphs
of their runners when the pattern changes -- a few driver calls against milliseconds of work.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from tickgpu._native import as_input as _as_input
from tickgpu._native import ffi as _ffi
from tickgpu.finance import _checks
from tickgpu.runtime.fasttick import plan_state
from tickgpu.runtime.graph import plan_layout

__all__ = ["host_call", "bucket", "bucket_sizes", "plan_for", "tick", "addr", "DTYPE_CODE", "host_inputs"]

DTYPE_CODE = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
_U8, _BOOL = np.dtype(np.uint8), np.dtype(np.bool_)
_from_buffer = _ffi.from_buffer
_ndarray = np.ndarray
_empty = np.empty


def addr(a: np.ndarray) -> int:
    # ffi.from_buffer is ~8x cheaper than a.ctypes.data, which builds a ctypes object per call.
    return int(_ffi.cast("uintptr_t", _from_buffer(a)))


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


def bucket_sizes(chunk: int) -> list[int]:
    """Every bucket up to `chunk` (what warm-up builds plans for)."""
    out, n = [], 1
    while n <= chunk:
        b = bucket(n, chunk)
        if not out or out[-1] != b:
            out.append(b)
        n = b + 1
    return out


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
        # A block's rows as views in one call (itemgetter is cheaper than list(block) or a loop).
        _ROWS[key] = operator.itemgetter(*range(spec[0][1])) if len(spec) == 1 and spec[0][1] > 1 else list
    return hit


_ROWS: dict = {}


# ---- inputs -------------------------------------------------------------------------------------
_SCALAR_TYPES = (float, int, bool)
_WANT: dict = {}


def _wants(fam, dtype) -> tuple:
    key = (fam.name, dtype)
    w = _WANT.get(key)
    if w is None:
        w = _WANT[key] = tuple(_U8 if name == fam.flag else dtype for name in fam.inputs)
    return w


def _scalar(v, flag: bool):
    return (1 if v else 0) if flag else float(v)


def _convert(x, flag: bool, want: np.dtype, shape: tuple, name: str):
    """(value, is_array) for an input that is not already right: a Python number for a single
    value, else a C-contiguous array of `shape` (bool or uint8 for a flag, else `want`).
    TypeError naming the input for what is not real numbers (as the CPU backend: NumPy would
    parse strings, drop imaginary parts and make None a NaN; a boolean is a flag's value only)."""
    if isinstance(x, (bool, np.bool_)) and not flag:
        _checks.real_array(name, x)   # raises: a boolean in a number's place
    if isinstance(x, (float, int)) or (isinstance(x, np.generic) and x.dtype.kind in _checks._REAL_KINDS):
        return _scalar(x, flag), False
    a = _checks.real_array(name, x, flags=flag)
    if flag:
        if a.dtype is not _BOOL and a.dtype is not _U8:
            a = a != 0            # any nonzero value is a call
        want = a.dtype
    if a.size == 1:
        return _scalar(a.reshape(-1)[0], flag), False
    return _as_input(a, shape, want)[0], True


def host_inputs(fam, dtype, shape, n, inputs) -> tuple[list, int]:
    """(values, pattern): each input as a C-contiguous array of `shape` and the kernel's dtype,
    or as one Python number; bit i of `pattern` set where input i is an array.

    Arrays already right (the usual case) are passed as they are; anything else is broadcast and
    converted once. A flag (``call``) array may be bool or uint8 (both are bytes of 0 and 1);
    other flag arrays count as calls where nonzero.
    """
    want = _WANT.get((fam.name, dtype)) or _wants(fam, dtype)
    flag = fam.flag_index
    vals, pattern = [], 0
    for i, x in enumerate(inputs):
        tx = type(x)
        if tx is _ndarray and x.shape == shape and x.flags.c_contiguous and (
                x.dtype is want[i] or (i == flag and x.dtype is _BOOL)):
            vals.append(x)
            pattern |= 1 << i
        elif tx is float or tx is int or (tx is bool and i == flag):
            vals.append(((1 if x else 0) if i == flag else x))
        else:
            v, is_array = _convert(x, i == flag, want[i], shape, fam.inputs[i])
            vals.append(v)
            pattern |= is_array << i
    return vals, pattern


# ---- plans --------------------------------------------------------------------------------------
_CTYPES = {1: "uint8_t *", 4: "float *", 8: "double *"}
_ARRAY = object()   # a slot's state: the copy table moves an array into it
_NP_OF_SIZE = {1: np.uint8, 4: np.float32, 8: np.float64}


class _TickPlan:
    """Everything about one staged tick of `m` elements (a bucket) on one runner.

    Built for (op, dtype, bucket, runner index, [surface grid sizes and mode,] pattern) and cached
    in the context. Output staging holds each output block as rows of m, so a tick's results
    leave staging in one copy per block straight into a NumPy block of the same shape (the caller
    gets row views), while a pipeline chunk copies row by row into the caller's arrays.

    Two kinds (see the module docstring):

    * ``pattern=None``, a tick: every input has a slot of m elements and the kernel reads every
      input with stride 1; a single value is filled into its slot (only when it differs from what
      the slot holds). Nothing about the graph depends on the call, so it is the plan's own
      (``own_graph``), captured once and never re-pointed.
    * ``pattern`` an int, a pipeline chunk: bit i set where input i is an array; a single value
      takes one element of staging and stride 0, so the chunk's copies move arrays only. Such
      plans share their runner's graph and re-point it when bound.
    """

    def __init__(self, ctx, fam, dtype, m, index, grid_sizes, extra, own_graph, pattern=None):
        dts = DTYPE_CODE[dtype]
        self.fam, self.dtype, self.m, self.index = fam, dtype, m, index
        self.blocks, rows = _output_blocks(fam, dtype)
        self.rows = rows
        k = len(fam.inputs)
        self.pattern = pattern
        arrays = (1 << k) - 1 if pattern is None else pattern
        self.itemsizes = [1 if name == fam.flag else dtype.itemsize for name in fam.inputs]
        self.grid_sizes = tuple(int(s) for s in grid_sizes)
        ng = self.ng = len(grid_sizes)
        in_sizes = list(self.grid_sizes) + [s * (m if (arrays >> i) & 1 else 1) for i, s in enumerate(self.itemsizes)]
        self.layout = lay = plan_layout(in_sizes, [odt.itemsize * cnt * m for odt, cnt in self.blocks])
        chunk = ctx.staging_elements
        full = plan_layout(list(self.grid_sizes) + [s * chunk for s in self.itemsizes],
                           [odt.itemsize * cnt * chunk for odt, cnt in self.blocks])
        self.runner = r = ctx.runner(fam.name, dts, index, lay, full)
        # Staging is 64-byte aligned and a bucket a multiple of 16: the aligned variants apply.
        self.launcher = lau = ctx.launcher(fam.name, dts, m, aligned16=True)
        ctx.bundle.ensure_scratch(lau.kernel, lau.grid(m)[0])
        self.epoch = ctx.bundle.scratch_epoch
        # Small ticks: the kernel alone, on the staging's device mapping (see TickGraph).
        self.mapped = mapped = own_graph and m <= ctx.mapped_elements
        in_base, out_base = (r.in_mapped, r.out_mapped) if mapped else (r.in_dev, r.out_dev)
        dev_in = [in_base + o for o in lay.in_offsets]
        row_offsets = [lay.out_offsets[b] + row * m * self.blocks[b][0].itemsize for b, row in rows]
        self.row_sizes = [self.blocks[b][0].itemsize for b, _ in rows]
        strides = [(arrays >> i) & 1 for i in range(k)]
        self.row_offsets = row_offsets
        # The kernel's arguments with the outputs at `out`: staging's (this plan's graph) or a result
        # block's (runtime/fasttick.py).
        self.pack_outputs_at = lambda out: lau.args.pack(*fam.contract(
            dev_in[:ng], dev_in[ng:], strides, [out + o for o in row_offsets], m, extra))
        self.pack_outputs_at(out_base)
        self.args = lau.args.values.copy()
        # Inputs: grid arrays, then one row per element-wise input; dst fixed, src per call.
        self.k_in = ng + k
        self.in_dst = np.array([r.in_host + o for o in lay.in_offsets], dtype=np.uint64)
        self.t_in = _ffi.new("tg_hot_copy[]", self.k_in)
        for row in range(self.k_in):
            self.t_in[row].dst = _ffi.cast("void *", r.in_host + lay.in_offsets[row])
            self.t_in[row].bytes = self.grid_sizes[row] if row < ng else 0
        # Single values: written through a typed pointer (chunks) or filled into a NumPy view of
        # the slot (ticks), remembering what each slot holds so an unchanged value costs nothing.
        self.scalar = [_ffi.cast(_CTYPES[s], r.in_host + lay.in_offsets[ng + i]) for i, s in enumerate(self.itemsizes)]
        self.slots = None
        if pattern is None:
            self.slots = [np.frombuffer(r.in_view, dtype=_NP_OF_SIZE[s], count=m, offset=lay.in_offsets[ng + i])
                          for i, s in enumerate(self.itemsizes)]
        self.held = [None] * k     # per input: _ARRAY (the table copies it), or the value its slot holds
        self.staged_n = -1         # n of the last tick staged
        self.want = _wants(fam, dtype)
        self.flag = fam.flag_index
        # The copy table as flat words ({dst, src, bytes} per row): indexed stores are cheaper
        # than struct field access on the per-call path.
        self.t_src = _ffi.cast("void **", self.t_in)
        self.t_bytes = _ffi.cast("size_t *", self.t_in)
        # Outputs, tick: one copy per block. Pipeline chunk: one copy per output row.
        self.t_out = _ffi.new("tg_hot_copy[]", len(self.blocks))
        for b, (odt, cnt) in enumerate(self.blocks):
            self.t_out[b].src = _ffi.cast("void *", r.out_host + lay.out_offsets[b])
            self.t_out[b].bytes = odt.itemsize * cnt * m
        self.row_src = np.array([r.out_host + off for off in row_offsets], dtype=np.uint64)
        self.graph = r.new_graph(mapped) if own_graph else r.shared
        if own_graph:
            self.bind()
        # The C entry's side of a tick (runtime/fasttick.py): ticks of ops without a grid only.
        self.fast = plan_state(ctx, self) if ctx.tickers and own_graph and not ng else None

    def bind(self) -> None:
        """Make the plan's graph hold this plan's kernel arguments and layout (a no-op when it does)."""
        g = self.graph
        if g.holder is not self:
            self.launcher.args.values[:] = self.args
            g.hold(self.launcher, self.m, self.layout)
            g.holder = self

    def stage_tick(self, inputs, shape, grid, n: int) -> list | None:
        """A tick's inputs into the copy table (arrays: address and size of n elements) and
        single values into their slots (n elements; skipped when the slot holds the value already).

        Returns the arrays converted on the way (None if none), which must stay alive until the
        round trip has copied them.
        """
        src, nbytes, held, want, flag = self.t_src, self.t_bytes, self.held, self.want, self.flag
        r = self.runner
        if r.staged_by is not self:
            # Another plan's tick or chunk wrote this runner's staging since: the slots hold
            # whatever it left there.
            held[:] = [None] * len(held)
            r.staged_by = self
        row = 0
        for g in grid:
            src[3 * row + 1] = _from_buffer(g)
            row += 1
        keep = None
        same_n = n == self.staged_n
        self.staged_n = n
        try:
            for i, x in enumerate(inputs):
                tx = type(x)
                if tx is _ndarray and x.shape == shape and x.flags.c_contiguous and (
                        x.dtype is want[i] or (i == flag and x.dtype is _BOOL)):
                    j = 3 * (row + i)
                    src[j + 1] = _from_buffer(x)
                    if not same_n or held[i] is not _ARRAY:
                        nbytes[j + 2] = n * self.itemsizes[i]
                        held[i] = _ARRAY
                    continue
                if tx is float or tx is int or (tx is bool and i == flag):
                    v = (1 if x else 0) if i == flag else x
                else:
                    v, is_array = _convert(x, i == flag, want[i], shape, self.fam.inputs[i])
                    if is_array:
                        keep = [v] if keep is None else keep + [v]
                        j = 3 * (row + i)
                        src[j + 1] = _from_buffer(v)
                        nbytes[j + 2] = n * self.itemsizes[i]
                        held[i] = _ARRAY
                        continue
                h = held[i]
                # (value, count, sign): -0.0 == 0.0 but is not the same input
                if h is None or h is _ARRAY or h[0] != v or h[1] < n or (v == 0 and h[2] != math.copysign(1.0, v)):
                    nbytes[3 * (row + i) + 2] = 0
                    self.slots[i][:n] = v
                    held[i] = (v, n, math.copysign(1.0, v))
        except BaseException:
            # A call refused half way (an input that is not numbers) has rewritten some rows' copy
            # sizes and slots and not others: the next call trusts none of them.
            self.staged_n = -1
            held[:] = [None] * len(held)
            raise
        return keep

    def write_scalars(self, vals) -> None:
        """A chunk plan's single values, into their one-element slots."""
        for i, v in enumerate(vals):
            if not (self.pattern >> i) & 1:
                self.scalar[i][0] = v


def plan_for(ctx, fam, dtype, m, index, grid, extra, pattern=None) -> _TickPlan:
    """The cached plan for (fam, dtype, bucket m, runner index, grid sizes, extra, pattern); built if new.

    Tick plans (``pattern`` None) of element-wise ops get graphs of their own, a fixed set (one
    per bucket) that warm-up builds; a surface's, whose grid sizes vary, and pipeline chunks'
    share their runner's graph.
    """
    grid_sizes = tuple(g.nbytes for g in grid)
    key = (fam.name, dtype.char, m, index, grid_sizes, extra, pattern)
    plan = ctx.plans.get(key)
    if plan is None or ctx.bundle.scratch_epoch != plan.epoch:
        own_graph = pattern is None and not fam.n_grid
        if len(ctx.plans) >= 4096:
            # Only plans sharing a graph are dropped: the ones with graphs of their own are a
            # bounded set (buckets x ops), built by warm-up.
            for k in [k for k, p in ctx.plans.items() if p.graph is p.runner.shared]:
                del ctx.plans[k]
        plan = _TickPlan(ctx, fam, dtype, m, index, grid_sizes, extra, own_graph, pattern)
        ctx.plans[key] = plan
    return plan


# ---- calls --------------------------------------------------------------------------------------
def host_call(context, fam, dtype, shape, inputs, grid, extra) -> list | tuple:
    """Run `fam` on host inputs; NumPy outputs of `shape`, in the family's output order (a list or
    a tuple). `context()` gives the runtime context (called only when there is work, so an empty
    call touches no driver)."""
    n = 1
    for d in shape:
        n *= d
    fkey = (fam.name, dtype)
    spec, rows = _BLOCKS.get(fkey) or _output_blocks(fam, dtype)
    if n == 0:
        # Nothing to compute, but the arguments are refused as at any other size (and as the CPU
        # backend does): an empty result is no excuse for an array of strings.
        _checks.refuse_non_numbers(fam.inputs, inputs, fam.flag)
        return [_empty(shape, spec[b][0]) for b, _ in rows]
    ctx = context()
    if n > ctx.staging_elements:
        vals, pattern = host_inputs(fam, dtype, shape, n, inputs)
        blocks = [_empty((cnt, n), odt) for odt, cnt in spec]
        outs = [blocks[b][r] for b, r in rows]
        from tickgpu.runtime.pipeline import run_pipeline

        with ctx.lock:
            ctx.enter()
            run_pipeline(ctx, fam, dtype, n, vals, pattern, outs, grid, extra)
    else:
        key = (fam.name, dtype.char, n) if not grid else None
        with ctx.lock:
            ctx.enter()
            plan = ctx.ticks.get(key)
            if plan is None or plan.epoch != ctx.bundle.scratch_epoch:
                plan = plan_for(ctx, fam, dtype, bucket(n, ctx.staging_elements), 0, grid, extra)
                if key is not None:
                    if len(ctx.ticks) >= 8192:
                        ctx.ticks.clear()
                    ctx.ticks[key] = plan
            if plan.graph.holder is not plan:
                plan.bind()
            # Arrays converted on the way stay referenced until the round trip has copied them.
            converted = plan.stage_tick(inputs, shape, grid, n)
            m, t_out = plan.m, plan.t_out
            if len(spec) == 1:
                blk = _empty((spec[0][1], m), spec[0][0])
                t_out[0].dst = _from_buffer(blk)
                tick(ctx, plan, t_out, 1)
                outs = _ROWS[fkey](blk) if n == m else [row[:n] for row in blk]
            else:
                blocks = [_empty((cnt, m), odt) for odt, cnt in spec]
                for b, blk in enumerate(blocks):
                    t_out[b].dst = _from_buffer(blk)
                tick(ctx, plan, t_out, len(blocks))
                outs = [blocks[b][r, :n] for b, r in rows]
            del converted
    if len(shape) == 1:
        return outs
    return [o.reshape(shape) for o in outs]


def tick(ctx, plan, out_table, k_out: int) -> None:
    """One blocking replay: stage in, graph, wait, stage out -- a single native call."""
    r = plan.runner
    ctx.driver.roundtrip(plan.t_in, plan.k_in, plan.graph.exec, r.stream, out_table, k_out)
    r.stats["replays"] += 1
