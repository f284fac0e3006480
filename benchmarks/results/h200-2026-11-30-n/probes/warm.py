import subprocess, sys, json, numpy as np
CODE = r'''
import time, json, gc, numpy as np
V = {v}
t0 = time.perf_counter(); import tickgpu; t1 = time.perf_counter()
tickgpu.warmup(); t2 = time.perf_counter()
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
if V & 2:
    for _ in range(20):
        for dt in (np.float32, np.float64):
            k = np.linspace(80.0, 120.0, 1000).astype(dt)
            tickgpu.greeks(np.full(1000, 100.0, dt), k, dt(0.5), 0.01, 0.2, dtype=dt, backend="gpu")
if V & 1:
    gc.collect()
if V & 4:
    gc.freeze()
clock = time.perf_counter_ns
def numpy_work(s=x["spot"], k=x["strike"]):
    return [np.multiply(s, k) for _ in range(10)]
n0 = clock(); numpy_work(); n1 = clock()
c0 = clock(); tickgpu.greeks(**x, backend="gpu"); c1 = clock()
c2 = clock(); tickgpu.greeks(**x, backend="gpu"); c3 = clock()
ts = []
for _ in range(2000):
    a = clock(); tickgpu.greeks(**x, backend="gpu"); ts.append(clock() - a)
print(json.dumps(dict(first=(c1 - c0) / 1e3, second=(c3 - c2) / 1e3, steady=float(np.median(ts)) / 1e3, numpy_first=(n1 - n0) / 1e3)))
'''
res = {}
for rnd in range(2):
    for v in (0, 1, 2, 3, 5):
        out = []
        for _ in range(5):
            p = subprocess.run([sys.executable, "-c", CODE.replace("{v}", str(v))], capture_output=True, text=True, timeout=120)
            if p.returncode:
                print(p.stderr[-1500:]); sys.exit(1)
            out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        res.setdefault(v, []).extend(out)
for v, out in res.items():
    med = {k: round(float(np.median([o[k] for o in out])), 1) for k in out[0]}
    print("variant", v, med, "first/steady", round(med["first"] / med["steady"], 2), "firsts", [round(o["first"]) for o in out])
