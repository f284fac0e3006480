"""Probe: the first call after warmup() in fresh processes (9 each), after different preludes: none;
one call of the same size (1,024) with other values; one call of another size (2,000)."""
import json, os, subprocess, sys
import numpy as np
CODE = r'''
import json, sys, time, numpy as np
import tickgpu
tickgpu.warmup()
prelude = sys.argv[1]
if prelude == "same_size":
    tickgpu.greeks(spot=np.full(1024, 90.0), strike=np.linspace(60, 140, 1024), t=0.25, rate=0.02, vol=0.3, backend="gpu")
elif prelude == "other_size":
    tickgpu.greeks(spot=np.full(2000, 90.0), strike=np.linspace(60, 140, 2000), t=0.25, rate=0.02, vol=0.3, backend="gpu")
elif prelude == "numpy":
    a = np.ones(1024); [np.multiply(a, a) for _ in range(50)]
elif prelude == "same_bucket":
    tickgpu.greeks(spot=np.full(1000, 90.0), strike=np.linspace(60, 140, 1000), t=0.25, rate=0.02, vol=0.3, backend="gpu")
elif prelude == "every_bucket":
    from tickgpu.runtime.staged import bucket
    sizes = sorted({bucket(n, 1 << 30) for n in range(1, 8193)})
    for n in sizes:
        for dt in (np.float64, np.float32):
            tickgpu.greeks(spot=np.full(n, 90.0, dt), strike=np.linspace(60, 140, n).astype(dt), t=0.25, rate=0.02, vol=0.3, dtype=dt, backend="gpu")
            tickgpu.greeks(spot=np.full(n, 90.0, dt), strike=np.linspace(60, 140, n).astype(dt), t=np.full(n, 0.25, dt), rate=np.full(n, 0.02, dt), vol=np.full(n, 0.3, dt), div=np.zeros(n, dt), call=np.ones(n, bool), dtype=dt, backend="gpu")
    print(len(sizes), file=sys.stderr)
x = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
clock = time.perf_counter_ns
ts = []
for i in range(2002):
    c = clock(); tickgpu.greeks(**x, backend="gpu"); ts.append(clock() - c)
print(json.dumps({"first": ts[0] / 1e3, "second": ts[1] / 1e3, "steady": float(np.median(ts[1000:])) / 1e3}))
'''
res = {}
for prelude in ("none", "same_size", "same_bucket", "every_bucket"):
    runs = []
    for _ in range(9):
        p = subprocess.run([sys.executable, "-c", CODE, prelude], capture_output=True, text=True, timeout=120)
        if p.returncode:
            print(p.stderr[-2000:]); sys.exit(1)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["first_over_steady"] = med["first"] / med["steady"]
    res[prelude] = med
    print(prelude, json.dumps(med), flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "first-variants.json"), "w"), indent=1)
