"""The launch and 1,024-option latency sections of the gpu suite alone, with the floor of the same lease."""
import json, os, sys
import cupy as cp
import tickgpu
from tickgpu.bench import gpu as bg
import torch
tickgpu.warmup()
floor = bg.parse_floor(sys.argv[1])
res = {"machine": bg.machine_info(), "floor": floor, "launch": bg.bench_launch(cp, 20000),
       "latency": bg.bench_latency(torch, 10000)}
res["targets"] = bg.evaluate_targets(res)
print(json.dumps(res["targets"], indent=1))
print(json.dumps(res["launch"], indent=1))
with open(os.path.join(os.environ.get("OUT", "."), "launch-latency.json"), "w") as f:
    json.dump(res, f, indent=1)
