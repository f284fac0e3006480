"""Probe: the W8A16 signal-MLP step (64 features in, hidden 256-1,024, 4 out, LayerNorm) as one
launch on a thread-block cluster against the layer-by-layer graph, same process, alternating rounds:
graph replay alone, whole calls from NumPy and the bound step; results compared."""
import json, os, sys, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
tickgpu.warmup()
rng = np.random.default_rng(5)
res = []


def timed(fn, n):
    for _ in range(200):
        fn()
    t = np.empty(n)
    for i in range(n):
        a = time.perf_counter_ns(); fn(); t[i] = time.perf_counter_ns() - a
    return float(np.median(t)) / 1e3, float(np.percentile(t, 99)) / 1e3


for h in (256, 512, 1024):
    dims = [64, h, h, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
    models = {}
    for mode in ("cluster", "split"):
        mlp = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
        if mode == "split":
            _gpu.plan_for(mlp).fused_variant = lambda m: None
        models[mode] = mlp
    for batch in (1, 8, 16, 32, 64):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        outs = {mode: mlp(x, check=False) for mode, mlp in models.items()}
        out = {"dims": dims, "scheme": "w8a16", "batch": batch,
               "max_abs_diff": float(np.abs(outs["cluster"].astype(np.float64) - outs["split"]).max()),
               "max_abs_out": float(np.abs(outs["split"]).max())}
        for rnd in range(2):
            for mode, mlp in models.items():
                prog = _gpu.plan_for(mlp).programs[batch]
                step = mlp.bind(x)
                r50, r99 = timed(prog.graph.replay, 2000)
                p50, p99 = timed(lambda: mlp(x, check=False), 2000)
                b50, b99 = timed(step, 2000)
                for k, v in (("replay_p50", r50), ("replay_p99", r99), ("call_p50", p50), ("call_p99", p99),
                             ("bound_p50", b50), ("bound_p99", b99)):
                    out.setdefault(f"{mode}_{k}", []).append(v)
                out[f"{mode}_launches"] = [(v, g) for v, g, _ in prog.launches]
        for k in [k for k in out if k.endswith(("_p50", "_p99"))]:
            out[k + "_min"] = min(out[k])
        print(h, batch, "replay cluster %.1f split %.1f | bound cluster %.1f (p99 %.1f) split %.1f | diff %.2g of %.2g" % (
            out["cluster_replay_p50_min"], out["split_replay_p50_min"], out["cluster_bound_p50_min"],
            out["cluster_bound_p99_min"], out["split_bound_p50_min"], out["max_abs_diff"], out["max_abs_out"]), flush=True)
        res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "wide-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
