#!/usr/bin/env python3
"""A/B of the C entry's 1,024-option float32 greeks call in one process, variants alternated in
rounds (gc off, per-call perf_counter_ns, p50 / p99 over all rounds):
  split   -- fdd2fde: launch, the Greeks' rows handed out while the GPU runs, wait (the shipped entry)
  serial  -- the same Greeks made in C, but the round trip whole before the rows (serial.c)
  before  -- as before fdd2fde: round trip whole, a tuple of rows, greeks._greeks_of in Python
and, for reference, the graph replay alone (driver.roundtrip with no copies) and the public call the
benchmark times, tickgpu.greeks(**x, dtype=np.float32, backend="gpu") (through the shipped, split
entry; added after lease 5). --with-torch: torch and CuPy imported and used first, as in the suite.
Usage: entry_ab.py SO OUT [--with-torch]"""
import ctypes, gc, json, sys, time
import numpy as np
import tickgpu
from tickgpu import _fasttick, dispatch
from tickgpu._native import ffi, lib
from tickgpu.finance import greeks as gm
from tickgpu.runtime import context, fasttick, ops

if "--with-torch" in sys.argv:   # as in `tickgpu bench --suite gpu`: torch and CuPy loaded, their contexts made
    import cupy
    import torch
    torch.ones(4, device="cuda").sum().item()
    float(cupy.ones(4).sum())
so = ctypes.CDLL(sys.argv[1])
addr = lambda name: ctypes.cast(getattr(so, name), ctypes.c_void_p).value
nat = lambda name: int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))
so.serial_init(ctypes.c_void_p(nat("tg_hot_roundtrip")), ctypes.c_void_p(nat("tg_hot_stage")))
tickgpu.warmup()
ctx = context()
n, dt = 1024, np.dtype(np.float32)
rng = np.random.default_rng(11)
x = dict(spot=rng.uniform(50, 150, n).astype(dt), strike=rng.uniform(50, 150, n).astype(dt),
         t=rng.uniform(0.05, 2, n).astype(dt), rate=rng.uniform(0, 0.05, n).astype(dt),
         vol=rng.uniform(0.1, 0.6, n).astype(dt), div=rng.uniform(0, 0.03, n).astype(dt), call=rng.random(n) < 0.5)
args = (np.float32, "gpu", *(x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call")))
ref = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
assert ctx.tickers is not None


def ticker(begin, end, result):
    fam = ops.GREEKS
    lo, hi = dispatch.gpu_range().get(fam.name, (-1, None))
    env = dispatch._ENV_DATA
    return _fasttick.Ticker(ctx, ctx.bundle, ctx.lock, fam.name, dt.char, dt.type, dt, len(fam.inputs), fam.flag_index,
                            env, dispatch._DISABLE_KEY if env is not None else b"", ops.RESIDENT,
                            fasttick._raiser(ctx.driver), begin, end, nat("tg_hot_ctx_set_current"), ctx.ctx, lo,
                            -1 if hi is None else hi, *result)


greeks_type = (gm.Greeks, gm.GREEK_NAMES)
t_split = ticker(nat("tg_hot_roundtrip_begin"), nat("tg_hot_roundtrip_end"), greeks_type)
t_serial = ticker(addr("serial_begin"), addr("serial_end"), greeks_type)
t_before = ticker(addr("serial_begin"), addr("serial_end"), (None, None))
_of = gm._greeks_of
calls = {"split": lambda: t_split.call(*args), "serial": lambda: t_serial.call(*args),
         "before": lambda: _of(t_before.call(*args))}
for name, f in calls.items():
    g = f()
    assert type(g) is gm.Greeks, name
    for k in gm.GREEK_NAMES:
        assert getattr(g, k).tobytes() == getattr(ref, k).tobytes(), (name, k)
plan = ctx.ticks[("greeks", "f", n)]
none = ffi.new("tg_hot_copy[1]")
d, r = ctx.driver, plan.runner


def graph_only():
    with ctx.lock:
        ctx.enter()
        d.roundtrip(none, 0, plan.graph.exec, r.stream, none, 0)


calls["graph_only"] = graph_only
calls["api"] = lambda: tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
times = {k: [] for k in calls}
gc.disable()
pc = time.perf_counter_ns
for rnd in range(42):
    for name, f in calls.items():
        buf = np.empty(500, np.int64)
        for i in range(500):
            t0 = pc()
            f()
            buf[i] = pc() - t0
        if rnd >= 2:
            times[name].append(buf)
gc.enable()
out = {"n": n, "dtype": "float32", "rounds": 40,
       "calls_per_round": 500,
       "taken": {"split": t_split.calls, "serial": t_serial.calls, "before": t_before.calls}}
for name, bufs in times.items():
    a = np.concatenate(bufs) / 1e3
    out[name] = {"p50_us": float(np.median(a)), "p99_us": float(np.percentile(a, 99)), "min_us": float(a.min()),
                 "round_p50s_us": [float(np.median(b) / 1e3) for b in bufs]}
print(json.dumps({k: (v if not isinstance(v, dict) or "p50_us" not in v else {q: round(w, 2) for q, w in v.items() if q != "round_p50s_us"}) for k, v in out.items()}, indent=1))
open(sys.argv[2], "w").write(json.dumps(out, indent=1))
