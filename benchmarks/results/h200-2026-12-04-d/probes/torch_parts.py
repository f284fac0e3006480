"""Where a 1,024-option greeks call on PyTorch tensors spends its time (p50 of each part alone, us),
beside the same on CuPy arrays. Usage: python3 torch_parts.py OUT.json"""
import json
import sys

import cupy as cp
import numpy as np
import torch

import tickgpu
from tickgpu.bench.gpu import option_inputs, time_calls
from tickgpu.runtime import arrays
from tickgpu.runtime.direct import out_dtypes_of
from tickgpu.runtime.ops import GREEKS

tickgpu.warmup()
N = 5000
res = {}
for dtype, tag in ((np.float32, "f32"), (np.float64, "f64")):
    x = option_inputs(cp, 1024, dtype, seed=13)
    tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
    t0 = tx["spot"]
    dts = out_dtypes_of(GREEKS, np.dtype(dtype))
    tdt = t0.dtype
    dev = t0.device
    raw = torch._C._cuda_getCurrentRawStream
    stream = cp.cuda.get_current_stream()
    block = torch.empty((10, 1024), dtype=tdt, device=dev)
    r = {
        "torch_cuda_synchronize": time_calls(torch.cuda.synchronize, N),
        "torch_current_stream_synchronize": time_calls(lambda: torch.cuda.current_stream().synchronize(), N),
        "cupy_stream_synchronize": time_calls(stream.synchronize, N),
        "call_no_wait_torch": time_calls(lambda: tickgpu.greeks(**tx, dtype=dtype, backend="gpu"), N),
        "call_no_wait_cupy": time_calls(lambda: tickgpu.greeks(**x, dtype=dtype, backend="gpu"), N),
        "call_then_synchronize_torch": time_calls(lambda: (tickgpu.greeks(**tx, dtype=dtype, backend="gpu"),
                                                           torch.cuda.synchronize()), N),
        "call_then_stream_synchronize_torch": time_calls(lambda: (tickgpu.greeks(**tx, dtype=dtype, backend="gpu"),
                                                                  stream.synchronize()), N),
        "empty_outputs_torch": time_calls(lambda: arrays.empty_outputs(t0, (1024,), dts, 0, 0), N),
        "empty_outputs_cupy": time_calls(lambda: arrays.empty_outputs(x["spot"], (1024,), dts, 0, stream.ptr), N),
        "torch_empty_block": time_calls(lambda: torch.empty((10, 1024), dtype=tdt, device=dev), N),
        "torch_unbind_10": time_calls(lambda: block.unbind(0), N),
        "torch_attrs_7_tensors": time_calls(lambda: [(t.dtype, t.ndim, t.requires_grad, t.get_device(),
                                                      t.is_contiguous(), t.data_ptr(), len(t)) for t in tx.values()], N),
        "torch_raw_stream": time_calls(lambda: raw(0), N),
        "torch_eager_empty_like": time_calls(lambda: torch.empty_like(t0), N),
    }
    res[tag] = r
    for k, v in r.items():
        print(tag, k, round(v["p50_us"], 2))
json.dump(res, open(sys.argv[1], "w"), indent=1)
