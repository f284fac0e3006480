"""The 1,024-option NumPy call (and its bound form) in blocks over time: on a fresh process, then right
after the gpu suite's 1e8-option throughput section, for ~30 s, with the SM clock, memory clock,
temperature and power sampled by nvidia-smi (every 100 ms, to OUT.smi.csv). What the suite's latency
section, run just after throughput, sees. Usage: python3 after_throughput.py OUT.json"""
import gc
import json
import subprocess
import sys
import time

import cupy as cp
import numpy as np
import torch

import tickgpu
from tickgpu.bench.gpu import bench_throughput, device_copy_bandwidth, option_inputs, stats_us
from tickgpu.runtime import bind_greeks

out = sys.argv[1]
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw.instant,pstate",
                        "--format=csv,noheader,nounits", "-lms", "100"], stdout=open(out + ".smi.csv", "w"))
tickgpu.warmup()
x = option_inputs(np, 1024, np.float32, seed=11)
names = ("spot", "strike", "t", "rate", "vol", "div", "call")
bound = bind_greeks(*(x[k] for k in names), dtype=np.float32)
call = lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu")  # noqa: E731
clock = time.perf_counter_ns


def block(fn, n=500):
    s = np.empty(n, np.int64)
    for i in range(n):
        t0 = clock()
        fn()
        s[i] = clock() - t0
    return stats_us(s)["p50_us"]


rows = []


def blocks(label, seconds, gap=0.2):
    end = time.time() + seconds
    while time.time() < end:
        rows.append({"phase": label, "t": time.time(), "call": block(call), "bound": block(bound)})
        time.sleep(gap)


for _ in range(50):
    call(); bound()
blocks("fresh", 5)
gc.disable(); blocks("fresh_gc_off", 2); gc.enable()
t0 = time.time()
bw = device_copy_bandwidth(cp, 1 << 31)
thr = bench_throughput(cp, torch, 100_000_000, bw)
t1 = time.time()
blocks("after_throughput", 30)
gc.collect(); gc.disable(); blocks("after_gc_off", 3); gc.enable()
smi.terminate()
json.dump({"throughput_s": [t0, t1], "rows": rows,
           "throughput_f32_fraction": thr["f32"].get("fraction_of_copy_bw_stream")}, open(out, "w"), indent=1)
for r in rows:
    print(r["phase"], round(r["t"] - t1, 2), r["call"], r["bound"])
