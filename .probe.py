import json, time
import numpy as np
import cupy as cp
import tickgpu
tickgpu.warmup()
x = cp.ones(10000, dtype=cp.float32)
def t(fn, n=2000):
    for _ in range(100): fn()
    t0 = time.perf_counter_ns()
    for _ in range(n): fn()
    return (time.perf_counter_ns() - t0) / n / 1e3
print("cai us", t(lambda: x.__cuda_array_interface__))
print("dlpack_device us", t(lambda: x.__dlpack_device__()))
print("cupy.empty 1e4 us", t(lambda: cp.empty(10000, cp.float32)))
print("cupy.empty 1e8 us", t(lambda: cp.empty(100_000_000, cp.float32), 200))
print("get_current_stream us", t(lambda: cp.cuda.get_current_stream().ptr))
from tickgpu.runtime.arrays import device_view
print("device_view us", t(lambda: device_view(x, "x")))
from tickgpu.bench.gpu import option_inputs
xs = option_inputs(cp, 10000, np.float32)
print("greeks cupy 1e4 us", t(lambda: tickgpu.greeks(**xs, dtype=np.float32, backend="gpu"), 500))
import cProfile, pstats, io
pr = cProfile.Profile(); pr.enable()
for _ in range(200): tickgpu.greeks(**xs, dtype=np.float32, backend="gpu")
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15); print(s.getvalue()[:4000])
from tickgpu.bench.memory_pipeline import run_pipeline_bench
r = run_pipeline_bench(False)
print(json.dumps(r, default=str)[:3000])
