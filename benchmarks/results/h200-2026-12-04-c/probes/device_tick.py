"""The gpu suite's device-tick section alone (tickgpu.bench.gpu.bench_device_tick), with the floor's
C launch figure beside it where a floor output is given. Usage: python3 device_tick.py OUT.json [floor.txt]"""
import json
import sys

import cupy as cp
import torch

import tickgpu
from tickgpu.bench.gpu import bench_device_tick, parse_floor

tickgpu.warmup()
res = {"device_tick": bench_device_tick(cp, torch, 10_000)}
if len(sys.argv) > 2:
    res["floor"] = parse_floor(sys.argv[2])
for tag, r in res["device_tick"].items():
    for k, v in r.items():
        print(tag, k, v["p50_us"] if isinstance(v, dict) else v)
json.dump(res, open(sys.argv[1], "w"), indent=1, default=str)
