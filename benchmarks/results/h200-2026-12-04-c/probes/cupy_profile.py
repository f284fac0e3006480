"""Where a `tickgpu.greeks` call on CuPy arrays (1,024 float32 options, call + wait) spends its time:
the call, CuPy's own ElementwiseKernel and the bound call beside it, the pieces the call is made of
timed alone, and a cProfile of 3,000 calls. Usage: python3 cupy_profile.py OUT.json"""
import cProfile
import io
import json
import pstats
import sys

import cupy as cp
import numpy as np

import tickgpu
from tickgpu.bench.gpu import cupy_greeks_kernel, option_inputs, time_calls
from tickgpu.runtime import bind_greeks

tickgpu.warmup()
names = ("spot", "strike", "t", "rate", "vol", "div", "call")
x = option_inputs(cp, 1024, np.float32, seed=13)
stream = cp.cuda.get_current_stream()
wait = stream.synchronize
res = {}
call = lambda: (tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), wait())  # noqa: E731
R = 5000
res["call"] = time_calls(call, R)
res["call_no_wait"] = time_calls(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), R)
wait()
ek = cupy_greeks_kernel(cp)
res["cupy_elementwise"] = time_calls(lambda: (ek(*(x[k] for k in names)), wait()), R)
tick = bind_greeks(*(x[k] for k in names), dtype=np.float32)
res["bound"] = time_calls(lambda: (tick(), wait()), R)
a = x["spot"]
res["cai"] = time_calls(lambda: a.__cuda_array_interface__, R)
res["dlpack_device"] = time_calls(lambda: a.__dlpack_device__(), R)
res["data_ptr"] = time_calls(lambda: (a.data.ptr, a.shape, a.dtype, a.flags.c_contiguous, a.data.device_id), R)
res["cp_empty_10240"] = time_calls(lambda: cp.empty(10240, dtype=np.float32), R)
blk = cp.empty(10240, np.float32)
res["cp_split_10"] = time_calls(lambda: cp.split(blk, 10), R)
res["slices_10"] = time_calls(lambda: [blk[i * 1024:(i + 1) * 1024] for i in range(10)], R)
res["reshape_rows_10"] = time_calls(lambda: list(blk.reshape(10, 1024)), R)


def dev():
    with cp.cuda.Device(0):
        pass


res["device_with"] = time_calls(dev, R)
res["wait_alone"] = time_calls(wait, R)
from tickgpu.runtime import arrays, context  # noqa: E402

ctx = context()
res["view_or_none_first"] = time_calls(lambda: arrays.view_or_none(a, "spot", 1, True), R)
res["view_or_none_rest"] = time_calls(lambda: arrays.view_or_none(a, "spot", 1, False), R)
for k, v in res.items():
    print(k, v["p50_us"], flush=True)

for sort in ("tottime", "cumulative"):
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        call()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats(sort).print_stats(45)
    res[f"profile_{sort}"] = s.getvalue()
    print(s.getvalue()[:6000])

# PyTorch tensors of the same values, for the same call
import torch  # noqa: E402

tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
tsync = torch.cuda.synchronize
res["torch_call"] = time_calls(lambda: (tickgpu.greeks(**tx, dtype=np.float32, backend="gpu"), tsync()), R)
print("torch_call", res["torch_call"]["p50_us"])
json.dump(res, open(sys.argv[1], "w"), indent=1)
