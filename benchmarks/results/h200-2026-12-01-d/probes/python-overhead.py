"""Where a plain 1,024-option NumPy greeks call's time goes on this host (p50 of 5000 after warm-up)."""
import json, sys, time
import numpy as np
import tickgpu
from tickgpu.runtime import context, ops
from tickgpu.bench.gpu import time_calls

n = 1024
rng = np.random.default_rng(1)
x = dict(spot=rng.uniform(50, 150, n).astype(np.float32), strike=rng.uniform(50, 150, n).astype(np.float32),
         t=rng.uniform(.01, 2, n).astype(np.float32), rate=rng.uniform(0, .05, n).astype(np.float32),
         vol=rng.uniform(.05, .8, n).astype(np.float32), div=rng.uniform(0, .03, n).astype(np.float32),
         call=rng.random(n) < .5)
inputs = tuple(x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call"))
tickgpu.warmup()
ctx = context()
R = 5000
res = {}
res["call"] = time_calls(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), R)
res["greeks_arrays"] = time_calls(lambda: ops.greeks_arrays(inputs, np.dtype(np.float32), (n,), False), R)
d = ctx.driver
real = d.roundtrip
d.roundtrip = lambda *a: None
res["call_no_roundtrip"] = time_calls(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), R)
res["greeks_arrays_no_roundtrip"] = time_calls(lambda: ops.greeks_arrays(inputs, np.dtype(np.float32), (n,), False), R)
res["np_empty_10x1024"] = time_calls(lambda: np.empty((10, 1024), np.float32), R)
d.roundtrip = real
res["call_again"] = time_calls(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), R)
import cProfile, pstats, io
d.roundtrip = lambda *a: None
pr = cProfile.Profile(); pr.enable()
for _ in range(5000):
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
pr.disable(); d.roundtrip = real
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
print(json.dumps({k: (v["p50_us"] if isinstance(v, dict) else v) for k, v in res.items()}, indent=1))
print(s.getvalue())
