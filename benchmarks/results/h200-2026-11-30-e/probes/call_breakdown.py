"""Probe: where the time of a GPU call goes (host side), on the device."""
import cProfile, io, json, os, pstats, sys, time
import numpy as np, cupy as cp
import tickgpu
from tickgpu.runtime import context, ops, staged
from tickgpu.bench.gpu import time_calls
tickgpu.warmup()
ctx = context()
res = {}
rng = np.random.default_rng(1)
n = 1024
x = dict(spot=rng.uniform(50, 150, n).astype(np.float32), strike=rng.uniform(50, 150, n).astype(np.float32),
         t=rng.uniform(0.1, 2, n).astype(np.float32), rate=rng.uniform(0, .05, n).astype(np.float32),
         vol=rng.uniform(.1, .5, n).astype(np.float32))
f32 = np.dtype(np.float32)
inp = (x["spot"], x["strike"], x["t"], x["rate"], x["vol"], 0.0, True)
res["public_1024"] = time_calls(lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), 10000)
res["ops_1024"] = time_calls(lambda: ops.greeks_arrays(inp, f32, (n,)), 10000)
plan = ctx.ticks[("greeks", "f", n)]
res["plan_mapped"] = bool(plan.mapped)
res["graph_replay_1024"] = time_calls(lambda: plan.runner.replay(plan.graph), 10000)
t_out = plan.t_out
blk = np.empty((10, plan.m), np.float32)
t_out[0].dst = staged._from_buffer(blk)
res["roundtrip_1024"] = time_calls(lambda: staged.tick(ctx, plan, t_out, 1), 10000)
# the same tick as a copy graph (H2D -> kernel -> D2H)
keep = ctx.mapped_elements
ctx.mapped_elements = 0
ctx.plans.clear(); ctx.ticks.clear()
ops.greeks_arrays(inp, f32, (n,))
res["ops_1024_copy_graph"] = time_calls(lambda: ops.greeks_arrays(inp, f32, (n,)), 10000)
plan2 = ctx.ticks[("greeks", "f", n)]
res["graph_replay_1024_copy_graph"] = time_calls(lambda: plan2.runner.replay(plan2.graph), 10000)
ctx.mapped_elements = keep
ctx.plans.clear(); ctx.ticks.clear()
ops.greeks_arrays(inp, f32, (n,))
pr = cProfile.Profile(); pr.enable()
for _ in range(5000):
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15); res["profile_public_1024"] = s.getvalue()

# CuPy 1e8
N = 100_000_000
cx = {k: cp.asarray(rng.uniform(1, 2, N).astype(np.float32)) for k in ("spot", "strike", "t", "rate", "vol")}
for _ in range(3):
    g = tickgpu.greeks(**cx, dtype=np.float32, backend="gpu")
cp.cuda.Device().synchronize()
del g
ts = []
for _ in range(20):
    a = time.perf_counter_ns(); g = tickgpu.greeks(**cx, dtype=np.float32, backend="gpu"); b = time.perf_counter_ns()
    cp.cuda.Device().synchronize(); c = time.perf_counter_ns()
    ts.append((b - a, c - a)); del g
res["cupy_1e8_host_us"] = float(np.median([t[0] for t in ts])) / 1e3
res["cupy_1e8_total_us"] = float(np.median([t[1] for t in ts])) / 1e3
ts = []
for _ in range(20):
    a = time.perf_counter_ns(); o = [cp.empty(N, cp.float32) for _ in range(10)]; ts.append(time.perf_counter_ns() - a); del o
res["cupy_empty_x10_1e8_us"] = float(np.median(ts)) / 1e3
pr = cProfile.Profile(); pr.enable()
for _ in range(20):
    g = tickgpu.greeks(**cx, dtype=np.float32, backend="gpu"); del g
pr.disable(); cp.cuda.Device().synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20); res["profile_cupy_1e8"] = s.getvalue()
for k, v in res.items():
    print(k, v if isinstance(v, str) else json.dumps(v))
with open(os.path.join(os.environ.get("OUT", "."), "prof.json"), "w") as f:
    json.dump(res, f, indent=1)
