"""`tickgpu bench --suite gpu`: the GPU backend side by side with what a user would otherwise run.

Everything is measured in one run on one machine: the floor programs' figures (parsed from their output,
passed with --floor), the device copy bandwidth, tickgpu's kernels and hot path, PyTorch eager and CuPy
versions of the same work, and the CPU backend. Torch and CuPy are imported here only, never by the
library. Results are printed and saved as JSON (date, GPU, commit, figures, ratios).
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import tickgpu
from tickgpu.bench.common import jsonable, run_sections, write_results
from tickgpu.bench.common import machine_info as host_info

GREEK_KEYS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


# ---- timing ---------------------------------------------------------------------------------------

def stats_us(samples_ns) -> dict:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {
        "n": int(a.size),
        "p50_us": float(np.percentile(a, 50)),
        "p99_us": float(np.percentile(a, 99)),
        "p999_us": float(np.percentile(a, 99.9)),
        "min_us": float(a.min()),
    }


def time_calls(fn, repeats: int, warmup: int = 50) -> dict:
    for _ in range(warmup):
        fn()
    out = np.empty(repeats, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(repeats):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return stats_us(out)


def time_device(fn, sync, repeats: int = 10, warmup: int = 2) -> float:
    """Median seconds of fn() followed by a device synchronisation (for work of milliseconds)."""
    for _ in range(warmup):
        fn()
        sync()
    ts = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


# ---- floor ----------------------------------------------------------------------------------------

_FLOOR_RE = re.compile(r"^NATIVE (.+?)\s+p50=\s*([\d.]+) us\s+p99=\s*([\d.]+) us")
_MAILBOX_RE = re.compile(r"^MAILBOX n=\s*(\d+) round trip p50=\s*([\d.]+) us p99=\s*([\d.]+) us")
_BW_RE = re.compile(r"^NATIVE (.+?)\s+([\d.]+) (GB/s|us/launch)")


def parse_floor(path: str | None) -> dict:
    """The floor programs' figures from their output at `path` ({} if there is none).

    The output may hold several runs of the programs (scripts/device-check runs them FLOOR_RUNS
    times). A figure measured more than once keeps its best run -- the lowest p50 (with that run's
    p99), the highest bandwidth, the lowest launch cost -- and lists every run's value under
    ``"runs"``. Why: some figures are bimodal between processes. On an H200 host the graph round
    trip of 1,024 floats measured 11.6-12.9 us p50 in some processes of the same program and
    18.3-18.4 us in others, about half each (benchmarks/results/h200-2026-11-30-m/). Compared with one
    run, a ratio could halve or double with the process the floor happened to land in; against the
    best run it is the conservative one.
    """
    if not path or not Path(path).is_file():
        return {}
    seen: dict = {}
    for line in Path(path).read_text().splitlines():
        if m := _FLOOR_RE.match(line):
            key, fig = m.group(1).strip(), {"p50_us": float(m.group(2)), "p99_us": float(m.group(3))}
        elif m := _MAILBOX_RE.match(line):
            key = f"mailbox round trip {m.group(1)} floats"
            fig = {"p50_us": float(m.group(2)), "p99_us": float(m.group(3))}
        elif m := _BW_RE.match(line):
            key, fig = m.group(1).strip(), {m.group(3): float(m.group(2))}
        else:
            continue
        seen.setdefault(key, []).append(fig)
    floor: dict = {}
    for key, figs in seen.items():
        unit = next(iter(figs[0]))
        best = (max if unit == "GB/s" else min)(figs, key=lambda f: f[unit])
        floor[key] = dict(best)
        if len(figs) > 1:
            floor[key]["runs"] = [f[unit] for f in figs]
    return floor


#: The graph round trip of 1,024 floats over the zero-copy mapped kernel of as many, same runs: about
#: 1.0-1.1 in the fast mode, 1.7-1.8 in the slow one (h200-2026-11-30-m, h200-2026-12-01-a).
SLOW_GRAPH_RATIO = 1.4


def floor_graph_mode(floor: dict) -> str | None:
    """"fast" or "slow": the mode of the best run of the floor's graph round trip (1,024 floats),
    judged against the zero-copy mapped kernel of 1,024 floats, whose work the graph does plus two
    4 KB copies; None without both figures. A run whose every process landed in the slow mode gives
    ratios to the floor graph that are not comparable with those of runs in the fast mode."""
    graph = floor.get("graph H2D+kernel+D2H 1024 floats", {}).get("p50_us")
    mapped = floor.get("zero-copy mapped kernel 1024 floats", {}).get("p50_us")
    if not graph or not mapped:
        return None
    return "slow" if graph > SLOW_GRAPH_RATIO * mapped else "fast"


def note_floor_mode(t: dict, floor: dict) -> None:
    """Put the floor graph's mode in a suite's targets, with a note (and a printed warning) when it
    is the slow one."""
    mode = floor_graph_mode(floor)
    if mode is None:
        return
    t["floor_graph_mode"] = mode
    if mode == "slow":
        t["floor_graph_note"] = ("every run of the floor graph was in its slow mode: ratios to it are "
                                 "not comparable with runs in the fast mode")
        print(f"[floor] WARNING: {t['floor_graph_note']}", flush=True)


# ---- inputs ---------------------------------------------------------------------------------------

def option_inputs(xp, n: int, dtype, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    host = {
        "spot": rng.uniform(50, 150, n),
        "strike": rng.uniform(50, 150, n),
        "t": rng.uniform(1 / 365, 3.0, n),
        "rate": rng.uniform(0.0, 0.05, n),
        "vol": rng.uniform(0.05, 0.9, n),
        "div": rng.uniform(0.0, 0.03, n),
    }
    out = {k: xp.asarray(v.astype(dtype)) for k, v in host.items()}
    out["call"] = xp.asarray(rng.random(n) < 0.5)
    return out


def greeks_bytes(n: int, itemsize: int) -> int:
    return n * (6 * itemsize + 1 + 10 * itemsize)


# ---- competitors ----------------------------------------------------------------------------------

def torch_greeks(torch, spot, strike, t, rate, vol, div, call):
    """BSM price and the ten greeks in PyTorch eager (what a user would write)."""
    sqrt_t = torch.sqrt(t)
    vs = vol * sqrt_t
    d1 = (torch.log(spot / strike) + (rate - div + 0.5 * vol * vol) * t) / vs
    d2 = d1 - vs
    nd1 = torch.exp(-0.5 * d1 * d1) / math.sqrt(2 * math.pi)
    df_r = torch.exp(-rate * t)
    df_q = torch.exp(-div * t)
    w = torch.where(call, 1.0, -1.0).to(spot.dtype)
    cdf = lambda x: 0.5 * torch.special.erfc(-x / math.sqrt(2))  # noqa: E731
    nw1, nw2 = cdf(w * d1), cdf(w * d2)
    price = w * (spot * df_q * nw1 - strike * df_r * nw2)
    delta = w * df_q * nw1
    gamma = df_q * nd1 / (spot * vs)
    vega = spot * df_q * nd1 * sqrt_t
    theta = -spot * df_q * nd1 * vol / (2 * sqrt_t) + w * (div * spot * df_q * nw1 - rate * strike * df_r * nw2)
    rho = w * strike * t * df_r * nw2
    phi = -w * spot * t * df_q * nw1
    vanna = -df_q * nd1 * d2 / vol
    volga = vega * d1 * d2 / vol
    charm = w * div * df_q * nw1 - df_q * nd1 * (2 * (rate - div) * t - d2 * vs) / (2 * t * vs)
    return price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm


CUPY_GREEKS_SRC = r"""
    T sq = sqrt(t); T vs = vol * sq;
    T d1 = (log(spot / strike) + (rate - div + (T)0.5 * vol * vol) * t) / vs; T d2 = d1 - vs;
    T nd1 = exp((T)-0.5 * d1 * d1) * (T)0.3989422804014327;
    T dfr = exp(-rate * t), dfq = exp(-div * t); T w = call ? (T)1 : (T)-1;
    T nw1 = (T)0.5 * erfc(-w * d1 * (T)0.7071067811865476), nw2 = (T)0.5 * erfc(-w * d2 * (T)0.7071067811865476);
    price = w * (spot * dfq * nw1 - strike * dfr * nw2); delta = w * dfq * nw1;
    gamma = dfq * nd1 / (spot * vs); vega = spot * dfq * nd1 * sq;
    theta = -spot * dfq * nd1 * vol / ((T)2 * sq) + w * (div * spot * dfq * nw1 - rate * strike * dfr * nw2);
    rho = w * strike * t * dfr * nw2; phi = -w * spot * t * dfq * nw1;
    vanna = -dfq * nd1 * d2 / vol; volga = vega * d1 * d2 / vol;
    charm = w * div * dfq * nw1 - dfq * nd1 * ((T)2 * (rate - div) * t - d2 * vs) / ((T)2 * t * vs);
