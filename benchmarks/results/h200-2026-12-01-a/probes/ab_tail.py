"""A/B in one process: W8A16 steps with the tail kernel (the output layer in the last hidden layer's
launch) and the same model's plan with every layer apart, alternating rounds of 1,000 bound steps
and graph replays; p50 of each arm over its rounds."""
import json, time
import numpy as np
import tickgpu
from tickgpu.quant import QuantMLP
from tickgpu.quant._gpu import plan_for
from tickgpu.bench.quant import _mlp_weights

tickgpu.warmup()
clock = time.perf_counter_ns


def samples(fn, k=1000):
    out = []
    for _ in range(k):
        a = clock(); fn(); out.append(clock() - a)
    return out


rng = np.random.default_rng(0)
for hidden in (256, 512, 1024):
    layers, ln = _mlp_weights(rng, [64, hidden, hidden, 4])
    tail = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
    apart = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
    for batch in (1, 16, 32):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        tail(x)
        plan_for(apart)._tail = lambda m: None
        y_a = apart(x)
        pt, pa = plan_for(tail).programs[batch], plan_for(apart).programs[batch]
        bt, ba = tail.bind(x), apart.bind(x)
        for f in (bt, ba, pt.graph.replay, pa.graph.replay):
            samples(f, 300)
        s = {"bt": [], "ba": [], "rt": [], "ra": []}
        for _ in range(6):
            s["bt"] += samples(bt); s["ba"] += samples(ba)
            s["rt"] += samples(pt.graph.replay); s["ra"] += samples(pa.graph.replay)
        med = {k: round(float(np.median(v)) / 1e3, 2) for k, v in s.items()}
        diff = float(np.abs(tail(x).astype(np.float64) - apart(x)).max() / max(np.abs(apart(x)).max(), 1e-30))
        print(json.dumps({"hidden": hidden, "batch": batch, "launches_tail": len(pt.launches),
                          "launches_apart": len(pa.launches), "bound_tail": med["bt"], "bound_apart": med["ba"],
                          "replay_tail": med["rt"], "replay_apart": med["ra"], "max_rel_diff": diff}), flush=True)
