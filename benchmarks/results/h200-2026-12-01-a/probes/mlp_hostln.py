"""Would a W8A16 step without its LayerNorm node (LayerNorm done on the host while staging) pay
for GEMM1 reading its float16 activations across PCIe? The step's graph without the LN node, with
GEMM1's activations in device memory (as now) or in mapped host memory. p50 of 3,000 replays."""
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


rng = np.random.default_rng(0)
for hidden in (256, 1024):
    layers, ln = _mlp_weights(rng, [64, hidden, hidden, 4])
    mlp = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
    for batch in (1, 4, 16, 32, 64):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        mlp(x)
        plan = plan_for(mlp)
        prog = plan.programs[batch]
        rt = plan.rt
        (v0, g0, a0), (v1, g1, a1) = prog.launches[0], prog.launches[1]
        h = a0[3]                                   # the LayerNorm's float16 output = GEMM1's A
        hm = rt.mapped(h.shape, "float16")
        hm.host[...] = 0
        g1_mapped = rt.prepare(v1, g1, [hm if a is h else a for a in a1])
        rest = prog.prepared[2:]
        row = {"hidden": hidden, "batch": batch, "gemm1": v1,
               "replay": p50(prog.graph.replay),
               "no_ln_a_device": p50(rt.capture(prog.prepared[1:]).replay),
               "no_ln_a_mapped": p50(rt.capture([g1_mapped] + rest).replay)}
        print(json.dumps(row), flush=True)
