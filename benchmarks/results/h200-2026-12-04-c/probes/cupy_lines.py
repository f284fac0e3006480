"""Line by line: where a `tickgpu.greeks` call on CuPy / PyTorch arrays (1,024 float32, call + wait)
spends its time, by sys.monitoring LINE events on the call path's functions (the time from one line
event to the next is charged to the earlier line; the callbacks' own cost inflates every line by about
the same). Usage: python3 cupy_lines.py OUT.json"""
import json
import sys
import time

import cupy as cp
import numpy as np

import tickgpu
from tickgpu.bench.gpu import option_inputs
from tickgpu.finance import _checks
from tickgpu.finance import greeks as G
from tickgpu.runtime import arrays, direct, launch, ops

tickgpu.warmup()
names = ("spot", "strike", "t", "rate", "vol", "div", "call")
funcs = [G.greeks, G.shape_and_place, G._call_flags, G._any_on_device, G._is_device_array, _checks.broadcast_values,
         _checks.shape_of, ops._call, direct.device_call, direct._device_call, direct.outputs_and_stream, direct._check_view,
         arrays.view_or_none, arrays._from_cai, arrays.empty_outputs, arrays.producer_stream, arrays.is_device_array,
         launch.BoundLaunch.__call__ if hasattr(launch, "BoundLaunch") else None, launch.ArgBuffer.pack]
codes = [f.__code__ for f in funcs if f is not None]
M = sys.monitoring
TOOL = 3
clock = time.perf_counter_ns
ev = []


def on_line(code, line):
    ev.append((code, line, clock()))


def run(x, wait, tag, calls=2000):
    vals = tuple(x[k] for k in names)
    for _ in range(200):
        tickgpu.greeks(*vals, dtype=np.float32, backend="gpu"); wait()
    M.use_tool_id(TOOL, "lines")
    M.register_callback(TOOL, M.events.LINE, on_line)
    for c in codes:
        M.set_local_events(TOOL, c, M.events.LINE)
    acc, marks = {}, []
    for _ in range(calls):
        ev.clear()
        t0 = clock()
        ev.append((None, "start", t0))
        tickgpu.greeks(*vals, dtype=np.float32, backend="gpu")
        ev.append((None, "returned", clock()))
        wait()
        ev.append((None, "waited", clock()))
        for (c0, l0, t0_), (_, _, t1) in zip(ev, ev[1:]):
            key = f"{c0.co_name}:{l0}" if c0 is not None else l0
            acc[key] = acc.get(key, 0) + (t1 - t0_)
    for c in codes:
        M.set_local_events(TOOL, c, 0)
    M.register_callback(TOOL, M.events.LINE, None)
    M.free_tool_id(TOOL)
    per = {k: v / calls / 1e3 for k, v in acc.items()}
    total = sum(per.values())
    print(tag, "total per call (instrumented)", round(total, 2))
    for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:40]:
        print(tag, f"{v:8.2f}", k)
    return {"total_us": total, "lines_us": per}


out = {}
x = option_inputs(cp, 1024, np.float32, seed=13)
out["cupy"] = run(x, cp.cuda.get_current_stream().synchronize, "cupy")
import torch  # noqa: E402

tx = {k: torch.as_tensor(v, device="cuda") for k, v in x.items()}
out["torch"] = run(tx, torch.cuda.synchronize, "torch")
json.dump(out, open(sys.argv[1], "w"), indent=1)
