"""The mailbox hot path against the graph path: `tickgpu.greeks` on 1,024 options (and on one) from NumPy.

Side by side in one run, float32 and float64: the same call with no resident kernel open (a
replayed CUDA graph on mapped staging, tickgpu.runtime.staged) and with one open
(tickgpu.runtime.mailbox: no launch at all). The target is the floor program's "graph H2D +
kernel + D2H, 1,024 floats" times 1.3; the floor's own persistent-kernel round trip (5.3 us on
the H200, tools/floor/mailbox.cu) is what is left once Python's share is paid.
"""
from __future__ import annotations

import numpy as np

import tickgpu
from tickgpu.bench.gpu import option_inputs, time_calls

__all__ = ["bench_resident"]

N = 1024
#: Sizes timed: the 1,024-option tick the latency targets name, and a single option (the smallest tick there is).
SIZES = (N, 1)


def bench_resident(repeats: int) -> dict:
    """p50 / p99 / p99.9 of `tickgpu.greeks` on 1,024 and on 1 NumPy options: graph path vs resident kernel.

    Parameters
    ----------
    repeats : int
        Timed calls per case (at least 10,000 are taken, after a warm-up of 1,000).

    Returns
    -------
    dict
        ``{"graph_f32_1024", "resident_f32_1024", "graph_f64_1024", "resident_f64_1024"}`` and the
        same with ``_1`` (one option), ``resident_bound_...`` for the same arrays bound once
        (`bind_greeks`) and called through the open mailbox (with ``..._same_bits``: its results
        equal the unbound call's), each `time_calls`'s dict (``n``, ``p50_us``, ``p99_us``,
        ``p999_us``, ``min_us``), plus ``"speedup_p50_f32"`` / ``"speedup_p50_f64"`` (graph p50 /
        resident p50, 1,024 options; ``..._1`` for one) and ``"agree_f32"`` / ``"agree_f64"``: the
        largest relative difference between the two paths' results over both sizes (a benchmark
        of wrong answers would be worthless).

    Raises
    ------
    tickgpu.errors.BackendUnavailable
        No usable GPU.
    """
    from tickgpu import runtime
    from tickgpu.runtime import mailbox

    repeats = max(int(repeats), 10_000)
    runtime.warmup()
    res: dict = {}
    for dtype, code in ((np.float32, "f32"), (np.float64, "f64")):
        worst = 0.0
        for n in SIZES:
            x = option_inputs(np, n, dtype, seed=11)

            def call():
                return tickgpu.greeks(**x, dtype=dtype, backend="gpu")

            for r in mailbox.open_residents():
                if r.dtype == np.dtype(dtype):
                    r.close()
            res[f"graph_{code}_{n}"] = time_calls(call, repeats, warmup=1000)
            via_graph = call()
            bound = runtime.bind_greeks(*(x[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call")),
                                        dtype=dtype)
            with mailbox.resident("greeks", dtype=dtype, capacity=4096) as r:
                res[f"resident_{code}_{n}"] = time_calls(call, repeats, warmup=1000)
                via_resident = call()
                # The same arrays bound once: a binding's call through the open mailbox.
                res[f"resident_bound_{code}_{n}"] = time_calls(bound, repeats, warmup=1000)
                same = bound()
                res[f"resident_bound_{code}_{n}_same_bits"] = all(
                    np.array_equal(getattr(same, k), getattr(via_resident, k), equal_nan=True)
                    for k in ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm"))
                res[f"resident_{code}_launches"] = r.launches
            speedup = res[f"graph_{code}_{n}"]["p50_us"] / res[f"resident_{code}_{n}"]["p50_us"]
            res[f"speedup_p50_{code}" + ("" if n == N else f"_{n}")] = speedup
            for name in ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm"):
                a = np.asarray(getattr(via_graph, name), np.float64)
                b = np.asarray(getattr(via_resident, name), np.float64)
                ok = np.isfinite(a) & np.isfinite(b)
                scale = max(float(np.max(np.abs(a[ok]), initial=0.0)), 1e-300)
                worst = max(worst, float(np.max(np.abs(a[ok] - b[ok]), initial=0.0)) / scale)
        res[f"agree_{code}"] = worst
    return res
