"""Probe: does the CPU a caller runs on move the round trip? floor graph / mapped / mailbox and tickgpu greeks."""
import json, os, subprocess, sys, time
OUT = os.environ.get("OUT", ".")
CODE = r'''
import os, time, json, numpy as np, tickgpu
from tickgpu.runtime import bind_greeks
tickgpu.warmup()
rng = np.random.default_rng(1); n = 1024; f = np.float32
x = dict(spot=rng.uniform(50,150,n).astype(f), strike=rng.uniform(50,150,n).astype(f), t=rng.uniform(.1,2,n).astype(f),
         rate=rng.uniform(0,.05,n).astype(f), vol=rng.uniform(.1,.5,n).astype(f), div=np.zeros(n,f), call=np.ones(n,bool))
b = bind_greeks(*(x[k] for k in ("spot","strike","t","rate","vol","div","call")), dtype=f)
def tm(fn, r=5000):
    for _ in range(500): fn()
    ts = []
    for _ in range(r):
        a = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - a)
    ts = np.sort(ts) / 1e3
    return [float(np.median(ts)), float(ts[int(0.99 * len(ts))])]
from tickgpu.quant import QuantMLP
W = [rng.standard_normal((256, 64)).astype(np.float32) * 0.1, rng.standard_normal((256, 256)).astype(np.float32) * 0.05, rng.standard_normal((4, 256)).astype(np.float32) * 0.05]
B = [np.zeros(256, np.float32), np.zeros(256, np.float32), np.zeros(4, np.float32)]
qm = {}
for sch in ("w8a16", "w8a8"):
    try:
        m = QuantMLP(list(zip(W, B)), layernorm=(np.ones(64, np.float32), np.zeros(64, np.float32)), scheme=sch, backend="gpu")
        xin = rng.standard_normal((1, 64)).astype(np.float32)
        qm[sch] = tm(lambda: m(xin), 3000)
    except Exception as e:
        qm[sch] = repr(e)[:200]
print(json.dumps(dict(quant=qm, full=tm(lambda: tickgpu.greeks(**x, dtype=f, backend="gpu")), bound=tm(b), cpu=os.sched_getaffinity(0).__len__())))
'''
def floor(prefix):
    out = subprocess.run(prefix + ["/tmp/floor"], capture_output=True, text=True).stdout
    out += subprocess.run(prefix + ["/tmp/mbfloor"], capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        for key in ("graph(1 empty kernels)", "graph H2D+kernel+D2H 1024 floats", "zero-copy mapped kernel 1024 floats",
                    "MAILBOX n=  1024", "empty kernel launch+sync", "pinned H2D+kernel+D2H 1024 floats", "graph H2D+kernel+D2H 4096 floats"):
            if key in line and "p50=" in line:
                res[key] = float(line.split("p50=")[1].split()[0])
    return res
ncpu = os.cpu_count()
sets = {"all": None}
try:
    bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    dev = "/sys/bus/pci/devices/" + bus[4:].lower()
    local = open(dev + "/local_cpulist").read().strip(); node = open(dev + "/numa_node").read().strip()
except Exception as e:
    local, node = None, repr(e)
print("gpu numa node", node, "local cpus", local, flush=True)
res = {"numa_node": node, "local_cpulist": local, "ncpu": ncpu, "runs": []}
for rnd in range(8):
    for name, cpus in sets.items():
        prefix = [] if cpus is None else ["taskset", "-c", cpus]
        fl = floor(prefix)
        p = subprocess.run(prefix + [sys.executable, "-c", CODE], capture_output=True, text=True)
        tg = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-300:]}
        r = dict(round=rnd, set=name, cpus=cpus, floor=fl, tickgpu=tg)
        res["runs"].append(r)
        print(json.dumps(r), flush=True)
json.dump(res, open(os.path.join(OUT, "affinity.json"), "w"), indent=1)
