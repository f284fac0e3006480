"""Per-call host overhead of tickgpu's call path, without a GPU.

The GPU path runs on the test suite's mock driver (tests/cpu/cuda_mock.py) with the device work
removed: a "replay" does nothing, so what is timed is exactly the host's share of a call -- the
finance layer's checks, dispatch, the runtime's plan lookup and copy tables, and the native
staging copies into and out of pinned memory. On the GPU machine the same call costs this plus
the graph round trip (the floor program's "graph H2D+kernel+D2H").

Also timed: the CPU backend for one option and for 1,024, and the first call after warmup in a
fresh process (scalar t/rate/vol, the pattern `tickgpu bench` uses).

Run: python benchmarks/host_overhead.py [--repeats N]
Numbers from a shared or busy machine are indicative only.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cpu"))


def _timed(fn, repeats: int, warm: int = 200) -> dict:
    for _ in range(warm):
        fn()
    clock = time.perf_counter_ns
    out = np.empty(repeats, dtype=np.int64)
    for i in range(repeats):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    us = out / 1e3
    return {"p50_us": round(float(np.percentile(us, 50)), 2), "p99_us": round(float(np.percentile(us, 99)), 2)}


def _null_driver():
    """The mock driver with the device work taken out: replays cost nothing."""
    from cuda_mock import MockDriver

    from tickgpu._native import check, lib

    class NullDeviceDriver(MockDriver):
        def graph_launch(self, e, s, *, sync=False):
            pass

        def roundtrip(self, cin, n_in, e, s, cout, n_out):
            check(lib.tg_hot_stage(cin, n_in), "stage in")
            check(lib.tg_hot_stage(cout, n_out), "stage out")

        def _run_kernel(self, *a, **k):
            pass

    return NullDeviceDriver()


def _inputs(n: int, dtype, seed: int = 11) -> dict:
    rng = np.random.default_rng(seed)
    d = {k: rng.uniform(lo, hi, n).astype(dtype) for k, (lo, hi) in
         dict(spot=(50, 150), strike=(50, 150), t=(0.01, 3), rate=(0, 0.05), vol=(0.05, 0.9), div=(0, 0.03)).items()}
    d["call"] = rng.random(n) < 0.5
    return d


def gpu_host_overhead(repeats: int) -> dict:
    import tickgpu
    import tickgpu.runtime as rt
    from cuda_mock import default_entries, write_bundle
    from tickgpu.runtime import ops

    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        bundle = write_bundle(Path(tmp), default_entries())
        ctx = rt.init(driver=_null_driver(), bundle_dir=bundle)
        ops.warmup(ctx)
        x32 = _inputs(1024, np.float32)
        x64 = _inputs(1024, np.float64)
        res["greeks f32 n=1024 numpy, tickgpu.greeks(backend='gpu')"] = _timed(
            lambda: tickgpu.greeks(**x32, dtype=np.float32, backend="gpu"), repeats)
        res["greeks f64 n=1024 numpy, tickgpu.greeks(backend='gpu')"] = _timed(
            lambda: tickgpu.greeks(**x64, backend="gpu"), repeats)
        res["greeks f32 n=1024 numpy, runtime.ops.greeks"] = _timed(
            lambda: ops.greeks(**x32, dtype=np.float32, shape=(1024,)), repeats)
        sc = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
        res["greeks f64 n=1024 scalar t/rate/vol, tickgpu.greeks(backend='gpu')"] = _timed(
            lambda: tickgpu.greeks(**sc, backend="gpu"), repeats)
        price = np.full(1024, 10.0)
        xv = {k: v for k, v in x64.items() if k != "vol"}
        res["implied_vol f64 n=1024, tickgpu.implied_vol(backend='gpu')"] = _timed(
            lambda: tickgpu.implied_vol(price, **xv, backend="gpu"), repeats)
        res["greeks f64 n=1, tickgpu.greeks(backend='gpu')"] = _timed(
            lambda: tickgpu.greeks(100.0, 95.0, 0.5, 0.01, 0.2, backend="gpu"), repeats)
        rt.reset()
    return res


def cpu_backend(repeats: int) -> dict:
    import tickgpu

    res = {}
    res["greeks f64 one option (scalars), backend='cpu'"] = _timed(
        lambda: tickgpu.greeks(100.0, 95.0, 0.5, 0.01, 0.2, backend="cpu"), repeats)
    res["implied_vol f64 one option (scalars), backend='cpu'"] = _timed(
        lambda: tickgpu.implied_vol(10.0, 100.0, 95.0, 0.5, 0.01, backend="cpu"), repeats)
    res["greeks f64 one option (scalars), backend='auto'"] = _timed(
        lambda: tickgpu.greeks(100.0, 95.0, 0.5, 0.01, 0.2), repeats)
    x64 = _inputs(1024, np.float64)
    res["greeks f64 n=1024, backend='cpu'"] = _timed(lambda: tickgpu.greeks(**x64, backend="cpu"), repeats)
    return res


_FIRST_CALL = r"""
import sys, time, tempfile, json
from pathlib import Path
sys.path.insert(0, {tests!r})
import numpy as np
import tickgpu, tickgpu.runtime as rt
from cuda_mock import default_entries, write_bundle
sys.path.insert(0, {bench!r})
from host_overhead import _null_driver
tmp = tempfile.mkdtemp()
rt.init(driver=_null_driver(), bundle_dir=write_bundle(Path(tmp), default_entries()))
tickgpu.warmup()
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
c0 = time.perf_counter_ns(); tickgpu.greeks(**x, backend='gpu'); c1 = time.perf_counter_ns()
y = {{k: np.asarray(v, np.float32) for k, v in x.items()}}
c2 = time.perf_counter_ns(); tickgpu.greeks(**y, dtype=np.float32, backend='gpu'); c3 = time.perf_counter_ns()
ts = []
for _ in range(2000):
    a = time.perf_counter_ns(); tickgpu.greeks(**x, backend='gpu'); ts.append(time.perf_counter_ns() - a)