"""


# ---- sections -------------------------------------------------------------------------------------

def device_copy_bandwidth(cp, nbytes: int) -> float:
    """Device-to-device copy, bytes read + written per second (same counting as the kernels)."""
    a = cp.empty(nbytes // 4, dtype=cp.float32)
    b = cp.empty_like(a)
    a.fill(1)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = []
    for _ in range(10):
        start.record()
        cp.copyto(b, a)
        stop.record()
        stop.synchronize()
        best.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return 2 * nbytes / float(np.median(best[2:]))


STREAM_CALLS = 5
#: Seconds of calls queued back to back before, and while, the sustained figures are timed. The
#: board's power limit is enforced by a controller that takes about a second to settle: measured
#: on an H200 (benchmarks/results/h200-2026-12-01-b), blocks of 0.5 s alternated by ~12% with its
#: swings whatever ran in them, while blocks of 1.5 s after 1.5 s of the same work repeated to
#: 0.1%. Float64 greeks then run at the 700 W limit (SM clock ~1.5 GHz); a copy does not reach it.
SUSTAINED_S = 1.2


def _board_row(line: str) -> tuple[float, float] | None:
    try:
        clock, watts = (float(v) for v in line.split(","))
        return clock, watts
    except ValueError:
        return None


def board_sampler(bus_id: str | None = None):
    """nvidia-smi sampling the GPU's SM clock (MHz) and instantaneous power (W) every 50 ms, started
    and its first sample read, so that what follows is sampled (None without nvidia-smi).

    ``power.draw`` is an average over the last second on current drivers, which would mix in what
    ran before; ``power.draw.instant`` is asked for first. `bus_id` (PCI bus id) picks the GPU.
    """
    for power in ("power.draw.instant", "power.draw"):
        try:
            p = subprocess.Popen(["nvidia-smi", f"--query-gpu=clocks.sm,{power}", "--format=csv,noheader,nounits",
                                  "-lms", "50", *(["-i", bus_id] if bus_id else [])],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return None
        if _board_row(p.stdout.readline()):
            return p
        p.kill()
        p.wait()
    return None


def board_samples(sampler) -> dict:
    """Stop `sampler` (from `board_sampler`; None gives {}); medians of its samples."""
    if sampler is None:
        return {}
    sampler.terminate()
    out, _ = sampler.communicate(timeout=10)
    rows = [r for r in map(_board_row, out.splitlines()) if r]
    if not rows:
        return {}
    return {"sm_clock_mhz": float(np.median([r[0] for r in rows])), "power_w": float(np.median([r[1] for r in rows])),
            "board_samples": len(rows)}


def sustained_calls(seconds_per_call: float, seconds: float = SUSTAINED_S) -> int:
    """How many calls of about `seconds_per_call` fill `seconds` (at least 20)."""
    return max(20, math.ceil(seconds / max(seconds_per_call, 1e-9)))


def sustained(cp, fn, calls: int, warm: int) -> dict:
    """Seconds per call of `calls` calls of `fn` queued back to back on CuPy's current stream after
    `warm` more (timed by events around the `calls`), and the SM clock and power sampled while
    they all run (medians; `board_sampler`)."""
    sampler = board_sampler(cp.cuda.Device().pci_bus_id)
    try:
        for _ in range(warm):
            fn()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
    finally:
        state = board_samples(sampler)
    return {"s": cp.cuda.get_elapsed_time(start, stop) / 1e3 / calls, "calls": calls, **state}


def cupy_greeks_kernel(cp):
    """The same greeks as one CuPy ElementwiseKernel (`CUPY_GREEKS_SRC`, generic over the dtype T):
    what a CuPy user would write, for the suite's comparisons."""
    return cp.ElementwiseKernel(
        "T spot, T strike, T t, T rate, T vol, T div, bool call",
        "T price, T delta, T gamma, T vega, T theta, T rho, T phi, T vanna, T volga, T charm",
        CUPY_GREEKS_SRC, "cupy_bsm_greeks")


