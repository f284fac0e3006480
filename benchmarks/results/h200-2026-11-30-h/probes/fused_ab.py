"""Probe: a 3-layer signal-MLP step, the fused kernel against the layer-by-layer graph, same process,
alternating rounds: whole calls from NumPy (p50, p99) and the graph replay alone (launch + wait)."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
tickgpu.warmup()
rng = np.random.default_rng(5)
res = []


def timed(fn, n):
    for _ in range(300):
        fn()
    t = np.empty(n)
    for i in range(n):
        a = time.perf_counter_ns(); fn(); t[i] = time.perf_counter_ns() - a
    return float(np.median(t)) / 1e3, float(np.percentile(t, 99)) / 1e3


for dims in ([12, 32, 32, 1], [64, 64, 64, 4], [64, 128, 128, 4]):
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
    for scheme in ("w8a16", "w8a8", "w16a8"):
        models = {}
        for mode in ("fused", "split"):
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
            if mode == "split":
                _gpu.plan_for(mlp).fused_variant = lambda m: None
            models[mode] = mlp
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, dims[0])).astype(np.float32)
            a, b = models["fused"](x, check=False), models["split"](x, check=False)
            out = {"dims": dims, "scheme": scheme, "batch": batch,
                   "max_abs_diff": float(np.abs(a.astype(np.float64) - b).max())}
            for rnd in range(3):
                for mode, mlp in models.items():
                    p50, p99 = timed(lambda: mlp(x, check=False), 3000)
                    prog = _gpu.plan_for(mlp).programs[batch]
                    r50, r99 = timed(prog.graph.replay, 3000)
                    out.setdefault(f"{mode}_call_p50", []).append(p50)
                    out.setdefault(f"{mode}_call_p99", []).append(p99)
                    out.setdefault(f"{mode}_replay_p50", []).append(r50)
                    out.setdefault(f"{mode}_replay_p99", []).append(r99)
                    out[f"{mode}_launches"] = [v for v, _, _ in prog.launches]
            for k in [k for k in out if k.endswith(("_p50", "_p99"))]:
                out[k + "_min"] = min(out[k])
            out["split_over_fused_call"] = out["split_call_p50_min"] / out["fused_call_p50_min"]
            print(json.dumps({k: v for k, v in out.items() if not isinstance(v, list) or k == "dims"}), flush=True)
            res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "fused-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
