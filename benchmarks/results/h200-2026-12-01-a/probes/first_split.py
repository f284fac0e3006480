"""First call after warmup(), taken apart: the native round trip (staging, graph, wait) vs the rest.
Run in fresh processes: python3 first_split.py {tick|other}"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import tickgpu, tickgpu.runtime as rt
tickgpu.warmup()
which = sys.argv[1]
if which == "tick":
    x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
else:
    r = np.random.default_rng(1)
    x = dict(spot=r.uniform(50, 150, 4096), strike=r.uniform(50, 150, 4096), t=r.uniform(0.1, 2, 4096),
             rate=r.uniform(0, 0.05, 4096), vol=r.uniform(0.1, 0.5, 4096), div=r.uniform(0, 0.03, 4096),
             call=r.random(4096) < 0.5, dtype=np.float32)
    x = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v) for k, v in x.items()}
if len(sys.argv) > 2:   # the same kind of call once, at another size, before the measured one
    y = {k: (v[:3000] if isinstance(v, np.ndarray) else v) for k, v in x.items()}
    tickgpu.greeks(**y, backend="gpu")
    which += "+pre"
ctx = rt.context()
d = ctx.driver
real = d.roundtrip
clock = time.perf_counter_ns
rts = []
def timed(*a):
    s = clock(); real(*a); rts.append(clock() - s)
d.roundtrip = timed
def one():
    s = clock(); tickgpu.greeks(**x, backend="gpu"); return clock() - s
first = one(); second = one()
ts = [one() for _ in range(2000)]
print(json.dumps(dict(which=which, first_us=first / 1e3, second_us=second / 1e3, steady_us=float(np.median(ts)) / 1e3,
                      rt_first_us=rts[0] / 1e3, rt_second_us=rts[1] / 1e3, rt_steady_us=float(np.median(rts[2:])) / 1e3)))
