import sys, time, inspect, textwrap, numpy as np, cupy as cp
import tickgpu
from tickgpu.bench.gpu import option_inputs
from tickgpu.runtime import direct, ops, context
tickgpu.warmup()
src = inspect.getsource(direct.device_call).splitlines()
out = []
# a timestamp before every statement at the with-block's indentation (8 spaces), and at return
for line in src:
    stripped = line.lstrip()
    ind = len(line) - len(stripped)
    if ind == 8 and stripped and not stripped.startswith(("#", ")", "]", "else", "elif")) and not line.rstrip().endswith(","):
        out.append(" " * 8 + f"_T.append((_clock(), {len(out)}))")
    out.append(line)
code = "\n".join(out)
ns = dict(vars(direct)); ns["_T"] = T = []; ns["_clock"] = time.perf_counter
exec(code, ns)
dc = ns["device_call"]
ctx = context()
n = 1024
for dtype in (np.float32,):
    x = option_inputs(cp, n, dtype)
    ins = tuple(x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call"))
    dt = np.dtype(dtype)
    acc = {}
    for it in range(3000):
        T.clear()
        r = dc(ctx, ops.GREEKS, dt, (n,), ins, (), None)
        T.append((time.perf_counter(), -1))
        del r
        if it >= 300:
            for (t0, i), (t1, _) in zip(T, T[1:]):
                acc.setdefault(i, []).append((t1 - t0) * 1e6)
    lines = code.splitlines()
    for i, v in sorted(acc.items()):
        print(f"{np.median(v):7.2f} us  {lines[i + 1].strip()[:100]}")
clock = time.perf_counter
f = lambda: tickgpu.greeks(**x, dtype=dt, backend="gpu")
ts = []
for it in range(3000):
    a = clock(); r = f(); ts.append((clock() - a) * 1e6); del r
print("public call p50", np.median(ts[300:]))
ts = []
for it in range(3000):
    a = clock(); r = direct.device_call(ctx, ops.GREEKS, dt, (n,), ins, (), None); ts.append((clock() - a) * 1e6); del r
print("device_call p50", np.median(ts[300:]))
