"""A/B of the float64 greeks kernel's CDF forms in a sustained stream (power-limited regime):
blocks of 100 back-to-back launches at n = 1e8, alternated between candidates, with SM clock and
power sampled by nvidia-smi during; and where the forms differ most, pointwise."""
import importlib.machinery, importlib.util, json, os, subprocess, sys, tempfile, time
import numpy as np
import cupy as cp

l = importlib.machinery.SourceFileLoader("ks", "scripts/kernel-sweep")
spec = importlib.util.spec_from_loader("ks", l); ks = importlib.util.module_from_spec(spec); l.exec_module(ks)
out = os.environ.get("OUT", ".")
d = tempfile.mkdtemp()
cfgs = [("f64", 128, 4, 0, 1, 0, 64, 2), ("f64", 128, 4, 0, 1, 0, 64, 1), ("f64", 128, 4, 0, 1, 0, 64, 0),
        ("f32", 256, 4, 0, 1, 0)]
if os.environ.get("AB_CONFIGS"):
    cfgs = [tuple(c) for c in json.loads(os.environ["AB_CONFIGS"])]
comp = [ks.compile_greeks(c, 90, d) for c in cfgs]
n = 10**8
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader", "-lms", "50"],
                       stdout=open(f"{out}/ab-cdf-smi.csv", "w"))
X = {"f64": ks.greeks_inputs(cp, n, np.float64), "f32": ks.greeks_inputs(cp, n, np.float32)}
outs = {dt: [cp.empty(n, dtype=np.float64 if dt == "f64" else np.float32) for _ in range(10)] for dt in X}
fns = []
for c in comp:
    dt, block, warps = c["cfg"][0], c["cfg"][1], c["cfg"][2]
    fn = cp.RawModule(path=c["cubin"]).get_function(c["entry"])
    args = ks.greeks_args(cp, X[dt], outs[dt], n)
    fns.append((c["name"], dt, lambda fn=fn, g=-(-n // block), t=warps * 32, a=args, s=c["shared"]: fn((g,), (t,), a, shared_mem=s)))
a = cp.ones(n * 129 // 16, dtype=cp.float64); b = cp.empty_like(a)
fns.append(("copy_f64_bytes", "copy", lambda: cp.copyto(b, a)))
rows = []
rounds = int(os.environ.get("AB_ROUNDS", "3"))
for rnd in range(rounds):
    # Odd rounds run the candidates in reverse order (AB_ALTERNATE=1), so that no candidate
    # always follows the same one.
    order = fns[::-1] if os.environ.get("AB_ALTERNATE") and rnd % 2 else fns
    warm, calls = int(os.environ.get("AB_WARM", "30")), int(os.environ.get("AB_CALLS", "100"))
    for name, dt, launch in order:
        for _ in range(warm):
            launch()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.Device().synchronize() if os.environ.get("AB_SYNC_WARM") else None
        t0 = time.time(); e0.record()
        for _ in range(calls):
            launch()
        e1.record(); e1.synchronize(); t1 = time.time()
        per = cp.cuda.get_elapsed_time(e0, e1) / 1e3 / calls
        nb = n * 129 if dt in ("f64", "copy") else n * 65
        rows.append({"round": rnd, "name": name, "per_launch_s": per, "TBps": nb / per / 1e12, "t0": t0, "t1": t1})
        print(rnd, f"{name:<40} {per*1e3:7.3f} ms {nb/per/1e12:6.3f} TB/s", flush=True)
smi.terminate()
if os.environ.get("AB_CONFIGS"):
    json.dump({"rows": rows, "sass": {c["name"]: c["sass"] for c in comp}}, open(f"{out}/ab-cdf.json", "w"), indent=1)
    sys.exit(0)
# pointwise: CDF 2 against 1 and 0
res = {}
for name, dt, launch in fns[:3]:
    launch(); cp.cuda.Device().synchronize()
    res[name] = [o[:2_000_000].get() for o in outs["f64"]]
names = [f[0] for f in fns[:3]]
diffs = {}
x = {k: v[:2_000_000].get() for k, v in X["f64"].items()}
for other in names[1:]:
    for gi, g in enumerate(ks.GREEK_NAMES):
        A, B = res[names[0]][gi], res[other][gi]
        rel = np.abs(A - B) / np.maximum(np.abs(B), 1e-300)
        i = int(np.nanargmax(rel))
        scale = np.abs(B).max()
        diffs[f"{other}:{g}"] = {"max_pointwise_rel": float(rel[i]), "max_over_scale": float(np.nanmax(np.abs(A - B)) / scale),
                                 "at": {k: float(v[i]) for k, v in x.items()}, "a": float(A[i]), "b": float(B[i])}
        print(other, g, diffs[f"{other}:{g}"]["max_pointwise_rel"], diffs[f"{other}:{g}"]["max_over_scale"])
json.dump({"rows": rows, "diffs": diffs, "sass": {c["name"]: c["sass"] for c in comp}}, open(f"{out}/ab-cdf.json", "w"), indent=1)
