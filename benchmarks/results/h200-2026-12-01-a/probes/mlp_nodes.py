"""Where a signal-model step's time goes: the step's graph replayed whole, without each node in
turn, and each node alone (graphs over the step's own buffers; results of partial graphs are
meaningless, only their times count). p50 of 3,000 replays, same process."""
import json, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP
from tickgpu.quant._gpu import plan_for
from tickgpu.bench.quant import _mlp_weights

tickgpu.warmup()
clock = time.perf_counter_ns


def p50(fn, k=3000):
    for _ in range(300):
        fn()
    ts = []
    for _ in range(k):
        a = clock(); fn(); ts.append(clock() - a)
    return round(float(np.median(ts)) / 1e3, 2)


out = []
rng = np.random.default_rng(0)
for hidden in (256, 1024):
    layers, ln = _mlp_weights(rng, [64, hidden, hidden, 4])
    for scheme in ("w8a16", "w8a8"):
        mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
        for batch in (1, 16, 64):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            mlp(x)
            plan = plan_for(mlp)
            prog = plan.programs[batch]
            rt = plan.rt
            names = [v for v, _, _ in prog.launches]
            bound = mlp.bind(x)
            row = {"hidden": hidden, "scheme": scheme, "batch": batch, "nodes": names,
                   "bound_step": p50(bound), "replay": p50(prog.graph.replay)}
            prep = prog.prepared
            row["without"] = [p50(rt.capture(prep[:i] + prep[i + 1:]).replay) for i in range(len(prep))]
            row["alone"] = [p50(rt.capture([p]).replay) for p in prep]
            rt.programmatic = False
            row["replay_plain_edges"] = p50(rt.capture(prep).replay)
            rt.programmatic = True
            print(json.dumps(row), flush=True)
            out.append(row)
