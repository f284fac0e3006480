"""Probe: a 3-layer signal-MLP step of hidden 256-1024 (64 features in, 4 out, LayerNorm), the
layer-by-layer kernels as stages of one kernel (one cooperative launch; and a launch a stage) against the layer-by-layer graph,
same process, alternating rounds: whole calls from NumPy and the graph replay alone."""
import json, os, sys, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
tickgpu.warmup()
rng = np.random.default_rng(5)
res = []


class NoCoop:
    def __init__(self, rt):
        self._rt = rt

    def __getattr__(self, name):
        if name == "co_resident":
            raise AttributeError(name)
        return getattr(self._rt, name)


def timed(fn, n):
    for _ in range(200):
        fn()
    t = np.empty(n)
    for i in range(n):
        a = time.perf_counter_ns(); fn(); t[i] = time.perf_counter_ns() - a
    return float(np.median(t)) / 1e3, float(np.percentile(t, 99)) / 1e3


widths = [int(w) for w in sys.argv[1:]] or [256, 512, 1024]
for h in widths:
    dims = [64, h, h, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
    for scheme in ("w8a16", "w8a8", "w16a8"):
        models = {}
        for mode in ("coop", "staged", "split"):
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
            plan = _gpu.plan_for(mlp)
            if mode == "split":
                plan.fused_variant = lambda m: None
            if mode == "staged":
                plan.rt = NoCoop(plan.rt)
            models[mode] = mlp
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            outs = {mode: mlp(x, check=False) for mode, mlp in models.items()}
            out = {"dims": dims, "scheme": scheme, "batch": batch,
                   "coop_vs_split_max_abs": float(np.abs(outs["coop"].astype(np.float64) - outs["split"]).max()),
                   "coop_vs_staged_equal": bool(np.array_equal(outs["coop"], outs["staged"]))}
            for rnd in range(2):
                for mode, mlp in models.items():
                    prog = _gpu.plan_for(mlp).programs[batch]
                    p50, p99 = timed(lambda: mlp(x, check=False), 2000)
                    r50, r99 = timed(prog.graph.replay, 2000)
                    for k, v in (("call_p50", p50), ("call_p99", p99), ("replay_p50", r50), ("replay_p99", r99)):
                        out.setdefault(f"{mode}_{k}", []).append(v)
                    out[f"{mode}_launches"] = [(v, g[0], a[-2:]) for v, g, a in [(v, g, a[-2:]) for v, g, a in prog.launches]]
            for k in [k for k in out if k.endswith(("_p50", "_p99"))]:
                out[k + "_min"] = min(out[k])
            out["split_over_coop_replay"] = out["split_replay_p50_min"] / out["coop_replay_p50_min"]
            print(dims[1], scheme, batch, "replay coop %.1f staged %.1f split %.1f | call coop %.1f split %.1f | equal %s maxdiff %.2g" % (
                out["coop_replay_p50_min"], out["staged_replay_p50_min"], out["split_replay_p50_min"],
                out["coop_call_p50_min"], out["split_call_p50_min"], out["coop_vs_staged_equal"], out["coop_vs_split_max_abs"]), flush=True)
            res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "step-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
