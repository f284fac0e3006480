"""Host arrays larger than a staged chunk: a pipeline of chunks over three graph runners.

Full chunks alternate between runners 0 and 1, the last (shorter) chunk runs on runner 2, so
binding its size never touches a graph that earlier chunks of the same call are still to
replay. The whole loop is one native call, `tg_hot_pipeline` (csrc/hot/hot.c), with the GIL
released: for each chunk it waits for the runner's previous chunk, copies that chunk's results
out and this chunk's inputs in (one job for the copy threads), and launches the runner's graph;
so the host stages chunk k+1 and copies chunk k-1 out while the GPU runs chunk k.

Chunk plans give a single value one element of staging and stride 0 (their copies move arrays
only), so they depend on which inputs are arrays; they share their runner's graph and re-point it
when that changes -- a few driver calls against milliseconds of work.
"""
from __future__ import annotations

import numpy as np

from tickgpu._native import ffi as _ffi
from tickgpu._native import lib as _lib
from tickgpu.runtime.driver import CudaError
from tickgpu.runtime.staged import _TickPlan, addr, bucket, plan_for

__all__ = ["run_pipeline", "pipeline_plans", "run_chunks"]

_from_buffer = _ffi.from_buffer


def pipeline_plans(ctx, fam, dtype, n, pattern, grid, extra) -> tuple[list, _TickPlan, int]:
    """([plan on runner 0, plan on runner 1] for full chunks, the last chunk's plan, its size)."""
    chunk = ctx.staging_elements
    tail = n - (n - 1) // chunk * chunk
    full = [plan_for(ctx, fam, dtype, chunk, i, grid, extra, pattern) for i in (0, 1)]
    # The last chunk runs on a runner of its own, so binding its size never touches a graph
    # that earlier chunks of the same call are still to replay.
    last = plan_for(ctx, fam, dtype, bucket(tail, chunk), 2, grid, extra, pattern)
    return full, last, tail


def run_pipeline(ctx, fam, dtype, n, vals, pattern, outs, grid, extra) -> None:
    """More than one chunk: full chunks alternate between runners 0 and 1, the last runs on 2."""
    chunk = ctx.staging_elements
    full, last, tail = pipeline_plans(ctx, fam, dtype, n, pattern, grid, extra)
    plans = (full[0], full[1], last)
    for p in plans:
        p.bind()
        p.write_scalars(vals)
        p.runner.staged_by = p
    k_chunks = (n - 1) // chunk + 1
    idx = np.arange(k_chunks)
    which = np.where(idx < k_chunks - 1, idx % 2, 2)
    starts = (idx * chunk).astype(np.uint64)[:, None]
    sizes = np.full(k_chunks, chunk, dtype=np.uint64)
    sizes[-1] = tail
    sizes = sizes[:, None]
    # Copy tables for every chunk at once, as (chunk, row, {dst, src, bytes}) uint64.
    ng, k = last.ng, len(fam.inputs)
    src = np.zeros(ng + k, dtype=np.uint64)
    step = np.zeros(ng + k, dtype=np.uint64)
    fixed = np.zeros(ng + k, dtype=np.uint64)
    for row, g in enumerate(grid):
        src[row], fixed[row] = addr(g), g.nbytes
    for i, v in enumerate(vals):
        if (pattern >> i) & 1:
            src[ng + i], step[ng + i] = addr(v), last.itemsizes[i]
    t_in = np.empty((k_chunks, ng + k, 3), dtype=np.uint64)
    t_in[:, :, 0] = np.stack([p.in_dst for p in plans])[which]
    t_in[:, :, 1] = src + starts * step
    t_in[:, :, 2] = fixed + sizes * step
    row_size = np.array(last.row_sizes, dtype=np.uint64)
    out_base = np.array([addr(o) for o in outs], dtype=np.uint64)
    t_out = np.empty((k_chunks, len(outs), 3), dtype=np.uint64)
    t_out[:, :, 0] = out_base + starts * row_size
    t_out[:, :, 1] = np.stack([p.row_src for p in plans])[which]
    t_out[:, :, 2] = sizes * row_size
    p_in = _ffi.cast("tg_hot_copy *", _from_buffer(t_in))
    p_out = _ffi.cast("tg_hot_copy *", _from_buffer(t_out))
    chunks = _ffi.new("tg_hot_chunk[]", k_chunks)
    for c in range(k_chunks):
        p = plans[int(which[c])]
        ch = chunks[c]
        ch.copies_in, ch.n_in = p_in + c * (ng + k), ng + k
        ch.copies_out, ch.n_out = p_out + c * len(outs), len(outs)
        ch.graph_exec, ch.stream = p.graph.exec, p.runner.stream
    run_chunks(ctx.driver, chunks, k_chunks)
    for p, count in zip(plans, np.bincount(which, minlength=3)):
        p.runner.stats["replays"] += int(count)


def run_chunks(driver, chunks, k: int) -> None:
    """`tg_hot_pipeline` over `chunks` (GIL released), or the same steps through `driver`."""
    if getattr(driver, "has_hot_path", False):
        res = _ffi.new("int *")
        st = _lib.tg_hot_pipeline(chunks, k, res)
        if st != _lib.TG_OK:
            code = int(res[0])
            if code:
                raise CudaError("pipeline (cuGraphLaunch / cuStreamSynchronize)", driver.error_name(code), code)
            raise CudaError("pipeline", _ffi.string(_lib.tg_status_name(st)).decode(), None, None,
                            "rejected by the native hot path")
        return
    _pipeline_steps(driver, chunks, k)


def _pipeline_steps(driver, chunks, k: int) -> None:
    """What tg_hot_pipeline does, through the driver object (no native driver access here)."""
    from tickgpu._native import check

    collected = launched = 0
    try:
        for i in range(k):
            c = chunks[i]
            upto = -1
            for j in range(collected, i):
                if chunks[j].stream == c.stream:
                    upto = j
            for j in range(collected, upto + 1):
                driver.stream_synchronize(chunks[j].stream)
                check(_lib.tg_hot_stage(chunks[j].copies_out, chunks[j].n_out), "staging outputs")
            collected = max(collected, upto + 1)
            check(_lib.tg_hot_stage(c.copies_in, c.n_in), "staging inputs")
            driver.graph_launch(c.graph_exec, c.stream)
            launched = i + 1
        for j in range(collected, launched):
            driver.stream_synchronize(chunks[j].stream)
            check(_lib.tg_hot_stage(chunks[j].copies_out, chunks[j].n_out), "staging outputs")
        collected = launched
    except BaseException:
        # Leave no copy in flight into staging (the next call reuses it).
        for j in range(collected, launched):
            try:
                driver.stream_synchronize(chunks[j].stream)
            except Exception:
                pass
        raise
