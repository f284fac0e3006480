"""Probe: what a prepacked greeks launch + wait from Python is made of (kernel time vs launch)."""
import json, os, sys, time
import numpy as np, cupy as cp
import tickgpu
from tickgpu.runtime import context
from tickgpu.bench.gpu import time_calls
tickgpu.warmup()
ctx = context()
res = {}
for n, aligned in ((1, False), (16, True)):
    lau = ctx.launcher("greeks", "f32", n, aligned)
    ins = [cp.full(16, v, dtype=cp.float32) for v in (100.0, 100.0, 0.5, 0.01, 0.2, 0.0)]
    call = cp.ones(16, dtype=cp.uint8)
    outs = [cp.empty(16, dtype=cp.float32) for _ in range(10)]
    values = []
    for a in ins:
        values += [a.data.ptr, 0]
    values += [call.data.ptr, 0, *(o.data.ptr for o in outs), n]
    lau.args.pack(*values)
    stream = cp.cuda.Stream(non_blocking=True)
    h = stream.ptr
    r = time_calls(lambda: lau.launch(n, h, sync=True), 20000, warmup=500)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ks = []
    for _ in range(2000):
        e0.record(stream); lau.launch(n, h); e1.record(stream); e1.synchronize()
        ks.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    res[f"n{n}_{lau.kernel.variant}"] = {"launch_sync_p50_us": r["p50_us"], "launch_sync_p99_us": r["p99_us"],
                                        "kernel_event_p50_us": float(np.median(ks[200:]))}
    # an empty-grid-equivalent: the same launch with the stream-synchronise alone
    r2 = time_calls(lambda: stream.synchronize(), 20000, warmup=500)
    res[f"n{n}_sync_only_p50_us"] = r2["p50_us"]
print(json.dumps(res, indent=1))
with open(os.path.join(os.environ.get("OUT", "."), "launch-probe.json"), "w") as f:
    json.dump(res, f, indent=1)
