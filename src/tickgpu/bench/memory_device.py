"""Device-memory benchmarks: what one allocation costs, and how much memory a churn of mixed sizes wastes.

Per-call cost (alloc + free of the same bytes, single calls timed, median and p99 in ns) for:
DevicePool level 1 and level 2 through the Python API and through the C entry point PyTorch calls;
raw cuMemAlloc/cuMemFree and cuMemAllocFromPoolAsync/cuMemFreeAsync on a driver pool (both through
cuda.bindings, so they carry its Python overhead, ~1 us); PyTorch's caching allocator
(``torch.empty`` of the same bytes), if torch is importable.

Fragmentation churn: one deterministic workload of mixed sizes (256 B .. 64 MB) with interleaved
lifetimes, ending with the classic case (many 4 MB buffers, every other one freed, then one request
larger than any hole), run under the same cap against DevicePool and PyTorch's caching allocator:
failures, peak reserved, peak in use, utilization = peak in use / peak reserved. GPU only; the
whole run stays under ~10 GB of device memory.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tickgpu.bench.common import time_call

__all__ = ["run_device_pool", "churn_workload"]

MB = 1 << 20
CHURN_CAP = 8 << 30            # the cap both allocators run the churn under


def _timing(t) -> dict:
    return {"median_ns": t.median_ns, "p99_ns": t.p99_ns, "n": t.n}


def churn_workload(quick: bool, seed: int = 20261130) -> list[tuple[str, int, int]]:
    """The churn as a list of ("alloc", id, nbytes) / ("free", id, 0), the same on every run.

    Sizes are log-uniform in [256 B, 64 MB]; each buffer lives for a geometric number of later
    operations. Then the classic case: 4 MB buffers filling ~3.5 GB, every other one freed, and one
    request of 1 GB -- larger than any hole, so it fits only by reclaiming the holes' memory.
    """
    rng = np.random.default_rng(seed)
    n_ops = 1500 if quick else 6000
    ops, live, next_id = [], {}, 0
    for step in range(n_ops):
        for k in [k for k, end in live.items() if end <= step]:
            ops.append(("free", k, 0))
            del live[k]
        nbytes = int(np.exp(rng.uniform(np.log(256), np.log(64 * MB))))
        ops.append(("alloc", next_id, nbytes))
        live[next_id] = step + int(rng.geometric(1 / 40))
        next_id += 1
    for k in list(live):
        ops.append(("free", k, 0))
    classic = list(range(next_id, next_id + (3584 * MB) // (4 * MB)))
    ops += [("alloc", k, 4 * MB) for k in classic]
    ops += [("free", k, 0) for k in classic[::2]]
    ops.append(("alloc", classic[-1] + 1, 1 << 30))
    ops += [("free", k, 0) for k in classic[1::2]] + [("free", classic[-1] + 1, 0)]
    return ops


def _churn_pool(ctx, ops) -> dict:
    from tickgpu.memory import DevicePool, PoolError

    failures, held = 0, {}
    with DevicePool(ctx, cap_bytes=CHURN_CAP) as pool:
        for op, k, nbytes in ops:
            if op == "alloc":
                try:
                    held[k] = pool.alloc(nbytes)
                except PoolError:
                    failures += 1
            elif k in held:
                pool.free(held.pop(k))
        pool.flush()
        s = pool.stats()
    return {"failures": failures, "peak_reserved": s.peak_reserved, "peak_in_use": s.peak_in_use,
            "utilization": s.peak_in_use / s.peak_reserved if s.peak_reserved else None,
            "driver_allocs": s.driver_allocs, "flushes": s.flushes, "served": [s.served_slab, s.served_driver,
                                                                              s.served_vmm],
            "vmm_enabled": s.vmm_enabled, "vmm_reason": s.vmm_reason, "vmm_granule": s.vmm_granule,
            "vmm_granules_created": s.vmm_granules_created, "vmm_cache_hits": s.vmm_cache_hits,
            "vmm_driver_calls": s.vmm_driver_calls}


def _churn_torch(torch, ops) -> dict:
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CHURN_CAP / total)
    torch.cuda.reset_peak_memory_stats()
    failures, held = 0, {}
    try:
        for op, k, nbytes in ops:
            if op == "alloc":
                try:
                    held[k] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                except torch.cuda.OutOfMemoryError:
                    failures += 1
            else:
                held.pop(k, None)
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
    finally:
        held.clear()
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    peak_r, peak_a = st["reserved_bytes.all.peak"], st["allocated_bytes.all.peak"]
    return {"failures": failures, "peak_reserved": peak_r, "peak_in_use": peak_a,
            "utilization": peak_a / peak_r if peak_r else None, "segments_allocated": st.get("segment.all.allocated")}


def _alloc_costs(ctx, quick: bool, torch) -> dict:
    from tickgpu._native import ffi, lib
    from tickgpu.memory import DevicePool

    d, stream = ctx.driver, ctx.stream
    repeats = 300 if quick else 3000
    # level 2 (the driver's pool) between small_max and level 3's 2 MB; level 3 (VMM ranges) above
    sizes = {"level1": 4096, "level2": 3 * MB // 2, "level3": 4 * MB}
    out = {}
    with DevicePool(ctx, small_max=MB) as pool:
        for label, nbytes in sizes.items():
            out[f"devpool_{label}_python"] = _timing(time_call(lambda: pool.free(pool.alloc(nbytes, stream)),
                                                               repeats=repeats, warmup=50))
            ptr, raw = ffi.new("uintptr_t *"), pool._live()

            def c_entry():
                lib.tg_devpool_alloc(raw, nbytes, stream, ptr, ffi.NULL, ffi.NULL)
                lib.tg_devpool_free(raw, ptr[0], stream, ffi.NULL)

            out[f"devpool_{label}_c"] = _timing(time_call(c_entry, repeats=repeats, warmup=50))
            out[f"devpool_{label}_c"]["bytes"] = out[f"devpool_{label}_python"]["bytes"] = nbytes
        out["devpool_stats"] = dataclasses.asdict(pool.stats())
    for label, nbytes in sizes.items():
        out[f"cuMemAlloc_{label}"] = _timing(time_call(lambda: d.mem_free(d.mem_alloc(nbytes)),
                                                       repeats=max(50, repeats // 10), warmup=5))
        mp = d.mem_pool_create(ctx.device, 1 << 30)
        try:
            out[f"cuMemAllocFromPoolAsync_{label}"] = _timing(time_call(
                lambda: d.mem_free_async(d.mem_alloc_from_pool_async(nbytes, mp, stream), stream),
                repeats=repeats, warmup=50))
            d.stream_synchronize(stream)
        finally:
            d.mem_pool_destroy(mp)
        if torch is not None:
            out[f"torch_empty_{label}"] = _timing(time_call(
                lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda"), repeats=repeats, warmup=50))
    return out


def run_device_pool(quick: bool) -> dict:
    """Run both parts; returns {"alloc_free": {...}, "churn": {"devpool": ..., "torch": ...}, ...}.

    Raises BackendUnavailable (with the reason) where no GPU is usable.
    """
    import tickgpu.runtime as rt
    from tickgpu.errors import BackendUnavailable

    if not rt.available():
        raise BackendUnavailable(f"memory bench: no usable GPU ({rt.unavailable_reason()})")
    ctx = rt.context()
    ctx.enter()
    try:
        import torch

        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    ops = churn_workload(quick)
    res = {"alloc_free": _alloc_costs(ctx, quick, torch),
           "churn": {"ops": len(ops), "cap_bytes": CHURN_CAP, "devpool": _churn_pool(ctx, ops)},
           "torch": None if torch is None else torch.__version__}
    ctx.enter()
    if torch is not None:
        res["churn"]["torch"] = _churn_torch(torch, ops)
    return res
