"""Probe: where a 1e8-option NumPy greeks call on the GPU spends its time."""
import cProfile, io, json, os, pstats, time
import numpy as np
import tickgpu
from tickgpu.runtime import context
tickgpu.warmup()
ctx = context()
res = {"staging_elements": ctx.staging_elements}
N = 100_000_000
rng = np.random.default_rng(2)
x = dict(spot=rng.uniform(50, 150, N).astype(np.float32), strike=rng.uniform(50, 150, N).astype(np.float32),
         t=rng.uniform(0.1, 2, N).astype(np.float32), rate=np.full(N, 0.01, np.float32),
         vol=rng.uniform(.1, .5, N).astype(np.float32))
def tm(f, k=3):
    ts = []
    for _ in range(k):
        a = time.perf_counter(); r = f(); ts.append(time.perf_counter() - a); del r
    return float(np.median(ts))
res["np_empty_10xN_touch_s"] = tm(lambda: np.empty((10, N), np.float32).fill(0))
buf = np.empty((10, N), np.float32); buf.fill(0)
res["np_copyto_4GB_prefaulted_s"] = tm(lambda: np.copyto(buf, 1.0))
res["gpu_call_s"] = tm(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"))
res["cpu_call_s"] = tm(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="cpu"), 2)
for th in (4, 8, 16):
    from tickgpu._native import lib
    lib.tg_hot_set_copy_threads(th)
    res[f"gpu_call_s_threads{th}"] = tm(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), 2)
lib.tg_hot_set_copy_threads(0)
pr = cProfile.Profile(); pr.enable()
g = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
pr.disable(); del g
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(10); res["profile"] = s.getvalue()
for k, v in res.items():
    print(k, v)
with open(os.path.join(os.environ.get("OUT", "."), "big.json"), "w") as f:
    json.dump(res, f, indent=1)
