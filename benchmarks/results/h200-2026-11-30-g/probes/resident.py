"""Where the resident (mailbox) greeks call spends its time, on the device."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu import runtime as rt
from tickgpu.runtime import mailbox as mb
from tickgpu._native import ffi, lib

rt.init(); rt.warmup()
rng = np.random.default_rng(1)
res = {}
def p50(f, reps=3000, warm=200):
    for _ in range(warm): f()
    ts = np.empty(reps)
    for i in range(reps):
        a = time.perf_counter_ns(); f(); ts[i] = time.perf_counter_ns() - a
    return {"p50_us": float(np.median(ts) / 1e3), "p99_us": float(np.percentile(ts, 99) / 1e3)}

for dt in (np.float32, np.float64):
  for n in (1, 64, 1024):
    x = dict(spot=rng.uniform(80, 120, n).astype(dt), strike=rng.uniform(80, 120, n).astype(dt),
             t=rng.uniform(0.1, 2, n).astype(dt), rate=rng.uniform(0, 0.05, n).astype(dt),
             vol=rng.uniform(0.1, 0.5, n).astype(dt), div=rng.uniform(0, 0.03, n).astype(dt), call=rng.random(n) < 0.5)
    key = f"{np.dtype(dt).name}_n{n}"
    res[f"graph_{key}"] = p50(lambda: tickgpu.greeks(**x, dtype=dt, backend="gpu"))
    for blocks in (1, 2):
        with mb.resident("greeks", dtype=dt, capacity=4096, blocks=blocks) as r:
            res[f"resident_b{blocks}_{key}"] = p50(lambda: r(**x))
            # the native round trip alone, into a block kept alive here
            blk = np.empty((10, n), dt)
            r(**x)
            vals = [x[k] for k in ("spot", "strike", "t", "rate", "vol", "div")] + [x["call"].view(np.uint8)]
            for k, v in enumerate(vals):
                r._in_ptr[2 * k] = ffi.from_buffer(v); r._in_stride[2 * k + 1] = 1
            out = ffi.from_buffer(blk)
            call = lambda: lib.tg_mailbox_call_block(r._box, n, r._in, out, r._timeout_ns, r._status)
            assert call() == 0
            res[f"native_b{blocks}_{key}"] = p50(call)
            # all inputs one value (nothing per option to read across the link but element 0)
            for k in range(7): r._in_stride[2 * k + 1] = 0
            res[f"native_scalar_b{blocks}_{key}"] = p50(call)
        print(key, blocks, {k: round(v["p50_us"], 2) for k, v in res.items() if key in k and f"b{blocks}" in k or k == f"graph_{key}"}, flush=True)
out = os.environ.get("OUT", "/tmp"); json.dump(res, open(os.path.join(out, "resident.json"), "w"), indent=1)
