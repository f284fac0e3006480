"""Host memory benchmark (GPU only): pinned vs pageable copies, mapped ticks, managed arrays.

Measured, each against what it competes with:

- H2D/D2H bandwidth from `PinnedPool` buffers against pageable NumPy arrays, 1 MB to 256 MB,
  event-timed (device time of the copy), median of many, as a fraction of the floor program's
  pinned bandwidth (``floor["H2D pinned 256MB"]``);
- a mapped zero-copy tick, against the floor's mapped kernel (1,024 floats read and written in place
  by ``y = x * 1.0001f + 1``, C launch + sync), wall clock: like for like, the bundle's ``scale``
  kernel (the same arithmetic) on two `MappedBuffer` s, launched and waited for from Python through
  the native hot path, with and without the new 1,024 floats copied into the mapped input and the
  result copied out as a fresh NumPy array; and the workload it stands for, `tickgpu.greeks` on
  1,024 float32 options from NumPy (the runtime runs ticks that small on mapped staging: seven
  inputs and ten outputs);
- the mapped-vs-copy crossover: the same call at 256..65,536 options with the context's mapped
  staging on (``mapped_elements`` above n) and off (0);
- managed arrays (256 MB float32; 64 MB quick) read by the device (a device-to-device copy out of
  the array, event-timed): first touch, steady state and after a CPU write of 1 MB, each with
  block prefetch, whole-array prefetch and no prefetch; steady state also against plain device
  memory.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

__all__ = ["run_host_memory"]

MB = 1 << 20


def _pct(values: list[float]) -> dict:
    v = sorted(values)
    return {"p50": statistics.median(v), "p99": v[min(len(v) - 1, int(0.99 * len(v)))], "n": len(v)}


class _Timer:
    """Device time of work queued on one stream, between two timing events."""

    def __init__(self, driver, stream):
        self.d, self.s = driver, stream
        self.start, self.end = driver.event_create(0), driver.event_create(0)   # 0: timing enabled

    def ms(self, queue) -> float:
        self.d.event_record(self.start, self.s)
        queue()
        self.d.event_record(self.end, self.s)
        self.d.event_synchronize(self.end)
        return self.d.event_elapsed_ms(self.start, self.end)

    def close(self):
        self.d.event_destroy(self.start)
        self.d.event_destroy(self.end)


def _bandwidth(ctx, timer, quick: bool, floor: dict) -> dict:
    from tickgpu.memory.host import PinnedPool

    d, s = ctx.driver, ctx.stream
    sizes = [1 * MB, 16 * MB, 64 * MB] if quick else [1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB]
    reps = 5 if quick else 25
    ref = {k: floor.get(f"{k} pinned 256MB", {}).get("GB/s") for k in ("H2D", "D2H")}
    pool = PinnedPool(ctx, arena_bytes=max(sizes))
    out: dict = {"backing": None, "sizes": {}}
    try:
        for size in sizes:
            buf = pool.acquire(size)
            buf.array()[:] = 1                           # touched: no first-use faults in the timing
            pageable = np.ones(size, dtype=np.uint8)
            dev = d.mem_alloc(size)
            row = {}
            try:
                cases = {"H2D pinned": lambda: d.memcpy_htod_async(dev, buf.ptr, size, s),
                         "D2H pinned": lambda: d.memcpy_dtoh_async(buf.ptr, dev, size, s),
                         "H2D pageable": lambda: d.memcpy_htod_async(dev, pageable.ctypes.data, size, s),
                         "D2H pageable": lambda: d.memcpy_dtoh_async(pageable.ctypes.data, dev, size, s)}
                for name, queue in cases.items():
                    timer.ms(queue)                      # warm
                    ms = statistics.median(timer.ms(queue) for _ in range(reps))
                    gbs = size / (ms * 1e-3) / 1e9
                    row[name] = {"GB/s": gbs, "ms_p50": ms}
                    floor_gbs = ref[name[:3]]
                    if floor_gbs:
                        row[name]["fraction_of_floor_pinned"] = gbs / floor_gbs
            finally:
                d.mem_free(dev)
                pool.release(buf, stream=s)
            out["sizes"][f"{size // MB}MB"] = row
        out["backing"] = pool.stats()["backing"]
        out["fallback_reason"] = pool.stats()["fallback_reason"]
    finally:
        pool.close()
    out["floor_GB/s"] = ref
    return out


def _greeks_p50_us(n: int, reps: int) -> dict:
    import tickgpu
    from tickgpu.bench.gpu import option_inputs

    x = option_inputs(np, n, np.float32)
    args = [x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call")]
    for _ in range(20):
        tickgpu.greeks(*args, dtype=np.float32, backend="gpu")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        tickgpu.greeks(*args, dtype=np.float32, backend="gpu")
        times.append((time.perf_counter() - t0) * 1e6)
    p = _pct(times)
    return {"p50_us": p["p50"], "p99_us": p["p99"], "n": p["n"]}


def _scale_tick(ctx, n: int, reps: int) -> dict:
    """The floor's mapped-kernel tick through tickgpu: `scale` on n mapped floats, launch + wait."""
    from tickgpu.bench.gpu import time_calls
    from tickgpu.memory.host import mapped

    lau = ctx.launcher("scale", "f32", n, False)
    src, dst = mapped(4 * n, ctx), mapped(4 * n, ctx)
    try:
        x_in, y_out = src.array(np.float32, (n,)), dst.array(np.float32, (n,))
        x = (np.arange(n, dtype=np.float32) * np.float32(0.5))
        x_in[:] = x
        lau.args.pack(src.device_ptr, dst.device_ptr, n)
        stream = ctx.stream

        def bare():
            lau.launch(n, stream, sync=True)

        def with_copies():
            np.copyto(x_in, x)
            lau.launch(n, stream, sync=True)
            return y_out.copy()

        res = {"kernel_only": time_calls(bare, reps, warmup=200),
               "numpy_in_out": time_calls(with_copies, reps, warmup=200), "variant": lau.kernel.variant}
        want = (x.astype(np.float64) * np.float64(np.float32(1.0001)) + 1.0).astype(np.float32)
        res["max_ulps"] = int(np.max(np.abs(y_out.view(np.int32) - want.view(np.int32))))
        return res
    finally:
        src.release(ctx.stream)
        dst.release(ctx.stream)


