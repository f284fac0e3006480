"""Probe: signal-MLP steps (64 in, hidden 256-1,024, 4 out, LayerNorm) whose hidden layers quantize
their activations in the GEMM's prologue ("aq": 4 kernels) against the activation kernel + GEMM
("act": 6 kernels), same process, alternating rounds: graph replay alone and the bound step."""
import json, os, time
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
    for scheme in os.environ.get("SCHEMES", "w8a8,w16a8,w16a16").split(","):
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            models, steps = {}, {}
            for mode in ("aq", "act"):
                mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
                if mode == "act":
                    _gpu.plan_for(mlp)._aq_launch = lambda *a: None
                steps[mode] = mlp.bind(x)
                models[mode] = mlp
            out = {"dims": dims, "scheme": scheme, "batch": batch,
                   "equal": bool(np.array_equal(steps["aq"](), steps["act"]())),
                   "kernels": {m: [v for v, _, _ in _gpu.plan_for(models[m]).programs[batch].launches] for m in models}}
            for rnd in range(2):
                for mode in ("aq", "act"):
                    prog = _gpu.plan_for(models[mode]).programs[batch]
                    r50, r99 = timed(prog.graph.replay, 2000)
                    b50, b99 = timed(steps[mode], 2000)
                    for k, v in (("replay_p50", r50), ("replay_p99", r99), ("bound_p50", b50), ("bound_p99", b99)):
                        out.setdefault(f"{mode}_{k}", []).append(v)
            for k in [k for k in out if k.endswith(("_p50", "_p99"))]:
                out[k + "_min"] = min(out[k])
            print(h, scheme, batch, len(out["kernels"]["aq"]), len(out["kernels"]["act"]),
                  "replay aq %.1f act %.1f | bound aq %.1f (p99 %.1f) act %.1f (p99 %.1f) | equal %s" % (
                out["aq_replay_p50_min"], out["act_replay_p50_min"], out["aq_bound_p50_min"], out["aq_bound_p99_min"],
                out["act_bound_p50_min"], out["act_bound_p99_min"], out["equal"]), flush=True)
            res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "aq-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
