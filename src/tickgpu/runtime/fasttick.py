"""The staged tick's C entry: `tickgpu.greeks` and `tickgpu.implied_vol` on NumPy arrays straight
into C (csrc/ext/fasttick.c).

A plain call of the usual kind -- NumPy arrays of one length and the requested dtype, single Python
numbers, ``call`` a bool or a bool array, ``backend`` "gpu" (or "auto" at a size the GPU takes), a
size whose tick plan exists -- is taken by a `Ticker` of the extension: it reads the arrays' own
structs, finds the plan the Python path built (same dict, same key, same epoch check), stages,
launches the graph, hands out rows of one block (a `Greeks` for greeks) while the GPU runs, and
waits, all in C. Every other call, and every call while a
resident kernel is open or ``TICKGPU_DISABLE_GPU`` is set, is answered None and runs the Python
path (staged.host_call), which defines what a call means; the C path gives the same bits.

Greeks and implied vol on CuPy arrays or PyTorch CUDA tensors -- 1-D arrays of one kind and
length, the call's dtype (``call`` bool or uint8), C-contiguous, on the context's device, no
gradient wanted, single Python numbers (``call`` a bool) mixed in as the NumPy call takes them --
are taken in C too: the single values written into the context's ConstantRing and copied to the
device on the launch's stream, the results made as `runtime.arrays.empty_outputs` makes them, one
launch on the stream the arrays' interface names (CuPy) or PyTorch's current stream, no wait, the
same bits as runtime/direct.py (`device_plan`).

On when the context has the native hot path (a real driver), off with ``TICKGPU_FAST_TICK=0`` or
where the extension did not build. Tests switch it on over a mock driver with `enable`.
"""
from __future__ import annotations

import ctypes
import os
import sys
import weakref

import numpy as np

from tickgpu import dispatch
from tickgpu._native import ffi, lib
from tickgpu.runtime.driver import CudaError
from tickgpu.runtime.graph import plan_layout
from tickgpu.runtime.launch import MAX_ELEMENTS_PER_LAUNCH, ArgBuffer, launch_desc

try:
    from tickgpu import _fasttick
except ImportError:   # a build without the extension: the Python path serves every call
    _fasttick = None

__all__ = ["enable", "install", "uninstall", "plan_state", "OPS"]

#: The operations whose ticks the C entry takes (each API module reads its entry from ``_fast``).
OPS = ("greeks", "implied_vol")
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def enable(ctx, begin: int, end: int, enter: int = 0, raise_error=None, launch: int = 0, htod: int = 0) -> bool:
    """Give `ctx` tickers: `begin` and `end` the addresses of C functions of the types of
    tg_hot_roundtrip_begin and tg_hot_roundtrip_end (csrc/tickgpu.h), `enter` of one of
    tg_hot_ctx_set_current's (0: none), `raise_error(status, cu_result, op)` raising the error of a
    failed call (default: the runtime's CudaError through `ctx.driver`), `launch` of one of
    tg_hot_launch_desc_run's (0: calls on GPU arrays take the Python path; else calls on CuPy
    arrays and PyTorch CUDA tensors are taken in C too, `device_plan`), `htod` of one of
    tg_hot_copy_htod_async's (0: such calls with single values mixed in take the Python path; else
    the values go through the context's ConstantRing, as there). Plans built afterwards get the C
    side (`plan_state`). False where the extension is missing."""
    if _fasttick is None:
        ctx.tickers = None
        return False
    from tickgpu.finance.greeks import GREEK_NAMES, Greeks
    from tickgpu.runtime import ops

    assert tuple(o for o, _ in ops.GREEKS.outputs) == GREEK_NAMES
    # greeks' results come back as the Greeks the Python path makes (greeks._greeks_of); implied
    # vol's as the (vols, status) tuple.
    result = {ops.GREEKS.name: (Greeks, GREEK_NAMES), ops.IMPLIED_VOL.name: (None, None)}

    raise_error = raise_error or _raiser(ctx.driver)
    env = dispatch._ENV_DATA if dispatch._ENV_DATA is not None else None
    tickers = {}
    for fam in (ops.GREEKS, ops.IMPLIED_VOL):
        lo, hi = dispatch.gpu_range().get(fam.name, (-1, None))
        chain = None
        for dt in (_F64, _F32):
            t = _fasttick.Ticker(ctx, ctx.bundle, ctx.lock, fam.name, dt.char, dt.type, dt, len(fam.inputs),
                                 fam.flag_index, env, dispatch._DISABLE_KEY if env is not None else b"",
                                 ops.RESIDENT, raise_error, begin, end, enter, ctx.ctx, lo, -1 if hi is None else hi,
                                 *result[fam.name])
            if launch:
                t.device(launch, device_plan(ctx, fam, dt), _device_outputs(ctx, fam, dt), ctx.ordinal,
                         MAX_ELEMENTS_PER_LAUNCH, len(fam.outputs), torch_spec, ctx.constants if htod else None,
                         htod)
            if chain is None:
                chain = t
            else:
                chain.then(t)
        tickers[fam.name] = chain
    ctx.tickers = tickers
    return True


