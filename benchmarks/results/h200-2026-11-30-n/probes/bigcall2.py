import time, numpy as np, cupy as cp
import tickgpu
from tickgpu.bench.gpu import option_inputs
from tickgpu.runtime.arrays import device_view
from tickgpu.finance import greeks as G
tickgpu.warmup()
n = 100_000_000
sync = cp.cuda.runtime.deviceSynchronize
clock = time.perf_counter
for dtype in (np.float32, np.float64):
    x = option_inputs(cp, n, dtype)
    for _ in range(3):
        tickgpu.greeks(**x, dtype=dtype, backend="gpu"); sync()
    hot = []
    rs = []
    for _ in range(20):
        a = clock(); rs.append(tickgpu.greeks(**x, dtype=dtype, backend="gpu")); hot.append((clock() - a) * 1e6)
    sync(); del rs
    print(np.dtype(dtype).name, "queued call host us", np.round(hot, 1))
    # after a sync on a busy GPU (the benchmark's case), cold
    def after_sync(f, k=7):
        ts = []
        for _ in range(k):
            g = tickgpu.greeks(**x, dtype=dtype, backend="gpu"); sync(); del g
            a = clock(); f(); ts.append((clock() - a) * 1e6)
        return round(float(np.median(ts)), 1)
    sm = cp.cuda.Stream(non_blocking=True)
    print(" after-sync: call", after_sync(lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu")))
    print(" after-sync: nothing", after_sync(lambda: None))
    print(" after-sync: cp.empty x10", after_sync(lambda: [cp.empty(n, dtype=dtype) for _ in range(10)]))
    print(" after-sync: device_view x7", after_sync(lambda: [device_view(v, k) for k, v in x.items()]))
    print(" after-sync: np.ones(1000).sum() x20", after_sync(lambda: [np.ones(1000).sum() for _ in range(20)]))
    busy = []
    for _ in range(7):
        g = tickgpu.greeks(**x, dtype=dtype, backend="gpu"); sync(); del g
        t_end = clock() + 0.002
        while clock() < t_end: pass   # keep the core busy in Python, then call
        a = clock(); g = tickgpu.greeks(**x, dtype=dtype, backend="gpu"); busy.append((clock() - a) * 1e6); sync(); del g
    print(" after-sync then 2 ms Python spin: call", round(float(np.median(busy)), 1))
    del x; cp.get_default_memory_pool().free_all_blocks()