print(json.dumps(dict(first_us=(c1 - c0) / 1e3, first_f32_us=(c3 - c2) / 1e3, steady_p50_us=float(np.median(ts)) / 1e3)))
"""


def first_call(runs: int = 3) -> dict:
    code = _FIRST_CALL.format(tests=str(ROOT / "tests" / "cpu"), bench=str(Path(__file__).parent))
    out = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        if p.returncode:
            return {"error": p.stderr[-2000:]}
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    med = {k: round(float(np.median([r[k] for r in out])), 1) for k in out[0]}
    med["first_over_steady"] = round(med["first_us"] / med["steady_p50_us"], 2)
    return med


def staging_copies() -> dict:
    """tg_hot_stage over the seven greeks inputs of n float64 elements: GB/s of the host copies."""
    from tickgpu._native import ffi, lib

    res = {}
    for n in (1 << 17, 1 << 20):
        src = [np.ones(n) for _ in range(7)]
        dst = [np.empty(n) for _ in range(7)]
        t = ffi.new("tg_hot_copy[]", 7)
        for i in range(7):
            t[i].dst, t[i].src, t[i].bytes = ffi.from_buffer(dst[i]), ffi.from_buffer(src[i]), 8 * n
        for _ in range(3):
            lib.tg_hot_stage(t, 7)
        ts = []
        for _ in range(10):
            t0 = time.perf_counter()
            lib.tg_hot_stage(t, 7)
            ts.append(time.perf_counter() - t0)
        res[f"tg_hot_stage 7 x {n} f64"] = {"ms": round(1e3 * float(np.median(ts)), 3),
                                             "GB/s": round(7 * 8 * n / float(np.median(ts)) / 1e9, 2)}
    return res


def large_host_calls() -> dict:
    """tickgpu.greeks(backend='gpu') at n = 2**20, float64, on the null-device driver: the host's
    whole share of a pipelined call (staging copies in and out, on the copy threads), against one
    copy thread; the PCIe bound at 55 GB/s is given for scale."""
    import tickgpu
    import tickgpu.runtime as rt
    from cuda_mock import default_entries, write_bundle

    from tickgpu._native import lib

    n = 1 << 20
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        rt.init(driver=_null_driver(), bundle_dir=write_bundle(Path(tmp), default_entries()))
        x = _inputs(n, np.float64)
        nbytes = n * (6 * 8 + 1 + 10 * 8)
        for threads in (1, 0):
            before = lib.tg_hot_set_copy_threads(threads)
            tickgpu.greeks(**x, backend="gpu")
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                tickgpu.greeks(**x, backend="gpu")
                ts.append(time.perf_counter() - t0)
            lib.tg_hot_set_copy_threads(before)
            t = float(np.median(ts))
            label = "1 copy thread" if threads == 1 else f"{lib.tg_hot_set_copy_threads(-1)} copy threads"
            res[f"greeks f64 n=2**20, host share, {label}"] = {"ms": round(1e3 * t, 2),
                                                               "GB/s": round(nbytes / t / 1e9, 1)}
        res["PCIe bound for the same bytes at 55 GB/s"] = {"ms": round(1e3 * nbytes / 55e9, 2)}
        rt.reset()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5000)
    args = p.parse_args(argv)
    res = {"gpu path, host share (mock driver, no device work)": gpu_host_overhead(args.repeats),
           "cpu backend": cpu_backend(args.repeats),
           "first call after warmup, fresh process (mock driver)": first_call(),
           "staging copies": staging_copies(),
           "large host calls (mock driver, no device work)": large_host_calls()}
    for section, rows in res.items():
        print(section)
        for k, v in rows.items():
            print(f"  {k:70s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