def install(ctx) -> None:
    """Make `ctx`'s tickers (if it has none yet, and the driver has the native hot path) the ones
    the API calls."""
    if getattr(ctx, "tickers", None) is None and os.environ.get("TICKGPU_FAST_TICK", "1") != "0" \
            and getattr(ctx.driver, "has_hot_path", False) is True:
        begin, end, enter, launch, htod = (int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in (
            "tg_hot_roundtrip_begin", "tg_hot_roundtrip_end", "tg_hot_ctx_set_current", "tg_hot_launch_desc_run",
            "tg_hot_copy_htod_async"))
        enable(ctx, begin, end, enter, launch=launch, htod=htod)
    _publish(getattr(ctx, "tickers", None))


def uninstall() -> None:
    """The API's calls all take the Python path (no context, or tests)."""
    _publish(None)


def _publish(tickers) -> None:
    from tickgpu.finance import greeks, iv

    greeks._fast = tickers["greeks"].call if tickers else None
    iv._fast = tickers["implied_vol"].call if tickers else None


def plan_state(ctx, plan):
    """The C side of a tick plan (staged._TickPlan of an op without a grid): its copy tables,
    staging slots and output blocks, as `_fasttick.Plan`; for a tick on mapped staging of up to
    `RESULT_MAX_ELEMENTS`, also the op's result blocks and a graph of its own writing into each."""
    r, lay = plan.runner, plan.layout
    extra = ()
    if plan.mapped and plan.m <= min(RESULT_MAX_ELEMENTS, ctx.staging_elements):
        results, addresses = result_blocks(ctx, plan)
        graphs = []
        for address in addresses:
            plan.pack_outputs_at(address)
            g = r.new_graph(mapped=True)
            g.hold(plan.launcher, plan.m, lay)
            g.holder = _RESULTS
            graphs.append(g)
        plan.launcher.args.values[:] = plan.args   # the launcher's buffer as the plan's own graph has it
        extra = (lay.out_offsets, results, graphs)
    return _fasttick.Plan(
        int(ffi.cast("uintptr_t", plan.t_in)), plan.k_in, int(ffi.cast("uintptr_t", plan.t_out)), plan.m,
        plan.epoch, [r.in_host + lay.in_offsets[plan.ng + i] for i in range(len(plan.itemsizes))],
        plan.itemsizes, [odt.num for odt, _ in plan.blocks], [cnt for _, cnt in plan.blocks],
        [b for b, _ in plan.rows], [row for _, row in plan.rows], plan.graph, r, r.stream, *extra)


#: Ticks of up to this many elements (on mapped staging) write their results straight into
#: blocks of pinned, device-mapped memory that the results are handed out in, so nothing is
#: copied out of staging (2-3 us of a 1,024-option greeks tick). `RESULT_BLOCKS` such blocks per
#: op and dtype: a block is reused once no array of the results it holds is alive; a call that
#: finds all of them in use copies its results out of staging as any other.
RESULT_MAX_ELEMENTS = 1 << 14
RESULT_BLOCKS = 3
_RESULTS = object()   # the holder tag of a graph writing into a result block


