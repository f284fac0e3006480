import cProfile, io, json, pstats, time
import numpy as np
import cupy as cp
import tickgpu
from tickgpu.bench import gpu as g
tickgpu.warmup()
for n in (10_000, 100_000_000):
    x = g.option_inputs(cp, n, np.float32)
    for _ in range(3):
        tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    cp.cuda.Device().synchronize()
    hs = []
    for _ in range(10):
        t0 = time.perf_counter(); r = tickgpu.greeks(**x, dtype=np.float32, backend="gpu"); hs.append(time.perf_counter() - t0)
        cp.cuda.Device().synchronize(); del r
    print(n, "host us per call (no sync)", [round(h * 1e6) for h in hs], flush=True)
    if n > 1e6:
        pr = cProfile.Profile(); pr.enable(); r = tickgpu.greeks(**x, dtype=np.float32, backend="gpu"); pr.disable()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[:3000])
