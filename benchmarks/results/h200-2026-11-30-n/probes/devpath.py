import sys, time, json, numpy as np, cupy as cp
import tickgpu
from tickgpu.bench.gpu import option_inputs, greeks_bytes
tickgpu.warmup()
sync = cp.cuda.runtime.deviceSynchronize
clock = time.perf_counter
res = {"src": tickgpu.__file__}
def med(xs): return round(float(np.median(xs)), 2)
# small device-array ticks: call + wait, hot
for n in (1024, 65536):
    for dtype in (np.float32, np.float64):
        x = option_inputs(cp, n, dtype)
        f = lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu")
        for _ in range(500): f(); sync()
        ts, hs = [], []
        for _ in range(3000):
            a = clock(); g = f(); b = clock(); sync(); c = clock(); del g
            hs.append((b - a) * 1e6); ts.append((c - a) * 1e6)
        res[f"tick_{n}_{np.dtype(dtype).name}"] = {"call_wait_p50_us": med(ts), "call_host_p50_us": med(hs),
                                                  "p99_us": round(float(np.percentile(ts, 99)), 2)}
n = 100_000_000
for dtype in (np.float32, np.float64):
    x = option_inputs(cp, n, dtype)
    f = lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    for _ in range(3): f(); sync()
    host, one, five = [], [], []
    for _ in range(7):
        sync(); a = clock(); g = f(); b = clock(); sync(); c = clock(); del g
        host.append((b - a) * 1e6); one.append(c - a)
    for _ in range(5):
        sync(); a = clock()
        for _ in range(5): f()
        sync(); five.append((clock() - a) / 5)
    nb = greeks_bytes(n, np.dtype(dtype).itemsize)
    res[f"big_{np.dtype(dtype).name}"] = {"host_after_sync_us": med(host), "one_call_GBps": round(nb / np.median(one) / 1e9, 1),
                                         "stream5_GBps": round(nb / np.median(five) / 1e9, 1)}
    del x; cp.get_default_memory_pool().free_all_blocks()
print(json.dumps(res))