def result_blocks(ctx, plan) -> tuple:
    """(`_fasttick.Results`, device addresses) of the op's result blocks at the plan's dtype, made
    on first use: each holds every output block of a tick of `RESULT_MAX_ELEMENTS` (or of the
    staging's elements, if fewer) laid out as staging lays them out. Each block is pinned,
    device-mapped memory of its own from the driver, freed when the block array is collected:
    after the context has dropped its plans and the last array handed out in it is gone (arrays
    may outlive the context; the finalizer holds the driver, never the context, which would keep
    itself alive through it)."""
    key = (plan.fam.name, plan.dtype)
    hit = ctx.result_blocks.get(key)
    if hit is None:
        most = min(RESULT_MAX_ELEMENTS, ctx.staging_elements)   # no tick is bigger than staging
        size = plan_layout([], [odt.itemsize * cnt * most for odt, cnt in plan.blocks]).out_bytes
        blocks, addresses = [], []
        for _ in range(RESULT_BLOCKS):
            d = ctx.driver
            ptr = d.mem_host_alloc(size)
            addresses.append(d.host_device_pointer(ptr))
            blocks.append(np.frombuffer((ctypes.c_char * size).from_address(ptr), dtype=np.uint8))
            weakref.finalize(blocks[-1], d.mem_free_host, ptr).atexit = False
        hit = ctx.result_blocks[key] = (_fasttick.Results(blocks), tuple(addresses))
        del blocks   # the Results object holds the only references: its test of a block's use
    return hit



def device_plan(ctx, fam, dtype):
    """The factory of `fam`'s launches on GPU arrays at `dtype` for the C entry:
    ``factory(n, stream, aligned, values)`` gives a `_fasttick.DevicePlan` -- the kernel direct.py
    would launch for those n elements on `stream` (its 16-byte-aligned variant where `aligned`),
    every parameter but the addresses packed once in an argument buffer of the plan's own (inputs
    read with stride 1, those of the bit mask `values` -- single values in the constants ring --
    with stride 0), a launch description over it, and where in it each input's and output's
    address goes."""
    from tickgpu.runtime.staged import DTYPE_CODE   # staged imports this module

    dts, k, k_out = DTYPE_CODE[dtype], len(fam.inputs), len(fam.outputs)

    def factory(n: int, stream: int, aligned: int, values: int = 0):
        lau = ctx.launcher(fam.name, dts, n, bool(aligned))
        grid = lau.grid(n)
        ctx.bundle.ensure_scratch(lau.kernel, grid[0])
        args = ArgBuffer(lau.kernel)
        strides = [0 if values >> i & 1 else 1 for i in range(k)]
        args.pack(*fam.contract((), [0] * k, strides, [0] * k_out, n, None))
        desc = launch_desc(ffi, lau.kernel, grid, stream, args.address)   # the C entry enters the context
        at = args.offsets   # contract order: (input, stride) pairs, the outputs, n
        return _fasttick.DevicePlan(int(ffi.cast("uintptr_t", desc)), int(args.values.ctypes.data),
                                    [at[2 * i] for i in range(k)], [at[2 * k + j] for j in range(k_out)],
                                    ctx.bundle.scratch_epoch, (desc, args, lau))

    return factory


def _device_outputs(ctx, fam, dtype):
    """``outputs(x, n, stream)``: (arrays, addresses) of `fam`'s results on the GPU array `x`'s
    library (arrays.empty_outputs: CuPy's, handed out again once dropped)."""
    from tickgpu.runtime.arrays import empty_outputs
    from tickgpu.runtime.direct import out_dtypes_of

    out_dtypes = out_dtypes_of(fam, dtype)

    def outputs(x, n: int, stream: int):
        made = empty_outputs(x, (n,), out_dtypes, ctx.ordinal, stream)
        return tuple(o for o, _ in made), tuple(p for _, p in made)

    return outputs


def torch_spec(dtype):
    """What the C entry needs of PyTorch (imported already: it asks only then) to read tensors of
    `dtype`: (torch.Tensor, the torch dtype, torch.bool, torch.uint8, the current raw stream's
    getter), or None where this torch has no CUDA (its tensors then take the Python path)."""
    torch = sys.modules.get("torch")
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    want = {_F64: "float64", _F32: "float32"}.get(np.dtype(dtype))
    if torch is None or raw is None or want is None:
        return None
    return torch.Tensor, getattr(torch, want), torch.bool, torch.uint8, raw


def _raiser(driver):
    def raise_error(status: int, code: int, op: str):
        if code:
            raise CudaError(op, driver.error_name(code), code, None)
        name = ffi.string(lib.tg_status_name(status)).decode()
        raise CudaError(op, name, None, None, "rejected by the native hot path")

    return raise_error
