"""A `tickgpu.greeks` call on CuPy (and PyTorch) arrays taken apart, each part timed alone (p50 of
5,000) and, in one run of the whole call, every helper it goes through timed inclusively by a
wrapper (per call, us). Usage: python3 cupy_parts.py OUT.json"""
import functools
import gc
import json
import sys
import time

import cupy as cp
import numpy as np

import tickgpu
from tickgpu import dispatch
from tickgpu.bench.gpu import option_inputs, time_calls
from tickgpu.finance import greeks as G
from tickgpu.runtime import arrays, direct, ops

tickgpu.warmup()
names = ("spot", "strike", "t", "rate", "vol", "div", "call")
R = 5000


def parts(x, wait, tag):
    vals = tuple(x[k] for k in names)
    f32 = np.dtype(np.float32)
    res = {}
    call = lambda: tickgpu.greeks(*vals, dtype=np.float32, backend="gpu")  # noqa: E731
    res["call_wait"] = time_calls(lambda: (call(), wait()), R)
    gc.disable()
    res["call_wait_gc_off"] = time_calls(lambda: (call(), wait()), R)
    gc.enable()
    # the call without dropping its result inside the timed region: results kept, dropped later
    keep = [None] * R
    s = np.empty(R, np.int64)
    for i in range(R):
        t0 = time.perf_counter_ns()
        keep[i] = call()
        wait()
        s[i] = time.perf_counter_ns() - t0
    d = np.empty(R, np.int64)
    for i in range(R):
        t0 = time.perf_counter_ns()
        keep[i] = None
        d[i] = time.perf_counter_ns() - t0
    res["call_wait_result_kept"] = float(np.median(s)) / 1e3
    res["drop_result"] = float(np.median(d)) / 1e3
    fast = G._fast
    if fast is not None:
        res["c_entry_declines"] = time_calls(lambda: fast(np.float32, "gpu", *vals), R)
    res["shape_and_place"] = time_calls(lambda: G.shape_and_place(G._ARG_NAMES, vals), R)
    res["call_flags"] = time_calls(lambda: G._call_flags(vals[6]), R)
    res["choose"] = time_calls(lambda: dispatch.choose("greeks", 1024, "gpu", on_device=True), R)
    res["greeks_arrays_wait"] = time_calls(lambda: (ops.greeks_arrays(vals, f32, (1024,), True), wait()), R)
    outs = ops.greeks_arrays(vals, f32, (1024,), True)
    res["greeks_of"] = time_calls(lambda: G._greeks_of(outs), R)
    res["views_7"] = time_calls(lambda: [arrays.view_or_none(v, n, 1, i == 0) for i, (n, v) in enumerate(zip(names, vals))], R)
    ctx = tickgpu.runtime.context()
    fam = ops.GREEKS
    views = {n: arrays.view_or_none(v, n, 1, True) for n, v in zip(names, vals)}
    odts = [fam.out_dtype(role, f32) for _, role in fam.outputs]
    res["outputs_and_stream"] = time_calls(lambda: direct.outputs_and_stream(ctx, fam, views, (1024,), odts), R)
    res["empty_outputs"] = time_calls(lambda: arrays.empty_outputs(vals[0], (1024,), odts, 0), R)
    for k, v in res.items():
        print(tag, k, v["p50_us"] if isinstance(v, dict) else v, flush=True)
    # inclusive time of every helper, one run of R calls
    acc = {}

    def wrap(mod, name):
        f = getattr(mod, name)

        @functools.wraps(f)
        def w(*a, **k):
            t0 = time.perf_counter_ns()
            try:
                return f(*a, **k)
            finally:
                e = acc.setdefault(f"{mod.__name__}.{name}", [0, 0])
                e[0] += time.perf_counter_ns() - t0
                e[1] += 1
        setattr(mod, name, w)
        return mod, name, f

    from tickgpu.finance import _checks
    saved = [wrap(m, n) for m, n in ((G, "shape_and_place"), (G, "_call_flags"), (G, "_greeks_of"), (G, "_any_on_device"),
                                     (_checks, "broadcast_values"), (dispatch, "choose"), (ops, "greeks_arrays"), (ops, "_call"),
                                     (direct, "device_call"), (direct, "_device_call"), (direct, "view_or_none"),
                                     (direct, "_check_view"), (direct, "outputs_and_stream"), (direct, "empty_outputs"),
                                     (direct, "_launch_of"), (direct, "producer_stream"))]
    t0 = time.perf_counter_ns()
    for _ in range(R):
        call()
        wait()
    total = (time.perf_counter_ns() - t0) / R / 1e3
    for m, n, f in saved:
        setattr(m, n, f)
    res["wrapped_total_per_call_us"] = total
    res["inclusive_per_call_us"] = {k: v[0] / R / 1e3 for k, v in acc.items()}
    res["calls_per_call"] = {k: v[1] / R for k, v in acc.items()}
    for k, v in sorted(res["inclusive_per_call_us"].items(), key=lambda kv: -kv[1]):
        print(tag, "  ", k, round(v, 2), res["calls_per_call"][k])
    print(tag, "wrapped total", round(total, 2))
    return res


out = {}
x = option_inputs(cp, 1024, np.float32, seed=13)
out["cupy"] = parts(x, cp.cuda.get_current_stream().synchronize, "cupy")
import torch  # noqa: E402

tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
out["torch"] = parts(tx, torch.cuda.synchronize, "torch")
t = tx["spot"]
out["torch_cai"] = time_calls(lambda: t.__cuda_array_interface__, R)
out["torch_attrs"] = time_calls(lambda: (t.data_ptr(), t.shape, t.dtype, t.is_contiguous(), t.device.index), R)
out["torch_current_stream"] = time_calls(lambda: torch.cuda.current_stream(t.device).cuda_stream, R)
out["torch_empty"] = time_calls(lambda: torch.empty(10240, dtype=torch.float32, device="cuda"), R)
out["torch_unbind"] = time_calls(lambda: torch.empty(10, 1024, dtype=torch.float32, device="cuda").unbind(0), R)
for k in ("torch_cai", "torch_attrs", "torch_current_stream", "torch_empty", "torch_unbind"):
    print(k, out[k]["p50_us"])
json.dump(out, open(sys.argv[1], "w"), indent=1)
