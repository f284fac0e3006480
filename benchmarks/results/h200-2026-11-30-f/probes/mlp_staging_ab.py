"""Probe: a signal-MLP step from NumPy with the one-pass native staging (fast) and without (general), same process."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, models
tickgpu.warmup()
rng = np.random.default_rng(3)
res = []
orig = models._gpu_step
for hidden in (256, 1024):
    for batch in (1, 16, 64):
        dims = [64, hidden, hidden, 4]
        layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
        ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
        for scheme in ("w8a16", "w8a8"):
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            out = {}
            for rnd in range(3):
                for mode in ("fast", "general"):
                    models._gpu_step = orig if mode == "fast" else (lambda *a: None)
                    for _ in range(200):
                        mlp(x)
                    t = []
                    for _ in range(1500):
                        a = time.perf_counter_ns(); mlp(x); t.append(time.perf_counter_ns() - a)
                    out.setdefault(mode, []).append(float(np.median(t)) / 1e3)
            models._gpu_step = orig
            row = dict(hidden=hidden, batch=batch, scheme=scheme, fast_us=min(out["fast"]), general_us=min(out["general"]),
                       fast_all=out["fast"], general_all=out["general"])
            print(json.dumps(row), flush=True)
            res.append(row)
with open(os.path.join(os.environ.get("OUT", "."), "mlp-staging-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
