"""The Python share of resident and graph calls on the device host: the native call stubbed vs real."""
import json, os, sys, threading, time
import numpy as np
import tickgpu
from tickgpu import runtime as rt
from tickgpu.runtime import mailbox as mb, staged
from tickgpu._native import ffi, lib
rt.init(); rt.warmup()
print("threads after warmup:", [t.name for t in threading.enumerate()], flush=True)
rng = np.random.default_rng(1)
def p50(f, reps=5000, warm=500):
    for _ in range(warm): f()
    ts = np.empty(reps)
    for i in range(reps):
        a = time.perf_counter_ns(); f(); ts[i] = time.perf_counter_ns() - a
    return round(float(np.median(ts) / 1e3), 2)
res = {}
for n in (1, 1024):
    dt = np.float32
    x = dict(spot=rng.uniform(80, 120, n).astype(dt), strike=rng.uniform(80, 120, n).astype(dt),
             t=rng.uniform(0.1, 2, n).astype(dt), rate=rng.uniform(0, 0.05, n).astype(dt),
             vol=rng.uniform(0.1, 0.5, n).astype(dt), div=rng.uniform(0, 0.03, n).astype(dt), call=rng.random(n) < 0.5)
    g = lambda: tickgpu.greeks(**x, dtype=dt, backend="gpu")
    res[f"graph_public_{n}"] = p50(g)
    ctx = rt.context(); d = ctx.driver
    real_rt = d.roundtrip
    d.roundtrip = lambda *a: None
    res[f"graph_public_{n}_native_stubbed"] = p50(g)
    d.roundtrip = real_rt
    with mb.resident("greeks", dtype=dt, capacity=4096) as r:
        res[f"resident_public_{n}"] = p50(g)
        res[f"resident_direct_{n}"] = p50(lambda: r(**x))
        real = mb._call_block
        mb._call_block = lambda *a: 0
        res[f"resident_public_{n}_native_stubbed"] = p50(g)
        res[f"resident_direct_{n}_native_stubbed"] = p50(lambda: r(**x))
        mb._call_block = real
        # the bare cffi call with a result already there: what entering C costs (timeout 0 -> returns at once?)
        res[f"empty_python_call"] = p50(lambda: None)
        res[f"np_empty_10xn"] = p50(lambda: np.empty((10, n), dt))
    print(n, {k: v for k, v in res.items() if str(n) in k}, flush=True)
print(res)
out = os.environ.get("OUT", "/tmp"); json.dump(res, open(os.path.join(out, "python-share.json"), "w"), indent=1)
