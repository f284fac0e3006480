import sys, os
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/gpu")
import numpy as np, tickgpu, tickgpu.runtime as rt
from pathlib import Path
import importlib.util
spec = importlib.util.spec_from_file_location("t", "tests/gpu/test_gpu_ops.py"); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle"); rt.warmup()
np.set_printoptions(precision=17)
for seed in map(int, sys.argv[1:]):
    rng = np.random.default_rng(seed)
    for case in range(400):
        dtype = (np.float64, np.float32)[int(rng.integers(2))]
        strict = bool(rng.random() < 0.3)
        n = int((1, 3, 17, 1024)[rng.integers(4)])
        iv = bool(rng.integers(2))
        base = m._iv_inputs(rng, n, dtype) if iv else m._bsm(rng, n, dtype)
        names = list(base)
        args = {k: (base[k] if k == "call" or rng.random() < 0.6 else m._odd_value(rng, n, base[k])) for k in names}
        with np.errstate(all="ignore"):
            outs = {}
            for b in ("cpu", "gpu"):
                try:
                    outs[b] = (tickgpu.implied_vol(**args, dtype=dtype, backend=b, return_status=True) if iv
                               else tickgpu.greeks(**args, dtype=dtype, backend=b).as_dict())
                except Exception as e:
                    outs[b] = e
        c, g = outs["cpu"], outs["gpu"]
        if isinstance(c, Exception) or isinstance(g, Exception):
            continue
        if iv:
            bad = np.flatnonzero((np.asarray(c[1]) != np.asarray(g[1])).ravel())
            what = [("status", c[1], g[1]), ("vol", c[0], g[0])]
        else:
            bad = np.flatnonzero((np.isnan(c["price"]) != np.isnan(g["price"])).ravel())
            what = [(k, c[k], g[k]) for k in ("price", "delta", "gamma")]
        if bad.size:
            shape = np.asarray(what[0][1]).shape
            print(f"seed {seed} case {case} {'iv' if iv else 'greeks'} {np.dtype(dtype).name} n={n} bad {bad[:5]} of {bad.size}")
            for i in bad[:3]:
                vals = {k: np.broadcast_to(np.asarray(v), shape).ravel()[i] if not isinstance(v, (str, type(None))) else v for k, v in args.items()}
                print("  args", {k: (repr(v), type(args[k]).__name__, str(getattr(args[k], 'dtype', ''))) for k, v in vals.items()})
                for name, cc, gg in what:
                    print("  ", name, "cpu", np.asarray(cc).ravel()[i], "gpu", np.asarray(gg).ravel()[i])
