"""Probe: W8A8 / W16A8 layer-by-layer steps whose hidden layers quantize their input inside the GEMM
("_qa") against an activation kernel before each GEMM, same process, alternating rounds."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP, _gpu
tickgpu.warmup()
rng = np.random.default_rng(9)
res = []


def timed(fn, n):
    for _ in range(300):
        fn()
    t = np.empty(n)
    for i in range(n):
        a = time.perf_counter_ns(); fn(); t[i] = time.perf_counter_ns() - a
    return float(np.median(t)) / 1e3


for dims in ([64, 256, 256, 4], [64, 1024, 1024, 4]):
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
    for scheme in ("w8a8", "w16a8"):
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, dims[0])).astype(np.float32)
            models = {}
            for mode in ("qa", "act"):
                mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
                if mode == "act":
                    _gpu.plan_for(mlp)._quantizing_gemm = lambda *a: None
                models[mode] = mlp
            a, b = models["qa"](x, check=False), models["act"](x, check=False)
            out = {"dims": dims, "scheme": scheme, "batch": batch, "bit_equal": bool(np.array_equal(a, b))}
            for rnd in range(3):
                for mode, mlp in models.items():
                    prog = _gpu.plan_for(mlp).programs[batch]
                    out.setdefault(f"{mode}_call_p50", []).append(timed(lambda: mlp(x, check=False), 3000))
                    out.setdefault(f"{mode}_replay_p50", []).append(timed(prog.graph.replay, 3000))
                    out[f"{mode}_launches"] = [v for v, _, _ in prog.launches]
            for k in [k for k in out if k.endswith("_p50")]:
                out[k + "_min"] = min(out[k])
            print(dims, scheme, batch, "replay qa/act %.1f/%.1f  call %.1f/%.1f  equal %s" % (
                out["qa_replay_p50_min"], out["act_replay_p50_min"], out["qa_call_p50_min"],
                out["act_call_p50_min"], out["bit_equal"]), flush=True)
            res.append(out)
with open(os.path.join(os.environ.get("OUT", "."), "qa-ab.json"), "w") as f:
    json.dump(res, f, indent=1)