def _mapped(ctx, quick: bool, floor: dict) -> dict:
    reps = 300 if quick else 3000
    tick = _greeks_p50_us(1024, reps)
    out = {"greeks_f32_numpy_1024": tick, "mapped_elements": ctx.mapped_elements}
    if any(k.spec.family == "scale" for k in ctx.bundle.kernels.values()):
        out["scale_1024"] = _scale_tick(ctx, 1024, 3 * reps)
    fl = floor.get("zero-copy mapped kernel 1024 floats")
    if fl:
        out["floor_mapped_1024_p50_us"] = fl["p50_us"]
        out["over_floor_mapped"] = tick["p50_us"] / fl["p50_us"]
        if "scale_1024" in out:
            for how in ("kernel_only", "numpy_in_out"):
                out["scale_1024"][f"{how}_over_floor_mapped"] = out["scale_1024"][how]["p50_us"] / fl["p50_us"]
    # Crossover: the same call with mapped staging forced on, then off. Plans bind the choice when
    # built, so they are rebuilt after each change; the setting is restored at the end.
    keep = ctx.mapped_elements
    cross = {}
    try:
        for n in (256, 1024, 4096, 16384, 65536):
            row = {}
            for label, setting in (("mapped", max(n, 16)), ("copies", 0)):
                with ctx.lock:
                    ctx.mapped_elements = setting
                    ctx.reset_plans()
                row[label] = _greeks_p50_us(n, reps // 3)
            row["copies_over_mapped"] = row["copies"]["p50_us"] / row["mapped"]["p50_us"]
            cross[n] = row
    finally:
        with ctx.lock:
            ctx.mapped_elements = keep
            ctx.reset_plans()
    out["crossover"] = cross
    faster = [n for n, r in cross.items() if r["copies_over_mapped"] > 1]
    out["mapped_faster_up_to"] = max(faster) if faster else None
    return out


def _managed(ctx, timer, quick: bool) -> dict:
    from tickgpu.memory.managed import ManagedArray

    d, s = ctx.driver, ctx.stream
    nbytes = (64 if quick else 256) * MB
    n = nbytes // 4
    reps = 3 if quick else 10
    sink = d.mem_alloc(nbytes)
    plain = d.mem_alloc(nbytes)
    out: dict = {"bytes": nbytes}
    try:
        def read(ptr):
            return lambda: d.memcpy_dtod_async(sink, ptr, nbytes, s)

        timer.ms(read(plain))
        out["plain_device_ms"] = statistics.median(timer.ms(read(plain)) for _ in range(reps))
        for how in ("blocks", "whole", "none"):
            a = ManagedArray(n, np.float32, context=ctx)
            out["mode"], out["reason"] = a.mode, a.reason
            try:
                a.host[:] = 1.0
                a.mark_dirty(0, n)

                def tick():
                    t0 = time.perf_counter()
                    ms = timer.ms(lambda: (a.prefetch(stream=s, blocks=how == "blocks") if how != "none" else 0,
                                           read(a.dev)()))
                    return ms, (time.perf_counter() - t0) * 1e3

                first = tick()
                steady = [tick() for _ in range(reps)]
                after = []
                for k in range(reps):
                    lo = (k * 7919 * 4096) % (n - MB // 4)
                    a.write(lo, np.full(MB // 4, 2.0 + k, dtype=np.float32))   # 1 MB from the CPU
                    after.append(tick())
                out[how] = {"first_touch_ms": first[0], "first_touch_wall_ms": first[1],
                            "steady_ms": statistics.median(t[0] for t in steady),
                            "steady_wall_ms": statistics.median(t[1] for t in steady),
                            "after_cpu_write_ms": statistics.median(t[0] for t in after),
                            "after_cpu_write_wall_ms": statistics.median(t[1] for t in after)}
                out[how]["steady_over_plain"] = out[how]["steady_ms"] / out["plain_device_ms"]
            finally:
                a.close()
    finally:
        d.mem_free(sink)
        d.mem_free(plain)
    return out


def run_host_memory(quick: bool, floor: dict) -> dict:
    """Run the host memory benchmark on the runtime's GPU.

    Parameters
    ----------
    quick : bool
        Fewer sizes and repetitions, 64 MB managed arrays (a smoke run, seconds).
    floor : dict
        `tickgpu.bench.gpu.parse_floor`'s figures of the native floor programs ({} if none):
        "H2D pinned 256MB"/"D2H pinned 256MB" {"GB/s"} and "zero-copy mapped kernel 1024 floats"
        {"p50_us"} are used where present.

    Returns
    -------
    dict
        "bandwidth", "mapped" and "managed" sections (see the module docstring); times in ms or
        us as their keys say, bandwidths in GB/s (1e9 bytes per second).

    Raises
    ------
    BackendUnavailable
        No GPU backend here.
    """
    import tickgpu.runtime as rt

    ctx = rt.context()
    rt.warmup()
    ctx.enter()
    timer = _Timer(ctx.driver, ctx.stream)
    try:
        res = {"bandwidth": _bandwidth(ctx, timer, quick, floor)}
        res["mapped"] = _mapped(ctx, quick, floor)
        res["managed"] = _managed(ctx, timer, quick)
    finally:
        timer.close()
    return res
