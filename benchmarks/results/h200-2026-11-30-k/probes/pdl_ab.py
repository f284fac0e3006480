"""Probe: signal-MLP steps (64 in, hidden 256-1,024, 4 out, LayerNorm) as graphs whose kernels are
chained by programmatic dependent launch against the same graphs with plain edges, same process,
alternating rounds: graph replay alone and the bound step (NumPy in and out)."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
from tickgpu.runtime import kernel_runtime
tickgpu.warmup()
rt = kernel_runtime()
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
    for scheme in ("w8a16", "w8a8", "w16a8"):
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            models, steps = {}, {}
            for mode in ("pdl", "plain"):
                rt.programmatic = mode == "pdl"
                mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
                steps[mode] = mlp.bind(x)
                models[mode] = mlp
            rt.programmatic = True
            out = {"dims": dims, "scheme": scheme, "batch": batch,
                   "equal": bool(np.array_equal(steps["pdl"](), steps["plain"]()))}
            for rnd in range(2):
                for mode in ("pdl", "plain"):
                    prog = _gpu.plan_for(models[mode]).programs[batch]
                    r50, r99 = timed(prog.graph.replay, 2000)
                    b50, b99 = timed(steps[mode], 2000)
                    for k, v in (("replay_p50", r50), ("replay_p99", r99), ("bound_p50", b50), ("bound_p99", b99)):
                        out.setdefault(f"{mode}_{k}", []).append(v)
            for k in [k for k in out if k.endswith(("_p50", "_p99"))]:
                out[k + "_min"] = min(out[k])
            out["kernels"] = len(_gpu.plan_for(models["pdl"]).programs[batch].launches)
            print(h, scheme, batch, out["kernels"], "replay pdl %.1f plain %.1f | bound pdl %.1f (p99 %.1f) plain %.1f (p99 %.1f) | equal %s" % (
                out["pdl_replay_p50_min"], out["plain_replay_p50_min"], out["pdl_bound_p50_min"], out["pdl_bound_p99_min"],
                out["plain_bound_p50_min"], out["plain_bound_p99_min"], out["equal"]), flush=True)
            res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "pdl-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
