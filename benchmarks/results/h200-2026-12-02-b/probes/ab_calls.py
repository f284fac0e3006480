"""p50 of three 1,024-option float32 greeks calls (plain, bound, bound on mapped arrays with out=) in this process's tree."""
import json, sys, time
import numpy as np
import tickgpu
from tickgpu.runtime import bind_greeks
from tickgpu.memory import mapped_array
tickgpu.warmup()
rng = np.random.default_rng(0)
n = 1024
names = ("spot", "strike", "t", "rate", "vol", "div", "call")
x = {k: rng.uniform(lo, hi, n).astype(np.float32) for k, lo, hi in
     (("spot", 80, 120), ("strike", 80, 120), ("t", 0.1, 2), ("rate", 0, 0.05), ("vol", 0.1, 0.5), ("div", 0, 0.03))}
x["call"] = rng.random(n) < 0.5
bound = bind_greeks(*(x[k] for k in names), dtype=np.float32)
mx = {}
for k in names:
    mx[k] = mapped_array(n, x[k].dtype)
    mx[k][:] = x[k]
zero_copy = bind_greeks(*(mx[k] for k in names), dtype=np.float32, out=mapped_array((10, n), np.float32))
calls = {"plain": lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), "bound": bound, "bound_mapped": zero_copy}
out = {"tree": sys.argv[1]}
for name, f in calls.items():
    for _ in range(3000): f()
    ts = []
    for _ in range(15000):
        a = time.perf_counter_ns(); f(); ts.append(time.perf_counter_ns() - a)
    out[name] = round(float(np.median(ts)) / 1e3, 3)
print(json.dumps(out))
