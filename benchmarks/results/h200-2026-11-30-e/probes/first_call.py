"""Probe: the first call after warmup() in fresh processes, split into the native round trip and the rest."""
import json, os, subprocess, sys
CODE = r'''
import time, json, numpy as np
import tickgpu
tickgpu.warmup()
from tickgpu.runtime import context
ctx = context()
d = ctx.driver
rt_ns = []
orig = d.roundtrip
def timed(*a):
    t = time.perf_counter_ns(); orig(*a); rt_ns.append(time.perf_counter_ns() - t)
d.roundtrip = timed
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
clock = time.perf_counter_ns
tot = []
for _ in range(300):
    a = clock(); tickgpu.greeks(**x, backend="gpu"); tot.append(clock() - a)
print(json.dumps(dict(total=[tot[0] / 1e3, tot[1] / 1e3, tot[2] / 1e3, float(np.median(tot[50:])) / 1e3],
                      roundtrip=[rt_ns[0] / 1e3, rt_ns[1] / 1e3, rt_ns[2] / 1e3, float(np.median(rt_ns[50:])) / 1e3])))
'''
runs = []
for _ in range(7):
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    runs.append(json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-500:]})
    print(runs[-1], flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "first-call.json"), "w") as f:
    json.dump(runs, f, indent=1)
