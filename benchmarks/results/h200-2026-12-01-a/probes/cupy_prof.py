import cProfile, pstats, time, io, json
import numpy as np, cupy as cp
import tickgpu, tickgpu.runtime as rt
tickgpu.warmup()
n = 1024
r = np.random.default_rng(1)
x = dict(spot=cp.asarray(r.uniform(50, 150, n), cp.float32), strike=cp.asarray(r.uniform(50, 150, n), cp.float32),
         t=cp.asarray(r.uniform(0.1, 2, n), cp.float32), rate=cp.asarray(r.uniform(0, 0.05, n), cp.float32),
         vol=cp.asarray(r.uniform(0.1, 0.5, n), cp.float32), div=cp.asarray(r.uniform(0, 0.03, n), cp.float32),
         call=cp.asarray(r.random(n) < 0.5))
f = lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
for _ in range(2000): f()
cp.cuda.Device().synchronize()
clock = time.perf_counter_ns
def med(fn, k=5000):
    for _ in range(200): fn()
    ts = []
    for _ in range(k):
        a = clock(); fn(); ts.append(clock() - a)
    return float(np.median(ts)) / 1e3
a = x["spot"]
base = cp.empty(10 * n, cp.float32)
blk = cp.empty((10, n), cp.float32)
res = {"call": med(f, 3000),
       "cai": med(lambda: a.__cuda_array_interface__), "data_ptr": med(lambda: a.data.ptr), "shape": med(lambda: a.shape),
       "dtype": med(lambda: a.dtype), "flags_c": med(lambda: a.flags.c_contiguous), "device_id": med(lambda: a.device.id),
       "strides": med(lambda: a.strides), "type_module": med(lambda: type(a).__module__),
       "empty_10n": med(lambda: cp.empty(10 * n, cp.float32)), "split10": med(lambda: cp.split(base, 10)),
       "empty_10xn": med(lambda: cp.empty((10, n), cp.float32)), "rows10": med(lambda: [blk[i] for i in range(10)]),
       "ndarray_memptr10": med(lambda: [cp.ndarray((n,), cp.float32, memptr=base.data + 4 * n * i) for i in range(10)]),
       "device_ctx": med(lambda: cp.cuda.Device(0).__enter__()), "current_stream": med(lambda: cp.cuda.get_current_stream().ptr)}
print(json.dumps(res))
pr = cProfile.Profile(); pr.enable()
for _ in range(3000): f()
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue()[:6000])
