"""The stream pipeline against the serial baseline and the PCIe bound (GPU only).

Greeks in float32 for 10**8 options (10**7 with ``quick``) resident in pinned host memory:
`tickgpu.runtime.Pipeline.run` (depth 2 and 3, chunks of 2**22 and 2**24) against
`Pipeline.serial` (the same chunks on one stream) and `tickgpu.greeks(..., backend="gpu")`
(the staged path, its own pageable outputs) on the same host arrays. Pinned copy bandwidth is
measured in the same run (one 256 MB copy each way, event-timed, median of 5), which gives the
bound no pipeline over PCIe can beat: max(bytes in / H2D bandwidth, bytes out / D2H bandwidth).

Targets: pipeline / serial >= 2.5x and >= 85% of the PCIe bound. Device memory stays under
~4 GB (three slots of 2**24 options), host memory under ~12 GB at 10**8 options.
"""
from __future__ import annotations

import ctypes

import numpy as np

from tickgpu.bench.common import target, time_call

__all__ = ["run_pipeline_bench", "copy_bandwidth"]

GREEK_KEYS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
_BW_BYTES = 256 << 20
N_FULL, N_QUICK = 100_000_000, 10_000_000
CHUNKS, DEPTHS = (1 << 22, 1 << 24), (2, 3)


class _Pinned:
    """Pinned host arrays from `pinned_alloc` (the caller owns them) or cuMemHostAlloc (freed here)."""

    def __init__(self, ctx, pinned_alloc):
        self.ctx, self.alloc, self.owned = ctx, pinned_alloc, []

    def array(self, n: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = n * dtype.itemsize
        if self.alloc is not None:
            raw = np.asarray(self.alloc(nbytes))
            if raw.dtype != np.uint8 or raw.size < nbytes:
                raise ValueError(f"pinned_alloc({nbytes}) returned {raw.dtype} x {raw.size}, want uint8 x {nbytes}")
            return raw[:nbytes].view(dtype)
        ptr = self.ctx.driver.mem_host_alloc(nbytes)
        self.owned.append(ptr)
        return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype)

    def close(self) -> None:
        for ptr in self.owned:
            self.ctx.driver.mem_free_host(ptr)
        self.owned = []


def copy_bandwidth(ctx, host: np.ndarray, repeats: int = 5) -> tuple[float, float]:
    """(H2D, D2H) bytes/s of one copy of `host` (pinned) each way, event-timed, median of `repeats`."""
    d = ctx.driver
    nbytes = host.nbytes
    dev = d.mem_alloc(nbytes)
    stream = d.stream_create()
    ev0, ev1 = d.event_create(flags=0), d.event_create(flags=0)
    src = host.__array_interface__["data"][0]
    try:
        res = []
        for copy in (lambda: d.memcpy_htod_async(dev, src, nbytes, stream),
                     lambda: d.memcpy_dtoh_async(src, dev, nbytes, stream)):
            copy()                        # first touch of the pages and the copy engine
            d.stream_synchronize(stream)
            times = []
            for _ in range(repeats):
                d.event_record(ev0, stream)
                copy()
                d.event_record(ev1, stream)
                d.event_synchronize(ev1)
                times.append(d.event_elapsed_ms(ev0, ev1) / 1e3)
            res.append(nbytes / float(np.median(times)))
        return res[0], res[1]
    finally:
        d.stream_synchronize(stream)
        d.event_destroy(ev0)
        d.event_destroy(ev1)
        d.stream_destroy(stream)
        d.mem_free(dev)


def _fill_inputs(pin: _Pinned, n: int, seed: int = 7) -> dict:
    """The benchmark's options (the ranges of tickgpu.bench.gpu.option_inputs), drawn block by block
    straight into pinned float32 arrays so no n-sized float64 temporary is made."""
    rng = np.random.default_rng(seed)
    ranges = {"spot": (50, 150), "strike": (50, 150), "t": (1 / 365, 3.0), "rate": (0.0, 0.05),
              "vol": (0.05, 0.9), "div": (0.0, 0.03)}
    out = {}
    block = 1 << 22
    for k, (lo, hi) in ranges.items():
        a = out[k] = pin.array(n, np.float32)
        for s in range(0, n, block):
            v = a[s:s + block]
            rng.random(v.size, dtype=np.float32, out=v)
            v *= np.float32(hi - lo)
            v += np.float32(lo)
    call = out["call"] = pin.array(n, np.bool_)
    for s in range(0, n, block):
        call[s:s + block] = rng.random(min(block, n - s), dtype=np.float32) < 0.5
    return out


def _max_rel_err(inputs: dict, outs: dict, n: int) -> float:
    """Largest relative difference to the CPU backend where |value| > 1e-3, on the first and last
    100,000 options (a check that the timed results are right, not an accuracy study)."""
    import tickgpu

    worst = 0.0
    for sl in (slice(0, min(n, 100_000)), slice(max(0, n - 100_000), n)):
        cpu = tickgpu.greeks(**{k: v[sl] for k, v in inputs.items()}, dtype=np.float32, backend="cpu")
        for k in GREEK_KEYS:
            c = getattr(cpu, k).astype(np.float64)
            g = outs[k][sl].astype(np.float64)
            m = np.abs(c) > 1e-3
            if m.any():
                worst = max(worst, float(np.max(np.abs(g[m] - c[m]) / np.abs(c[m]))))
    return worst


