"""Probe: where a 1,024-option greeks call's time goes (f32, arrays in): Python, staging copies, graph."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu._native import ffi, lib
from tickgpu.runtime import bind_greeks, context
tickgpu.warmup()
ctx = context()
rng = np.random.default_rng(1)
f = np.float32
def inputs(n):
    return dict(spot=rng.uniform(50, 150, n).astype(f), strike=rng.uniform(50, 150, n).astype(f),
                t=rng.uniform(.1, 2, n).astype(f), rate=rng.uniform(0, .05, n).astype(f),
                vol=rng.uniform(.1, .5, n).astype(f), div=np.zeros(n, f), call=np.ones(n, bool))
def tm(fn, r=4000):
    for _ in range(400): fn()
    ts = []
    for _ in range(r):
        a = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - a)
    ts = np.sort(np.array(ts)) / 1e3
    return {"p50": float(np.median(ts)), "p99": float(ts[int(.99 * len(ts))])}
res = {}
for n in (16, 1024, 4096):
    x = inputs(n)
    tickgpu.greeks(**x, dtype=f, backend="gpu")
    plan = ctx.ticks[("greeks", "f", n)]
    r = plan.runner
    b = bind_greeks(*(x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call")), dtype=f)
    none = ffi.new("tg_hot_copy[1]")
    d = ctx.driver
    out = {
        "full": tm(lambda: tickgpu.greeks(**x, dtype=f, backend="gpu")),
        "bound": tm(b),
    }
    # NOTE: after the calls above: each call points the out-copy at its own (since freed) block
    blk = np.empty((10, plan.m), f)
    plan.t_out[0].dst = ffi.from_buffer(blk)
    tickgpu.greeks(**x, dtype=f, backend="gpu")   # the in-copy's sources: x's arrays (alive)
    plan.t_out[0].dst = ffi.from_buffer(blk)
    out.update({
        "native_roundtrip": tm(lambda: d.roundtrip(plan.t_in, plan.k_in, plan.graph.exec, r.stream, plan.t_out, 1)),
        "native_graph_only": tm(lambda: d.roundtrip(none, 0, plan.graph.exec, r.stream, none, 0)),
        "stage_in_only": tm(lambda: lib.tg_hot_stage(plan.t_in, plan.k_in)),
        "stage_out_only": tm(lambda: lib.tg_hot_stage(plan.t_out, 1)),
        "mapped": plan.mapped, "m": plan.m,
    })
    # graph then the out-copy, the copy timed on its own right after the GPU wrote staging
    outs = []
    for _ in range(2000):
        d.roundtrip(none, 0, plan.graph.exec, r.stream, none, 0)
        a = time.perf_counter_ns(); lib.tg_hot_stage(plan.t_out, 1); outs.append(time.perf_counter_ns() - a)
    out["stage_out_after_gpu_wrote"] = float(np.median(outs[200:])) / 1e3
    res[n] = out
    print(n, json.dumps(out), flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "parts2.json"), "w"), indent=1)
