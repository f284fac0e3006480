"""Probe: first call after warmup() in fresh processes under several warm-up endings (device)."""
import json, os, subprocess, sys
CODE = r'''
import sys, time, json, ctypes, numpy as np
mode = sys.argv[1]
if "notrim" in mode:
    libc = ctypes.CDLL(None)
    libc.mallopt(-1, 1 << 30)     # M_TRIM_THRESHOLD
    libc.mallopt(-3, 1 << 30)     # M_MMAP_THRESHOLD
import tickgpu
tickgpu.warmup()
if "heap" in mode:
    bl = [np.ones((10, 1 << k)) for k in range(4, 17)] + [np.ones((10, 1 << k), np.float32) for k in range(4, 17)]
    del bl
if "extra" in mode:
    y = dict(spot=np.full(1024, 99.0), strike=np.linspace(40, 160, 1024), t=0.4, rate=0.02, vol=0.3)
    tickgpu.greeks(**y, backend="gpu")
if "sleep" in mode:
    time.sleep(0.05)
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
clock = time.perf_counter_ns
n0 = clock(); np.multiply(x["spot"], x["strike"]); n1 = clock()
tot = []
for _ in range(300):
    a = clock(); tickgpu.greeks(**x, backend="gpu"); tot.append(clock() - a)
print(json.dumps(dict(mode=mode, first=tot[0] / 1e3, second=tot[1] / 1e3, steady=float(np.median(tot[50:])) / 1e3)))
'''
res = {}
modes = sys.argv[1:] or ["base", "heap", "extra", "notrim", "notrim_heap"]
for rep in range(7):
    for mode in modes:
        r = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True)
        row = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-400:]}
        res.setdefault(mode, []).append(row)
import statistics
for mode, rows in res.items():
    ok = [r for r in rows if "first" in r]
    if ok:
        print(mode, "first/steady median", round(statistics.median(r["first"] / r["steady"] for r in ok), 2),
              "first", [round(r["first"], 1) for r in ok], "steady", round(statistics.median(r["steady"] for r in ok), 1))
    else:
        print(mode, rows[0])
with open(os.path.join(os.environ.get("OUT", "."), "first-call-modes.json"), "w") as f:
    json.dump(res, f, indent=1)