def bench_throughput(cp, torch, n: int, copy_bw: float) -> dict:
    """Greeks over `n` options on the GPU (CuPy arrays in and out), against the device copy bandwidth.

    ``fraction_of_copy_bw``: one call and its wait, wall time (host share included, GPU idle
    meanwhile); ``fraction_of_copy_bw_stream``: calls queued back to back (the host share hidden
    behind the previous kernel: a stream of batches); ``fraction_of_copy_bw_events``: one call
    between two events; ``fraction_of_copy_bw_kernel_only``: the chosen variant launched alone;
    ``fraction_of_copy_bw_sustained``: calls back to back for SUSTAINED_S seconds after as long
    again, against copies of the same bytes timed the same way (`sustained`), with the SM clock
    and power sampled during each: the board settled at its power limit.
    """
    res = {}
    sync = cp.cuda.runtime.deviceSynchronize
    for dtype, name in ((np.float32, "f32"), (np.float64, "f64")):
        x = option_inputs(cp, n, dtype)
        nbytes = greeks_bytes(n, np.dtype(dtype).itemsize)
        t_tick = time_device(lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu"), sync)
        # A stream of calls (repricing batch after batch): calls queued back to back, one wait at
        # the end, so each call's host share overlaps the previous call's kernel.
        def stream_of_calls(k=STREAM_CALLS):
            for _ in range(k):
                tickgpu.greeks(**x, dtype=dtype, backend="gpu")
        t_stream = time_device(stream_of_calls, sync, repeats=5) / STREAM_CALLS
        # The same call timed by events on the stream it runs on (CuPy's, the legacy default
        # stream): device time alone, against the wall time above which adds the host's share.
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        t_events = []
        for _ in range(10):
            ev0.record()
            tickgpu.greeks(**x, dtype=dtype, backend="gpu")
            ev1.record()
            ev1.synchronize()
            t_events.append(cp.cuda.get_elapsed_time(ev0, ev1) / 1e3)
        t_event = float(np.median(t_events[2:]))
        kernel_only = _kernel_only(cp, x, dtype, n)
        # Each call's results are dropped at once: CuPy's pool hands their memory to the next call
        # in stream order, so the queue holds one set of outputs, not a hundred.
        k = sustained_calls(t_stream)
        calls_sustained = sustained(cp, lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu"), k, k)
        src = cp.ones(nbytes // 16, dtype=cp.float64)
        dst = cp.empty_like(src)
        copy_bytes = 2 * src.nbytes          # read + written, as the kernel's bytes are counted
        k = sustained_calls(copy_bytes / copy_bw)
        copy_sustained = sustained(cp, lambda: cp.copyto(dst, src), k, k)
        copy_sustained["Bps"] = copy_bytes / copy_sustained["s"]
        del src, dst
        # correctness on a slice against the CPU backend
        g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
        sl = slice(0, 100_000)
        ref = tickgpu.greeks(**{k: cp.asnumpy(v[sl]) for k, v in x.items()}, dtype=dtype, backend="cpu")
        worst = max(
            float(np.nanmax(np.abs(cp.asnumpy(getattr(g, k)[sl]) - getattr(ref, k))
                            / np.maximum(np.abs(getattr(ref, k)), 1e-30 if name == "f64" else 1e-6)))
            for k in GREEK_KEYS
        )
        # Against each greek's largest magnitude: element-wise relative differences are large where
        # a greek crosses zero or a far out-of-the-money price is a difference of two tail terms.
        worst_scaled = max(
            float(np.nanmax(np.abs(cp.asnumpy(getattr(g, k)[sl]) - getattr(ref, k)))
                  / np.nanmax(np.abs(getattr(ref, k))))
            for k in GREEK_KEYS
        )
        del g
        ek = cupy_greeks_kernel(cp)
        t_cupy = time_device(lambda: ek(x["spot"], x["strike"], x["t"], x["rate"], x["vol"], x["div"], x["call"]), sync)
        tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
        t_torch = time_device(lambda: torch_greeks(torch, **tx), torch.cuda.synchronize, repeats=5)
        del tx
        res[name] = {
            "n": n,
            "bytes": nbytes,
            "tickgpu_s": t_tick,
            "tickgpu_GBps": nbytes / t_tick / 1e9,
            "fraction_of_copy_bw": nbytes / t_tick / copy_bw,
            "tickgpu_stream_s": t_stream,
            "fraction_of_copy_bw_stream": nbytes / t_stream / copy_bw,
            "tickgpu_event_s": t_event,
            "fraction_of_copy_bw_events": nbytes / t_event / copy_bw,
            "kernel_only_event_s": kernel_only["s"],
            "kernel_only_variant": kernel_only["variant"],
            "fraction_of_copy_bw_kernel_only": nbytes / kernel_only["s"] / copy_bw,
            "sustained": calls_sustained,
            "copy_sustained": copy_sustained,
            "fraction_of_copy_bw_sustained": nbytes / calls_sustained["s"] / copy_sustained["Bps"],
            "cupy_elementwise_s": t_cupy,
            "torch_eager_s": t_torch,
            "speedup_vs_torch": t_torch / t_tick,
            "speedup_vs_cupy": t_cupy / t_tick,
            "max_rel_err_vs_cpu": worst,
            "max_err_over_scale_vs_cpu": worst_scaled,
        }
        del x
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    return res


def _kernel_only(cp, x: dict, dtype, n: int) -> dict:
    """The variant the runtime picks for `x`, launched alone on preallocated outputs, event-timed.

    Against the whole call timed the same way, this separates the kernel's own bandwidth from
    what the call adds around it (output allocation, argument checks, scalar constants).
    """
    from tickgpu.runtime import context

    ctx = context()
    lau = ctx.launcher("greeks", "f32" if np.dtype(dtype) == np.float32 else "f64", n, True)
    outs = [cp.empty(n, dtype=dtype) for _ in GREEK_KEYS]
    values = []
    for k in ("spot", "strike", "t", "rate", "vol", "div"):
        values += [x[k].data.ptr, 1]
    values += [x["call"].data.ptr, 1, *(o.data.ptr for o in outs), n]
    lau.args.pack(*values)
    ctx.bundle.ensure_scratch(lau.kernel, lau.grid(n)[0])
    stream = cp.cuda.get_current_stream()
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(12):
        ev0.record(stream)
        lau.launch(n, stream.ptr)
        ev1.record(stream)
        ev1.synchronize()
        times.append(cp.cuda.get_elapsed_time(ev0, ev1) / 1e3)
    del outs
    return {"s": float(np.median(times[2:])), "variant": lau.kernel.variant}


def bench_latency(torch, repeats: int) -> dict:
    n = 1024
    x = option_inputs(np, n, np.float32, seed=11)
    res = {}
    res["tickgpu_greeks_f32_numpy_1024"] = time_calls(
        lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), repeats)
    # The same call with the C entry off (runtime/fasttick.py): the Python path it replaces.
    from tickgpu.finance import greeks as greeks_api
    from tickgpu.runtime import context

    tickers = context().tickers
    res["fast_entry"] = tickers is not None
    if tickers is not None:
        count = lambda: sum(t.calls for t in (tickers["greeks"], tickers["greeks"].other))  # noqa: E731
        c0 = count()
        tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
        res["fast_entry_took_the_call"] = count() == c0 + 1
        saved, greeks_api._fast = greeks_api._fast, None
        try:
            res["tickgpu_greeks_f32_numpy_1024_python_path"] = time_calls(
                lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), repeats)
        finally:
            greeks_api._fast = saved
    x64 = option_inputs(np, n, np.float64, seed=11)
    res["tickgpu_greeks_f64_numpy_1024"] = time_calls(
        lambda: tickgpu.greeks(**x64, dtype=np.float64, backend="gpu"), repeats)
    res["cpu_backend_greeks_f64_numpy_1024"] = time_calls(
        lambda: tickgpu.greeks(**x64, dtype=np.float64, backend="cpu"), repeats)
    # The same NumPy arrays bound once (tickgpu.runtime.bind_greeks): a tick loop's call, with the
    # checks done at binding; each call reads the arrays' current contents.
    from tickgpu.runtime import bind_greeks

    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    bound = bind_greeks(*(x[k] for k in names), dtype=np.float32)
    res["tickgpu_bound_greeks_f32_numpy_1024"] = time_calls(bound, repeats)
    same = bound()
    want = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    res["bound_same_bits"] = bool(all(np.array_equal(getattr(same, k), getattr(want, k), equal_nan=True)
                                      for k in GREEK_KEYS))
    # The same values in NumPy arrays of mapped pinned memory, bound with out= (zero copy): each
    # call is one launch of the kernel reading and writing them in place, and its wait.
    from tickgpu.memory import mapped_array

    mx = {}
    for k in names:
        mx[k] = mapped_array(n, x[k].dtype)
        mx[k][:] = x[k]
    out = mapped_array((10, n), np.float32)
    zero_copy = bind_greeks(*(mx[k] for k in names), dtype=np.float32, out=out)
    res["tickgpu_bound_mapped_greeks_f32_numpy_1024"] = time_calls(zero_copy, repeats)
    got = zero_copy()
    res["bound_mapped_same_bits"] = bool(all(np.array_equal(getattr(got, k), getattr(want, k), equal_nan=True)
                                             for k in GREEK_KEYS))

    def torch_call():
        tx = {k: torch.from_numpy(v).to("cuda") for k, v in x.items()}
        outs = torch_greeks(torch, **tx)
        return [o.cpu().numpy() for o in outs]

    res["torch_eager_greeks_f32_numpy_1024"] = time_calls(torch_call, max(repeats // 5, 1000))
    res["parts_f32_1024"] = tick_parts(x, np.float32, repeats)
    # Implied vols of 1,024 float64 quotes (prices from the CPU backend's greeks), a call and bound.
    from tickgpu.runtime import bind_implied_vol

    q = {k: v for k, v in x64.items() if k != "vol"}
    q["price"] = tickgpu.greeks(**x64, backend="cpu").price
    iv_names = ("price", "spot", "strike", "t", "rate", "div", "call")
    res["tickgpu_implied_vol_f64_numpy_1024"] = time_calls(lambda: tickgpu.implied_vol(**q, backend="gpu"), repeats)
    ivs = bind_implied_vol(*(q[k] for k in iv_names))
    res["tickgpu_bound_implied_vol_f64_numpy_1024"] = time_calls(ivs, repeats)
    vol, status = ivs()
    want = tickgpu.implied_vol(**q, backend="gpu", return_status=True)
    res["bound_iv_same_bits"] = bool(np.array_equal(vol, want[0], equal_nan=True) and np.array_equal(status, want[1]))
    return res


def bench_device_tick(cp, torch, repeats: int) -> dict:
    """A tick on GPU arrays: greeks of 1,024 options from CuPy arrays to CuPy arrays, call + wait.

    Side by side: `tickgpu.greeks` on the arrays, each call's results dropped before the next (a
    tick loop: the dropped results are handed out again, `tickgpu.runtime.arrays.RECYCLE_SETS`),
    and with every result kept (``tickgpu_greeks_results_kept``: new CuPy arrays each call); the
    same arrays bound once (`bind_greeks`: one launch into fixed outputs); the same greeks as one
    CuPy ElementwiseKernel; `tickgpu.greeks` on PyTorch tensors of the same values and PyTorch
    eager on them; implied vols of the greeks' prices on CuPy arrays and on tensors. Each waits for
    its stream. ``launch_only``: the bound call without the wait (the host's share of a GPU-resident
    loop). ``tickgpu_greeks_mixed``: four arrays with the rate, dividend yield and flag as single
    values. ``*_python_path``: the same call with the C entry off (runtime/fasttick.py), in the same
    process; ``c_entry_took_*``: whether the C entry took the calls timed.
    """
    from tickgpu.finance import greeks as greeks_mod
    from tickgpu.finance import iv as iv_mod
    from tickgpu.runtime import bind_greeks, context

    res = {}
    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    for dtype, tag in ((np.float32, "f32"), (np.float64, "f64")):
        x = option_inputs(cp, 1024, dtype, seed=13)
        stream = cp.cuda.get_current_stream()
        wait = stream.synchronize
        r = {}
        r["tickgpu_greeks"] = time_calls(lambda: (tickgpu.greeks(**x, dtype=dtype, backend="gpu"), wait()), repeats)
        tickers = context().tickers

        def took(op, call) -> bool | None:
            """Whether the C entry takes `call` (its device counter), None where it is off."""
            if tickers is None:
                return None
            head = tickers[op]
            c0 = head.device_calls + head.other.device_calls
            call()
            return head.device_calls + head.other.device_calls == c0 + 1

        def python_path(mod, call):
            saved, mod._fast = mod._fast, None
            try:
                return call()
            finally:
                mod._fast = saved

        r["c_entry_took_the_call"] = took("greeks", lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu"))
        # The usual mix: four arrays, the rate, dividend yield and call flag as single values.
        mixed = dict({k: x[k] for k in ("spot", "strike", "t", "vol")}, rate=0.03, div=0.0, call=True)
        on_mixed = lambda: (tickgpu.greeks(**mixed, dtype=dtype, backend="gpu"), wait())  # noqa: E731
        r["tickgpu_greeks_mixed"] = time_calls(on_mixed, repeats)
        r["c_entry_took_the_mixed_call"] = took("greeks", lambda: tickgpu.greeks(**mixed, dtype=dtype, backend="gpu"))
        r["tickgpu_greeks_mixed_python_path"] = python_path(greeks_mod, lambda: time_calls(on_mixed, min(repeats, 3000)))
        kept: list = []
        r["tickgpu_greeks_results_kept"] = time_calls(
            lambda: (kept.append(tickgpu.greeks(**x, dtype=dtype, backend="gpu")), wait()), min(repeats, 2000))
        del kept
        tick = bind_greeks(*(x[k] for k in names), dtype=dtype)
        r["tickgpu_bound"] = time_calls(lambda: (tick(), wait()), repeats)
        r["tickgpu_bound_launch_only"] = time_calls(tick, repeats)
        wait()
        ek = cupy_greeks_kernel(cp)
        r["cupy_elementwise"] = time_calls(lambda: (ek(*(x[k] for k in names)), wait()), repeats)
        tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
        tsync = torch.cuda.synchronize
        on_tensors = lambda: (tickgpu.greeks(**tx, dtype=dtype, backend="gpu"), tsync())  # noqa: E731
        r["tickgpu_greeks_torch"] = time_calls(on_tensors, repeats)
        r["c_entry_took_the_torch_call"] = took("greeks", lambda: tickgpu.greeks(**tx, dtype=dtype, backend="gpu"))
        r["tickgpu_greeks_torch_python_path"] = python_path(greeks_mod, lambda: time_calls(on_tensors,
                                                                                           min(repeats, 3000)))
        r["torch_eager"] = time_calls(lambda: (torch_greeks(torch, **tx), torch.cuda.synchronize()),
                                      max(repeats // 5, 1000))
        # Implied vols of those options' prices, on CuPy arrays and on tensors (vols and statuses).
        price = tickgpu.greeks(**{k: cp.asnumpy(v) for k, v in x.items()}, dtype=dtype, backend="cpu").price
        q = {k: v for k, v in x.items() if k != "vol"}
        q["price"] = cp.asarray(price)
        tq = {k: torch.as_tensor(v, device="cuda") for k, v in q.items()}
        for lib, args, sync in (("cupy", q, wait), ("torch", tq, tsync)):
            ivs = lambda: (tickgpu.implied_vol(**args, dtype=dtype, backend="gpu", return_status=True), sync())  # noqa: E731
            r[f"tickgpu_implied_vol_{lib}"] = time_calls(ivs, repeats)
            r[f"c_entry_took_the_implied_vol_{lib}_call"] = took(
                "implied_vol", lambda: tickgpu.implied_vol(**args, dtype=dtype, backend="gpu"))
            r[f"tickgpu_implied_vol_{lib}_python_path"] = python_path(iv_mod, lambda: time_calls(ivs, min(repeats, 3000)))
        g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
        b = tick()
        r["bound_same_bits"] = bool(all(cp.array_equal(getattr(b, k), getattr(g, k), equal_nan=True) for k in GREEK_KEYS))
        r["variant_stream"] = repr(tick)
        res[tag] = r
        del tx
    return res


def tick_parts(x: dict, dtype, repeats: int) -> dict:
    """Where a tick's time goes: the same 1,024-option call taken apart, each part timed alone (p50).

    - ``native_roundtrip``: the one native call of a tick (inputs into staging, the graph, the
      wait, the outputs out of staging), from Python with everything bound;
    - ``graph_only``: the same call without the staging copies (the graph and the wait);
    - ``stage_in``: the input copies alone; ``stage_out_after_gpu``: the output copy right after a
      replay wrote staging (so the lines come from memory, as in a tick);
    - ``python``: a `tickgpu.greeks` call's p50 less the native round trip's.
    """
    from tickgpu._native import ffi, lib
    from tickgpu.runtime import context

    ctx = context()
    n = x["spot"].size
    tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    plan = ctx.ticks.get(("greeks", np.dtype(dtype).char, n))
    if plan is None:
        return {"error": "no tick plan for this size (not a staged tick)"}
    d, r = ctx.driver, plan.runner
    none = ffi.new("tg_hot_copy[1]")
    block = np.empty((10, plan.m), dtype)
    with ctx.lock:
        ctx.enter()
        if plan.graph.holder is not plan:
            plan.bind()
        # NOTE: each call points the out-copy at its own block, since freed: point it at ours.
        plan.t_out[0].dst = ffi.from_buffer(block)
        parts = {
            "native_roundtrip": time_calls(
                lambda: d.roundtrip(plan.t_in, plan.k_in, plan.graph.exec, r.stream, plan.t_out, 1), repeats),
            "graph_only": time_calls(lambda: d.roundtrip(none, 0, plan.graph.exec, r.stream, none, 0), repeats),
            "stage_in": time_calls(lambda: lib.tg_hot_stage(plan.t_in, plan.k_in), repeats),
        }
        after = np.empty(min(repeats, 2000), dtype=np.int64)
        for i in range(after.size):
            d.roundtrip(none, 0, plan.graph.exec, r.stream, none, 0)
            t0 = time.perf_counter_ns()
            lib.tg_hot_stage(plan.t_out, 1)
            after[i] = time.perf_counter_ns() - t0
        parts["stage_out_after_gpu"] = stats_us(after[min(200, after.size // 2):])
        r.staged_by = None   # staging now holds what these copies left; the next tick rewrites it
    call = time_calls(lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu"), repeats)
    parts["call"] = call
    parts["python_p50_us"] = call["p50_us"] - parts["native_roundtrip"]["p50_us"]
    parts["mapped"] = bool(plan.mapped)
    return parts


def _iv_resolution(x: dict, vol: np.ndarray) -> np.ndarray:
    """How far (relative) 16 ulps of a price's two legs move its implied vol: 16 eps legs / vega / vol."""
    from scipy.special import erfc

    w = np.where(x["call"], 1.0, -1.0)
    S, K, t, r, q = x["spot"], x["strike"], x["t"], x["rate"], x["div"]
    with np.errstate(all="ignore"):
        sst = vol * np.sqrt(t)
        d1 = (np.log(S / K) + (r - q) * t) / sst + 0.5 * sst
        legs = (S * np.exp(-q * t) * 0.5 * erfc(-w * d1 / math.sqrt(2))
                + K * np.exp(-r * t) * 0.5 * erfc(-w * (d1 - sst) / math.sqrt(2)))
        vega = S * np.exp(-q * t - 0.5 * d1 * d1) / math.sqrt(2 * math.pi) * np.sqrt(t)
        # vega 0 (the density underflowed): the price does not resolve the vol at all
        r = 16 * 2.0**-52 * legs / vega / vol
        return np.where(np.isnan(r), np.inf, r)


def bench_implied_vol(cp, n: int) -> dict:
    sync = cp.cuda.runtime.deviceSynchronize
    x = option_inputs(np, n, np.float64, seed=5)
    price = tickgpu.greeks(**x, backend="cpu").price
    args = {k: cp.asarray(v) for k, v in x.items() if k != "vol"}
    cprice = cp.asarray(price)
    t = time_device(lambda: tickgpu.implied_vol(cprice, **args, backend="gpu"), sync)
    # The same calls back to back, the board settled at its power limit (`sustained`).
    k = sustained_calls(t)
    settled = sustained(cp, lambda: tickgpu.implied_vol(cprice, **args, backend="gpu"), k, k)
    vol_gpu = cp.asnumpy(tickgpu.implied_vol(cprice, **args, backend="gpu"))
    sl = slice(0, 200_000)
    vol_cpu = tickgpu.implied_vol(price[sl], **{k: v[sl] for k, v in x.items() if k != "vol"}, backend="cpu")
    # Compared where a vol exists (vol 0 at intrinsic is compared exactly, not relatively).
    ok = np.isfinite(vol_cpu) & np.isfinite(vol_gpu[sl]) & (vol_cpu > 0)
    rel = np.abs(vol_gpu[sl][ok] - vol_cpu[ok]) / vol_cpu[ok]
    # A price known to a few ulps of its legs fixes the vol only to that over vega: deep in the
    # money near expiry that is far coarser than 1e-12 (tests/gpu/test_gpu_ops.py, _iv_agree).
    # "Resolved": options whose vol that rounding moves by less than 1e-13 relative.
    resolution = _iv_resolution({k: v[sl][ok] for k, v in x.items()}, vol_cpu[ok])
    resolved = resolution < 1e-13
    res = {"n": n, "seconds": t, "options_per_s": n / t, "sustained": settled,
           "options_per_s_sustained": n / settled["s"], "max_rel_diff_vs_cpu": float(rel.max()),
           "max_rel_diff_vs_cpu_resolved": float(rel[resolved].max()), "resolved": int(resolved.sum()),
           "max_diff_over_resolution": float(np.max(rel / np.maximum(resolution, 1e-12))),
           "p999_rel_diff_vs_cpu": float(np.percentile(rel, 99.9)), "compared": int(ok.sum()),
           "nan_mismatch": int(np.sum(np.isfinite(vol_gpu[sl]) != np.isfinite(vol_cpu))),
           "zero_mismatch": int(np.sum((vol_gpu[sl] == 0) != (vol_cpu == 0)))}
    x32 = {k: cp.asarray(v.astype(np.float32)) if v.dtype != bool else cp.asarray(v) for k, v in x.items() if k != "vol"}
    p32 = cp.asarray(price.astype(np.float32))
    t32 = time_device(lambda: tickgpu.implied_vol(p32, **x32, dtype=np.float32, backend="gpu"), sync)
    res["f32_options_per_s"] = n / t32
    return res


def bench_launch(cp, repeats: int) -> dict:
    """One prepacked kernel launch and wait from Python, through the C hot path.

    The headline is a bound launch (`Launcher.bind`, then ``bound(sync=True)``): one native call
    of three arguments (cuLaunchKernel + stream synchronise, GIL released) on arguments packed
    once, of the bundle's empty kernel (csrc/cuda/noop.cu), like for like with the floor's C
    `<<<>>>` launch + sync of an empty kernel. Beside it: the same through `Launcher.launch`
    (its Python layers and an eleven-argument native call), and the greeks kernel on one option
    (its own run time, a chain of transcendental functions on one thread, included), with that
    kernel's device time from events.
    """
    from tickgpu.runtime import context

    ctx = context()
    stream = cp.cuda.Stream(non_blocking=True)
    handle = stream.ptr
    noop = ctx.launcher("noop", "f32", 1, False)
    noop.args.pack(1)
    bound = noop.bind(1, handle)
    res = time_calls(lambda: bound(True), repeats, warmup=200)
    res["variant"] = noop.kernel.variant
    res["launcher_launch"] = time_calls(lambda: noop.launch(1, handle, sync=True), repeats, warmup=200)

    lau = ctx.launcher("greeks", "f32", 1, False)
    ins = [cp.full(16, v, dtype=cp.float32) for v in (100.0, 100.0, 0.5, 0.01, 0.2, 0.0)]
    call = cp.ones(16, dtype=cp.uint8)
    outs = [cp.empty(16, dtype=cp.float32) for _ in GREEK_KEYS]
    values = []
    for a in ins:
        values += [a.data.ptr, 0]
    values += [call.data.ptr, 0, *(o.data.ptr for o in outs), 1]
    lau.args.pack(*values)
    greeks = time_calls(lambda: lau.launch(1, handle, sync=True), repeats, warmup=200)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    kernel_ms = []
    for _ in range(1000):
        e0.record(stream)
        lau.launch(1, handle)
        e1.record(stream)
        e1.synchronize()
        kernel_ms.append(cp.cuda.get_elapsed_time(e0, e1))
    greeks["kernel_event_p50_us"] = float(np.median(kernel_ms[100:])) * 1e3
    greeks["variant"] = lau.kernel.variant
    price = float(outs[0].get()[0])
    ref = float(tickgpu.greeks(100.0, 100.0, 0.5, 0.01, 0.2, dtype=np.float32, backend="cpu").price)
    greeks["price_check_rel"] = abs(price - ref) / ref
    res["greeks_one_option"] = greeks
    return res


_WARM_START = r"""
import time, json, numpy as np
t0 = time.perf_counter(); import tickgpu; t1 = time.perf_counter()
tickgpu.warmup(); t2 = time.perf_counter()
if "{which}" == "tick":   # a chain: strikes with one spot, expiry, rate and vol (warm-up's last kind of call)
    x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
else:                    # another kind: float32, every input an array of 4,096
    r = np.random.default_rng(1)
    x = dict(spot=r.uniform(50, 150, 4096), strike=r.uniform(50, 150, 4096), t=r.uniform(0.1, 2, 4096),
             rate=r.uniform(0, 0.05, 4096), vol=r.uniform(0.1, 0.5, 4096), div=r.uniform(0, 0.03, 4096),
             call=r.random(4096) < 0.5, dtype=np.float32)
    x = {{k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v) for k, v in x.items()}}
clock = time.perf_counter_ns
# A calibrator: the same amount of plain NumPy work (ten 1,024-element results), first time and steady,
# so a first call's excess can be told apart from what any first Python call in a fresh process pays.
def numpy_work(s=x["spot"], k=x["strike"]):
    return [np.multiply(s, k) for _ in range(10)]
n0 = clock(); numpy_work(); n1 = clock()
c0 = clock(); tickgpu.greeks(**x, backend="gpu"); c1 = clock()
c2 = clock(); tickgpu.greeks(**x, backend="gpu"); c3 = clock()
ts, ns = [], []
for _ in range({repeats}):
    a = clock(); tickgpu.greeks(**x, backend="gpu"); ts.append(clock() - a)
for _ in range({repeats}):
    a = clock(); numpy_work(); ns.append(clock() - a)
print(json.dumps(dict(import_s=t1 - t0, warmup_s=t2 - t1, first_call_us=(c1 - c0) / 1e3, second_call_us=(c3 - c2) / 1e3,
                      steady_p50_us=float(np.median(ts)) / 1e3, numpy_first_us=(n1 - n0) / 1e3,
                      numpy_steady_p50_us=float(np.median(ns)) / 1e3)))
"""


def bench_warm_start(repeats: int, runs: int = 9, other_runs: int = 5) -> dict:
    """Cold start in fresh processes, then the first call after warmup() against steady state.

    The call is a 1,024-option chain (float64 strikes, single spot, expiry, rate and vol: the kind
    warm-up runs last). ``other_*``: the same in `other_runs` further processes whose first call is
    of another kind (float32, seven arrays of 4,096), which warm-up ran no tick of.
    Each process also times, first and steady, a calibrator of plain NumPy work (ten 1,024-element
    products), so what a first call pays beyond any first Python call in a fresh process is visible.
    """
    res: dict = {}
    for which, k in (("tick", runs), ("other", other_runs)):
        code = _WARM_START.format(repeats=repeats, which=which)
        out = []
        for _ in range(k):
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                return {"error": p.stderr[-2000:]}
            out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        med = {key: float(np.median([r[key] for r in out])) for key in out[0]}
        pre = "" if which == "tick" else "other_"
        res.update({f"{pre}runs": out, f"{pre}first_call_us_median": med["first_call_us"],
                    f"{pre}second_call_us_median": med["second_call_us"], f"{pre}steady_p50_us": med["steady_p50_us"],
                    f"{pre}first_over_steady": med["first_call_us"] / med["steady_p50_us"]})
        if which == "tick":
            res.update({"numpy_first_over_steady": med["numpy_first_us"] / med["numpy_steady_p50_us"],
                        "import_s": med["import_s"], "warmup_s": med["warmup_s"]})
    return res


def _bench_resident(repeats: int) -> dict:
    from tickgpu.bench.mailbox import bench_resident

    return bench_resident(repeats)


def crossover_sweep(quick: bool) -> dict:
    """Smallest n (power of two) from which the GPU backend beats the CPU backend, NumPy in and out."""
    sizes = [2 ** k for k in range(4, 23 if not quick else 18)]
    rng = np.random.default_rng(3)
    surf = tickgpu.VolSurface(np.linspace(50, 150, 21), np.array([0.1, 0.25, 0.5, 1.0, 2.0]),
                              0.2 + 0.05 * rng.random((5, 21)))
    out = {}
    for op in ("greeks", "implied_vol", "surface"):
        rows = []
        for n in sizes:
            x = option_inputs(np, n, np.float64, seed=n)
            if op == "greeks":
                f = lambda b: tickgpu.greeks(**x, backend=b)  # noqa: E731
            elif op == "implied_vol":
                price = tickgpu.greeks(**x, backend="cpu").price
                xv = {k: v for k, v in x.items() if k != "vol"}
                f = lambda b: tickgpu.implied_vol(price, **xv, backend=b)  # noqa: E731
            else:
                f = lambda b: surf.vol(x["strike"], x["t"], backend=b)  # noqa: E731
            reps = max(20, min(2000, int(2e7 // max(n, 1) // 10)))
            cpu = time_calls(lambda: f("cpu"), reps, warmup=5)["p50_us"]
            gpu = time_calls(lambda: f("gpu"), reps, warmup=5)["p50_us"]
            rows.append({"n": n, "cpu_p50_us": cpu, "gpu_p50_us": gpu})
        cross = None
        for i, r in enumerate(rows):
            if all(rr["gpu_p50_us"] < rr["cpu_p50_us"] for rr in rows[i:]):
                cross = r["n"]
                break
        out[op] = {"crossover_n": cross, "sweep": rows}
    return out


# ---- driver ---------------------------------------------------------------------------------------

def machine_info() -> dict:
    """The host (:func:`tickgpu.bench.common.machine_info`) plus ``gpu``: name, driver and memory as
    nvidia-smi reports them (None without nvidia-smi). ``commit`` is ``$TICKGPU_COMMIT`` where set
    (a copy of the tree without its git history), else the checkout's commit."""
    info = host_info()
    info["commit"] = os.environ.get("TICKGPU_COMMIT") or info["git_commit"]
    info["cpu_cores"] = os.cpu_count()
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        info["gpu"] = q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def start_suite(suite: str, args) -> tuple[dict, bool]:
    """(results, quick) of a GPU suite: its name, the machine and the floor figures (``--floor``), and
    the seconds `tickgpu.warmup` took, which runs first so that no section pays a first use."""
    quick = bool(getattr(args, "quick", False))
    res: dict = {"suite": suite, "machine": machine_info(), "floor": parse_floor(getattr(args, "floor", None))}
    t0 = time.perf_counter()
    tickgpu.warmup()
    res["warmup_s"] = time.perf_counter() - t0
    return res, quick


def run(args) -> int:
    import cupy as cp
    import torch

    res, quick = start_suite("gpu", args)

    sections = [
        ("copy_bandwidth_Bps", lambda: device_copy_bandwidth(cp, (1 << 28) if quick else (1 << 31))),
    ]
    for name, fn in sections:
        res[name] = fn()
    copy_bw = res["copy_bandwidth_Bps"]
    steps = {
        "throughput": lambda: bench_throughput(cp, torch, 10_000_000 if quick else 100_000_000, copy_bw),
        "latency": lambda: bench_latency(torch, 2_000 if quick else 10_000),
        "device_tick": lambda: bench_device_tick(cp, torch, 2_000 if quick else 10_000),
        "implied_vol": lambda: bench_implied_vol(cp, 1_000_000 if quick else 10_000_000),
        "launch": lambda: bench_launch(cp, 2_000 if quick else 20_000),
        "warm_start": lambda: bench_warm_start(2000),
        "resident": lambda: _bench_resident(2_000 if quick else 10_000),
        "crossover": lambda: crossover_sweep(quick),
    }
    run_sections(res, steps, echo=lambda name, r: print(json.dumps(jsonable(r), indent=1)[:3000], flush=True))

    res["targets"] = evaluate_targets(res)
    path = write_results("gpu", res, getattr(args, "out", "benchmarks/results"))
    print_summary(res)
    print(f"saved {path}")
    return 0


def evaluate_targets(res: dict) -> dict:
    t: dict = {}
    note_floor_mode(t, res.get("floor", {}))
    thr = res.get("throughput", {})
    for name in ("f32", "f64"):
        if name in thr:
            t[f"greeks_{name}_fraction_of_copy_bw>=0.9"] = thr[name].get("fraction_of_copy_bw_stream",
                                                                         thr[name]["fraction_of_copy_bw"])
            t[f"greeks_{name}_fraction_of_copy_bw_single_call"] = thr[name]["fraction_of_copy_bw"]
            if "fraction_of_copy_bw_events" in thr[name]:
                t[f"greeks_{name}_fraction_of_copy_bw_device_time"] = thr[name]["fraction_of_copy_bw_events"]
            if "fraction_of_copy_bw_sustained" in thr[name]:
                t[f"greeks_{name}_fraction_of_copy_bw_sustained"] = thr[name]["fraction_of_copy_bw_sustained"]
    lat = res.get("latency", {})
    floor = res.get("floor", {}).get("graph H2D+kernel+D2H 1024 floats")
    if "tickgpu_greeks_f32_numpy_1024" in lat:
        p50 = lat["tickgpu_greeks_f32_numpy_1024"]["p50_us"]
        if floor:
            t["latency_1024_over_floor_graph<=1.3"] = p50 / floor["p50_us"]
        t["torch_eager_over_tickgpu_1024>=3"] = lat["torch_eager_greeks_f32_numpy_1024"]["p50_us"] / p50
    if floor and "tickgpu_bound_greeks_f32_numpy_1024" in lat:
        t["latency_1024_bound_over_floor_graph<=1.3"] = (lat["tickgpu_bound_greeks_f32_numpy_1024"]["p50_us"]
                                                         / floor["p50_us"])
    if floor and "tickgpu_bound_mapped_greeks_f32_numpy_1024" in lat:
        # NumPy arrays in mapped pinned memory, bound with out=: the kernel works on them in place.
        t["latency_1024_bound_mapped_over_floor_graph<=1.3"] = (
            lat["tickgpu_bound_mapped_greeks_f32_numpy_1024"]["p50_us"] / floor["p50_us"])
    # The same tick's own work done in C (benchmarks/floor/greeks_tick.cu: copies in, the graph on
    # mapped staging, copies out, no Python): what the tick costs beyond the bytes it moves, which
    # are 17 arrays of 1,024 against the floor graph's two.
    same = res.get("floor", {}).get("greeks tick f32 1024 in+graph+out")
    if same:
        if floor:
            t["same_work_C_over_floor_graph"] = same["p50_us"] / floor["p50_us"]
        for key, name in (("tickgpu_greeks_f32_numpy_1024", "latency_1024_over_same_work_C"),
                          ("tickgpu_bound_greeks_f32_numpy_1024", "latency_1024_bound_over_same_work_C")):
            if key in lat:
                t[name] = lat[key]["p50_us"] / same["p50_us"]
    # The zero-copy binding against the C program's kernel on mapped memory with no copies.
    graph_only = res.get("floor", {}).get("greeks tick f32 1024 graph only")
    if graph_only and "tickgpu_bound_mapped_greeks_f32_numpy_1024" in lat:
        t["latency_1024_bound_mapped_over_C_graph_only"] = (
            lat["tickgpu_bound_mapped_greeks_f32_numpy_1024"]["p50_us"] / graph_only["p50_us"])
    # A tick on CuPy arrays: tickgpu's call and binding against CuPy's own kernel and the C launch.
    dt = res.get("device_tick", {}).get("f32", {})
    fl_launch = res.get("floor", {}).get("empty kernel launch+sync round trip")
    if "tickgpu_bound" in dt:
        t["device_tick_1024_cupy_elementwise_over_bound"] = dt["cupy_elementwise"]["p50_us"] / dt["tickgpu_bound"]["p50_us"]
        t["device_tick_1024_cupy_elementwise_over_call"] = dt["cupy_elementwise"]["p50_us"] / dt["tickgpu_greeks"]["p50_us"]
        t["device_tick_1024_torch_eager_over_bound"] = dt["torch_eager"]["p50_us"] / dt["tickgpu_bound"]["p50_us"]
        if "tickgpu_greeks_results_kept" in dt:
            t["device_tick_1024_cupy_elementwise_over_call_results_kept"] = (
                dt["cupy_elementwise"]["p50_us"] / dt["tickgpu_greeks_results_kept"]["p50_us"])
        if "tickgpu_greeks_torch" in dt:
            t["device_tick_1024_torch_eager_over_call_on_tensors"] = (
                dt["torch_eager"]["p50_us"] / dt["tickgpu_greeks_torch"]["p50_us"])
        for key in ("tickgpu_greeks_mixed", "tickgpu_greeks_torch", "tickgpu_implied_vol_cupy",
                    "tickgpu_implied_vol_torch"):
            if f"{key}_python_path" in dt:   # the C entry against the Python path, same process
                t[f"device_tick_1024_{key}_python_path_over_c_entry"] = (
                    dt[f"{key}_python_path"]["p50_us"] / dt[key]["p50_us"])
        if fl_launch:
            t["device_tick_1024_bound_over_C_launch_sync"] = dt["tickgpu_bound"]["p50_us"] / fl_launch["p50_us"]
    iv = res.get("implied_vol", {})
    if "options_per_s" in iv:
        t["iv_f64_Gopts_per_s>=2"] = iv["options_per_s"] / 1e9
        if "options_per_s_sustained" in iv:
            t["iv_f64_Gopts_per_s_sustained"] = iv["options_per_s_sustained"] / 1e9
        t["iv_max_rel_diff_vs_cpu<=1e-12"] = iv["max_rel_diff_vs_cpu_resolved"]
        t["iv_max_rel_diff_vs_cpu_all"] = iv["max_rel_diff_vs_cpu"]
        t["iv_max_diff_over_price_resolution<=1"] = iv["max_diff_over_resolution"]
    la, fl = res.get("launch", {}), res.get("floor", {}).get("empty kernel launch+sync round trip")
    if "p50_us" in la and fl:
        t["launch_sync_over_C_launch_sync<=1.3"] = la["p50_us"] / fl["p50_us"]
    rs = res.get("resident", {})
    if floor:
        for key, r in rs.items():
            if isinstance(r, dict) and key.startswith("resident") and key.endswith("_1024") and "p50_us" in r:
                t[f"{key}_over_floor_graph<=1.3"] = r["p50_us"] / floor["p50_us"]
    mailbox_floor = res.get("floor", {}).get("mailbox round trip 1024 floats")
    if mailbox_floor:
        # One option from Python against the floor's persistent kernel (4 KB each way, from C).
        for key in ("resident_f32_1", "resident_f64_1", "resident_bound_f32_1", "resident_bound_f64_1"):
            if "p50_us" in rs.get(key, {}):
                t[f"{key}_over_floor_mailbox"] = rs[key]["p50_us"] / mailbox_floor["p50_us"]
    ws = res.get("warm_start", {})
    if "first_over_steady" in ws:
        t["first_call_over_steady<=1.5"] = ws["first_over_steady"]
    if "other_first_over_steady" in ws:
        t["first_call_other_kind_over_steady"] = ws["other_first_over_steady"]
    return t


def print_summary(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"tickgpu GPU suite on {res['machine'].get('gpu')}")
    table.add_column("target")
    table.add_column("measured", justify="right")
    for k, v in res["targets"].items():
        table.add_row(k, f"{v:.4g}" if isinstance(v, (int, float)) else str(v))
    Console().print(table)


def suite_main(module: str, doc: str, run_suite, argv=None) -> int:
    """``python -m <module>`` for a GPU suite: --out, --floor and --quick, then `run_suite(args)`."""
    import argparse

    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--floor", default=None, help="output of the floor programs (native_floor, mailbox)")
    p.add_argument("--quick", action="store_true")
    return run_suite(p.parse_args(argv))


def main(argv=None) -> int:
    return suite_main("tickgpu.bench.gpu", __doc__, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
