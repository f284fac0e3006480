"""p50 of tickgpu.greeks, float32, 1,024 options, NumPy in and out (the suite's latency call), in this process's tree."""
import json, sys, time
import numpy as np
import tickgpu
tickgpu.warmup()
rng = np.random.default_rng(0)
n = 1024
x = {k: rng.uniform(lo, hi, n).astype(np.float32) for k, lo, hi in
     (("spot", 80, 120), ("strike", 80, 120), ("t", 0.1, 2), ("rate", 0, 0.05), ("vol", 0.1, 0.5), ("div", 0, 0.03))}
x["call"] = rng.random(n) < 0.5
f = lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
for _ in range(3000): f()
ts = []
for _ in range(20000):
    a = time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns() - a)
ts = np.array(ts) / 1e3
print(json.dumps({"tree": sys.argv[1], "p50_us": float(np.median(ts)), "p99_us": float(np.percentile(ts, 99))}))
