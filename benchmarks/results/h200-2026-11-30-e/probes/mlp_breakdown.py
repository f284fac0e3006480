"""Probe: a quantized MLP step from NumPy: call vs plan.run vs graph replay vs device time."""
import json, os, time
import numpy as np, cupy as cp
import tickgpu
from tickgpu.bench.gpu import time_calls
from tickgpu.bench.quant import _mlp_weights
from tickgpu.quant import QuantMLP
from tickgpu.quant import _gpu
tickgpu.warmup()
res = {}
rng = np.random.default_rng(5)
n = 1024
xg = dict(spot=rng.uniform(50, 150, n).astype(np.float32), strike=rng.uniform(50, 150, n).astype(np.float32),
          t=rng.uniform(0.1, 2, n).astype(np.float32), rate=rng.uniform(0, .05, n).astype(np.float32),
          vol=rng.uniform(.1, .5, n).astype(np.float32))
res["public_greeks_1024"] = time_calls(lambda: tickgpu.greeks(**xg, dtype=np.float32, backend="gpu"), 10000)["p50_us"]
for h in (256, 1024):
    layers, ln = _mlp_weights(rng, [64, h, h, 4])
    for batch in (1, 16):
        x = (rng.standard_normal((batch, 64)) * 2).astype(np.float32)
        for scheme in ("w8a8", "w8a16"):
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
            mlp(x, check=False)
            plan = _gpu.plan_for(mlp)
            prog = plan.programs[batch]
            r = {"call": time_calls(lambda: mlp(x, check=False), 5000)["p50_us"],
                 "plan_run": time_calls(lambda: plan.run(x), 5000)["p50_us"],
                 "graph_replay": time_calls(lambda: prog.graph.replay(), 5000)["p50_us"],
                 "kernels": len(prog.launches)}
            res[f"{h}_b{batch}_{scheme}"] = r
            print(h, batch, scheme, r, flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "mlp.json"), "w") as f:
    json.dump(res, f, indent=1)
print(json.dumps(res))
