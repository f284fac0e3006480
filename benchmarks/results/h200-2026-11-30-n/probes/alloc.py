import time, numpy as np, cupy as cp
from tickgpu.runtime import arrays as A
clock = time.perf_counter
def tm(f, r=3000):
    for _ in range(300): f()
    ts = []
    for _ in range(r):
        a = clock(); f(); ts.append((clock() - a) * 1e6)
    return round(float(np.median(ts)), 2)
n = 1024; dt = np.dtype(np.float32)
x = cp.ones(n, dt)
print("10 x cp.empty", tm(lambda: [cp.empty((n,), dtype=dt) for _ in range(10)]))
def rows_memptr():
    blk = cp.empty((10 * n,), dtype=dt)
    mp = blk.data
    return [cp.ndarray((n,), dt, memptr=mp + i * n * 4) for i in range(10)]
print("1 empty + 10 ndarray(memptr)", tm(rows_memptr))
def rows_index():
    blk = cp.empty((10, n), dtype=dt)
    return [blk[i] for i in range(10)]
print("1 empty + 10 blk[i]", tm(rows_index))
print("1 empty + list(blk)", tm(lambda: list(cp.empty((10, n), dtype=dt))))
def rows_split():
    return cp.split(cp.empty((10 * n,), dtype=dt), 10)
print("1 empty + split", tm(rows_split))
print("view_or_none", tm(lambda: A.view_or_none(x, "x")))
print("attrs: data.ptr shape dtype flags.c_contiguous data.device_id", tm(lambda: (x.data.ptr, x.shape, x.dtype, x.flags.c_contiguous, x.data.device_id)))
print("attrs: data.ptr shape dtype _c_contiguous", tm(lambda: (x.data.ptr, x.shape, x.dtype, x._c_contiguous)))
print("cai", tm(lambda: x.__cuda_array_interface__))
print("x.strides", tm(lambda: x.strides))
print("cp.cuda.get_current_stream().ptr", tm(lambda: cp.cuda.get_current_stream().ptr))
print("type(x) is cp.ndarray", tm(lambda: type(x) is cp.ndarray))
