"""Probe: W8A16 signal MLPs with a LayerNorm, the LayerNorm read into the first layer (fused) or a launch of its own."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
from tickgpu.runtime import kernel_runtime
tickgpu.warmup()
rt = kernel_runtime()

class NoLn:
    def __init__(self, rt): self._rt = rt
    def __getattr__(self, a): return getattr(self._rt, a)
    def has(self, v): return "_ln_" not in v and self._rt.has(v)

rng = np.random.default_rng(5)
res = []
for dims in ([64, 256, 256, 4], [64, 1024, 1024, 4], [12, 32, 32, 1]):
    for batch in (1, 16):
        layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
        ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
        x = rng.standard_normal((batch, dims[0])).astype(np.float32)
        a = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
        b = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
        _gpu.plan_for(b, NoLn(rt))
        ya, yb = a(x), b(x)
        out = {}
        for rnd in range(3):
            for name, mlp in (("fused", a), ("separate", b)):
                for _ in range(200):
                    mlp(x)
                t = []
                for _ in range(1500):
                    s = time.perf_counter_ns(); mlp(x); t.append(time.perf_counter_ns() - s)
                out.setdefault(name, []).append(float(np.median(t)) / 1e3)
        row = dict(dims=dims, batch=batch, fused_us=min(out["fused"]), separate_us=min(out["separate"]),
                   launches=[len(a._gpu_plan.programs[batch].launches), len(b._gpu_plan.programs[batch].launches)],
                   max_rel_diff=float(np.max(np.abs(ya - yb)) / np.max(np.abs(yb))))
        print(json.dumps(row), flush=True)
        res.append(row)
with open(os.path.join(os.environ.get("OUT", "."), "w8a16-ln-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
