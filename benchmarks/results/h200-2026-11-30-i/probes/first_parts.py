"""Probe: where the first call after warmup() spends its excess, in fresh processes (9), against the
second call and steady state: the whole tickgpu.greeks call and its parts (wrapped with timers)."""
import json, os, subprocess, sys
CODE = r'''
import json, time, numpy as np
import tickgpu
tickgpu.warmup()
from tickgpu.runtime import staged, ops
clock = time.perf_counter_ns
T = {}
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = clock(); r = f(*a, **k); T[label] = T.get(label, 0) + clock() - t; return r
    setattr(obj, name, g)
wrap(staged, "tick", "tick")
wrap(staged._TickPlan, "stage_tick", "stage_tick")
wrap(staged, "host_call", "host_call")
wrap(ops, "greeks_arrays", "ops")
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
out = []
for i in range(2003):
    T.clear()
    c = clock(); tickgpu.greeks(**x, backend="gpu"); T["total"] = clock() - c
    if i < 2 or i >= 1000:
        out.append(dict(T))
res = {"first": out[0], "second": out[1]}
for k in out[0]:
    res.setdefault("steady", {})[k] = float(np.median([o[k] for o in out[2:]]))
print(json.dumps(res))
'''
runs = []
for _ in range(9):
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    if p.returncode:
        print(p.stderr[-2000:]); sys.exit(1)
    runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
import numpy as np
summary = {}
for when in ("first", "second", "steady"):
    summary[when] = {k: float(np.median([r[when][k] for r in runs])) / 1e3 for k in runs[0][when]}
print(json.dumps(summary, indent=1))
json.dump({"runs": runs, "summary_us": summary}, open(os.path.join(os.environ.get("OUT", "."), "first-parts.json"), "w"), indent=1)