def _timed(fn, p, repeats: int) -> dict:
    """Median wall time of `repeats` calls (after one untimed), with the Pipeline's own stats."""
    stats = []

    def call():
        fn()
        if p is not None:
            stats.append(p.last)

    t = time_call(call, repeats=repeats, warmup=1)
    res = {"median_s": t.median_ns / 1e9, "min_s": t.min_ns / 1e9, "repeats": t.n}
    if stats:
        timed = stats[1:]   # the warm-up call's stats are not counted
        res["first_result_s"] = float(np.median([s.first_result_s for s in timed]))
        eff = [s.efficiency for s in timed if s.efficiency is not None]
        res["efficiency"] = float(np.median(eff)) if eff else None
        res["bytes_in"], res["bytes_out"] = timed[-1].bytes_in, timed[-1].bytes_out
    return res


def run_pipeline_bench(quick: bool, pinned_alloc=None) -> dict:
    """Measure the pipeline (see the module docstring); a dict of figures, ratios and targets.

    Parameters
    ----------
    quick : bool
        10**7 options instead of 10**8, and 3 timed repeats instead of 5.
    pinned_alloc : callable, optional
        ``pinned_alloc(nbytes) -> numpy uint8 array`` of page-locked host memory (e.g. from
        `tickgpu.memory.PinnedPool`), kept alive by the caller; default cuMemHostAlloc, freed here.

    Raises
    ------
    BackendUnavailable
        Where no GPU is usable.
    """
    import tickgpu
    import tickgpu.runtime as rt
    from tickgpu.runtime.streams import Pipeline

    n = N_QUICK if quick else N_FULL
    repeats = 3 if quick else 5
    ctx = rt.context()
    if not ctx.warm:
        rt.warmup()
    pin = _Pinned(ctx, pinned_alloc)
    res: dict = {"n": n, "dtype": "float32", "pinned": "pinned_alloc" if pinned_alloc else "cuMemHostAlloc"}
    try:
        bw_host = pin.array(_BW_BYTES, np.uint8)
        bw_host[:] = 1
        h2d, d2h = copy_bandwidth(ctx, bw_host)
        res["bandwidth"] = {"h2d_Bps": h2d, "d2h_Bps": d2h, "bytes": _BW_BYTES, "repeats": 5, "timing": "events"}
        inputs = _fill_inputs(pin, n)
        outs = {k: pin.array(n, np.float32) for k in GREEK_KEYS}
        bytes_in = sum(v.nbytes for v in inputs.values())
        bytes_out = sum(v.nbytes for v in outs.values())
        bound = max(bytes_in / h2d, bytes_out / d2h)
        res.update(bytes_in=bytes_in, bytes_out=bytes_out, pcie_bound_s=bound, options_per_s_bound=n / bound)

        serial, piped = {}, []
        for chunk in CHUNKS:
            with Pipeline("greeks", dtype=np.float32, chunk=chunk, depth=2, context=ctx) as p:
                r = _timed(lambda: p.serial(out=outs, h2d_bw=h2d, d2h_bw=d2h, **inputs), p, repeats)
            r.update(chunk=chunk, options_per_s=n / r["median_s"])
            serial[chunk] = r
            for depth in DEPTHS:
                with Pipeline("greeks", dtype=np.float32, chunk=chunk, depth=depth, context=ctx) as p:
                    r = _timed(lambda: p.run(out=outs, h2d_bw=h2d, d2h_bw=d2h, **inputs), p, repeats)
                r.update(chunk=chunk, depth=depth, options_per_s=n / r["median_s"],
                         vs_serial=serial[chunk]["median_s"] / r["median_s"],
                         efficiency_wall=bound / r["median_s"])
                piped.append(r)
        res["serial"] = list(serial.values())
        res["pipeline"] = piped
        res["max_rel_err_vs_cpu"] = _max_rel_err(inputs, outs, n)

        # The general entry point on the same host arrays (its outputs are its own, pageable).
        g = _timed(lambda: tickgpu.greeks(**inputs, dtype=np.float32, backend="gpu"), None, max(2, repeats - 2))
        g["options_per_s"] = n / g["median_s"]
        res["greeks_gpu_call"] = g

        best = min(piped, key=lambda r: r["median_s"])
        best_serial = min(serial.values(), key=lambda r: r["median_s"])
        res["best"] = {"chunk": best["chunk"], "depth": best["depth"], "median_s": best["median_s"],
                       "options_per_s": best["options_per_s"], "first_result_s": best["first_result_s"],
                       "vs_serial_same_chunk": best["vs_serial"],
                       "vs_best_serial": best_serial["median_s"] / best["median_s"],
                       "vs_greeks_gpu_call": g["median_s"] / best["median_s"],
                       "efficiency": best["efficiency_wall"]}
        res["targets"] = [
            target("pipeline / serial (same chunk)", best["vs_serial"], 2.5, "x"),
            target("pipeline vs PCIe bound", best["efficiency_wall"], 0.85, "fraction"),
        ]
    finally:
        pin.close()
    return res
