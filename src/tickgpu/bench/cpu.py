"""`tickgpu bench --suite cpu`: the native CPU core side by side with what a user would run otherwise.

Sections (each in one run, on one machine, same inputs):

- greeks: tickgpu on 1 thread and on all threads (native entry point, preallocated outputs), the
  public ``tickgpu.greeks`` call, and a NumPy/SciPy vectorized float64 implementation, at 1e3, 1e5
  and 1e6 options; thread scaling at the largest size.
- implied_vol: tickgpu (1 thread, all threads, public call) against vollib and py_lets_be_rational
  loops on a subsample, and QuantLib's impliedVolatility loop on a smaller one; options/s per core.
- surface: ``VolSurface.vol`` against a NumPy bilinear interpolation in variance.
- book: replay of the bundled AMZN day (parsing excluded) and of a synthetic consistent stream,
  tickgpu's Book against a pure-Python book; messages/s.

Every tickgpu result is compared with the reference it is timed against (max abs difference in
the JSON), so a wrong fast answer shows. Targets (PASS/FAIL): greeks >= 2x NumPy/SciPy on one
thread, implied vol >= 3M options/s per core, book >= 5M messages/s per core.
"""
from __future__ import annotations

import math
import time

import numpy as np

import tickgpu
from tickgpu.bench import references as ref
from tickgpu.bench.common import (add_ratios, case, machine_info, print_section, print_targets, target, time_call,
                                  write_results)

GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
TARGET_GREEKS_SPEEDUP = 2.0
TARGET_IV_PER_CORE = 3e6
TARGET_BOOK_PER_CORE = 5e6


def option_inputs(n: int, seed: int = 5, *, min_days: int = 1, moneyness=(0.5, 1.5)) -> dict[str, np.ndarray]:
    """A realistic mixed book of options: strikes 50-150 % of spot, 1 day to 2 years (whole
    days, so QuantLib sees the same t), vols 10-80 %, calls and puts."""
    rng = np.random.default_rng(seed)
    days = rng.integers(min_days, 731, n)
    return {
        "spot": np.full(n, 100.0),
        "strike": rng.uniform(100.0 * moneyness[0], 100.0 * moneyness[1], n),
        "t": days / 365.0,
        "rate": np.full(n, 0.03),
        "vol": rng.uniform(0.1, 0.8, n),
        "div": np.full(n, 0.01),
        "call": rng.random(n) < 0.5,
    }


# ---- native entry points with an explicit thread count ------------------------------------------

class NativeGreeks:
    """tg_greeks_f64 on preallocated outputs, for timing the kernel at a chosen thread count."""

    def __init__(self, x: dict[str, np.ndarray]):
        from tickgpu._native import ffi, ptr

        self.n = x["spot"].size
        self.keep = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in x.items() if k != "call"}
        self.keep["call"] = np.ascontiguousarray(x["call"], dtype=np.uint8)
        self.out = {k: np.empty(self.n) for k in GREEKS}
        self.inp = ffi.new("tg_bsm_inputs *")
        for k in ("spot", "strike", "t", "rate", "vol", "div"):
            setattr(self.inp, k, ptr(self.keep[k]))
            setattr(self.inp, "s_" + k, 1)
        self.inp.call = ptr(self.keep["call"], "uint8_t *")
        self.inp.s_call = 1
        self.outp = ffi.new("tg_greeks_outputs *")
        for k, a in self.out.items():
            setattr(self.outp, k, ptr(a))

    def __call__(self, nthreads: int) -> None:
        from tickgpu._native import check, lib

        check(lib.tg_greeks_f64(self.n, self.inp, self.outp, nthreads), "tg_greeks_f64")


class NativeIV:
    """tg_implied_vol_f64 on preallocated outputs."""

    def __init__(self, price: np.ndarray, x: dict[str, np.ndarray]):
        from tickgpu._native import ffi, ptr

        self.n = price.size
        self.keep = {k: np.ascontiguousarray(x[k], dtype=np.float64) for k in ("spot", "strike", "t", "rate", "div")}
        self.keep["price"] = np.ascontiguousarray(price, dtype=np.float64)
        self.keep["call"] = np.ascontiguousarray(x["call"], dtype=np.uint8)
        self.vol = np.empty(self.n)
        self.status = np.empty(self.n, dtype=np.int8)
        self.inp = ffi.new("tg_iv_inputs *")
        for k in ("price", "spot", "strike", "t", "rate", "div"):
            setattr(self.inp, k, ptr(self.keep[k]))
            setattr(self.inp, "s_" + k, 1)
        self.inp.call = ptr(self.keep["call"], "uint8_t *")
        self.inp.s_call = 1
        self.vol_p = ptr(self.vol, "double *")
        self.status_p = ptr(self.status, "int8_t *")

    def __call__(self, nthreads: int) -> None:
        from tickgpu._native import check, lib

        check(lib.tg_implied_vol_f64(self.n, self.inp, self.vol_p, self.status_p, nthreads), "tg_implied_vol_f64")


def _cores() -> int:
    from tickgpu._native import lib

    return int(lib.tg_num_cores())


def _max_diff(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok]))) if ok.any() else math.nan


def _reps(n: int, quick: bool) -> int:
    return max(3, min(200 if not quick else 30, int((2e6 if quick else 2e7) // max(n, 1))))


# ---- sections ----------------------------------------------------------------------------------

def bench_greeks(quick: bool) -> dict:
    sizes = (1_000, 10_000) if quick else (1_000, 100_000, 1_000_000)
    cores = _cores()
    cases, checks = [], []
    for n in sizes:
        x = option_inputs(n, seed=n)
        reps = _reps(n, quick)
        budget = 1.0 if quick else 2.0
        native = NativeGreeks(x)
        cases.append(case("greeks", "numpy/scipy float64", n, time_call(
            lambda: ref.numpy_greeks(**x), repeats=reps, budget_s=budget), threads=1))
        cases.append(case("greeks", "tickgpu native", n, time_call(lambda: native(1), repeats=reps, budget_s=budget),
                          threads=1))
        if cores > 1:
            cases.append(case("greeks", "tickgpu native", n, time_call(
                lambda: native(cores), repeats=reps, budget_s=budget), threads=cores))
        cases.append(case("greeks", "tickgpu.greeks() (auto)", n, time_call(
            lambda: tickgpu.greeks(**x, backend="cpu"), repeats=reps, budget_s=budget), note="checks + allocation"))
        want = ref.numpy_greeks(**x)
        native(1)
        checks.append({"n": n, "max_abs_diff": {k: _max_diff(native.out[k], want[k]) for k in GREEKS}})
    add_ratios(cases, "numpy/scipy float64")

    n = sizes[-1]
    native = NativeGreeks(option_inputs(n, seed=1))
    scaling = []
    for th in sorted({1, 2, cores} | set(range(1, cores + 1))):
        tm = time_call(lambda: native(th), repeats=_reps(n, quick), budget_s=1.0 if quick else 3.0)
        scaling.append({"threads": th, "median_ns": tm.median_ns, "options_per_s": n / (tm.median_ns * 1e-9)})
    for s in scaling:
        s["speedup_vs_1"] = scaling[0]["median_ns"] / s["median_ns"]

    one = [c for c in cases if c["impl"] == "tickgpu native" and c["threads"] == 1 and c["n"] == sizes[-1]]
    tg = [target(f"greeks 1 thread vs NumPy/SciPy at n={sizes[-1]:,}", one[0]["speedup"] if one else math.nan,
                 TARGET_GREEKS_SPEEDUP, "x")]
    return {"cases": cases, "checks": checks, "scaling": {"n": n, "rows": scaling}, "targets": tg}


def bench_implied_vol(quick: bool) -> dict:
    n = 10_000 if quick else 100_000
    # A week or more and strikes within 30 % of spot: prices whose vol is recoverable in float64
    # (a 1-day deep in-the-money option's time value is below the price's resolution).
    x = option_inputs(n, seed=17, min_days=7, moneyness=(0.7, 1.3))
    g = ref.numpy_greeks(**x)
    price = g["price"]
    # Where the vol is determined to better than 1e-9 by a float64 price.
    well_posed = g["vega"] * 1e-9 > 1e-14 * np.maximum(price, 1.0)
    xv = {k: v for k, v in x.items() if k != "vol"}
    cores = _cores()
    native = NativeIV(price, x)
    reps = _reps(n, quick)
    cases = [case("implied_vol", "tickgpu native", n, time_call(lambda: native(1), repeats=reps, budget_s=2.0),
                  threads=1)]
    if cores > 1:
        cases.append(case("implied_vol", "tickgpu native", n, time_call(
            lambda: native(cores), repeats=reps, budget_s=2.0), threads=cores))
    cases.append(case("implied_vol", "tickgpu.implied_vol() (auto)", n, time_call(
        lambda: tickgpu.implied_vol(price, **xv, backend="cpu"), repeats=reps, budget_s=2.0),
        note="checks + allocation"))
    native(1)
    checks = {"tickgpu_vs_true_vol_max_abs": _max_diff(native.vol[well_posed], x["vol"][well_posed]),
              "well_posed": int(np.count_nonzero(well_posed)),
              "tickgpu_status_not_ok": int(np.count_nonzero(native.status != 0))}

    sub = {"vollib": 200 if quick else 2_000, "py_lets_be_rational": 200 if quick else 2_000,
           "QuantLib": 40 if quick else 300}
    loops = {"vollib": ref.vollib_iv_loop, "py_lets_be_rational": ref.lets_be_rational_iv_loop,
             "QuantLib": ref.quantlib_iv_loop}
    errors = {}
    for name, fn in loops.items():
        m = sub[name]
        args = (price[:m], *(x[k][:m] for k in ("spot", "strike", "t", "rate", "div", "call")))
        try:
            tm = time_call(lambda: fn(*args), repeats=3 if quick else 5, warmup=1, budget_s=3.0)
        except ImportError as e:
            errors[name] = f"not installed ({e.name})"
            continue
        got = fn(*args)
        checks[f"{name}_vs_tickgpu_max_abs"] = _max_diff(got[well_posed[:m]], native.vol[:m][well_posed[:m]])
        cases.append(case("implied_vol", f"{name} loop", m, tm, threads=1, note=f"subsample of {m:,}"))
    add_ratios(cases, "vollib loop" if "vollib" not in errors else cases[0]["impl"])
    one = cases[0]
    tg = [target("implied vol per core (1 thread)", one["items_per_s"], TARGET_IV_PER_CORE, "options/s")]
    return {"cases": cases, "checks": checks, "unavailable": errors, "targets": tg}


def bench_surface(quick: bool) -> dict:
    rng = np.random.default_rng(23)
    strikes = np.linspace(50.0, 150.0, 41)
    expiries = np.array([0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0])
    vols = 0.2 + 0.1 * rng.random((expiries.size, strikes.size))
    surf = tickgpu.VolSurface(strikes, expiries, vols, interpolation="variance")
    cases, checks = [], []
    for n in ((1_000, 10_000) if quick else (1_000, 100_000, 1_000_000)):
        k = rng.uniform(40.0, 160.0, n)
        t = rng.uniform(0.01, 3.5, n)
        reps = _reps(n, quick)
        cases.append(case("surface", "numpy bilinear (variance)", n, time_call(
            lambda: ref.numpy_surface_vol(strikes, expiries, vols, k, t), repeats=reps, budget_s=2.0)))
        cases.append(case("surface", "tickgpu VolSurface.vol (auto)", n, time_call(
            lambda: surf.vol(k, t, backend="cpu"), repeats=reps, budget_s=2.0)))
        checks.append({"n": n, "max_abs_diff": _max_diff(surf.vol(k, t, backend="cpu"),
                                                          ref.numpy_surface_vol(strikes, expiries, vols, k, t))})
    add_ratios(cases, "numpy bilinear (variance)")
    return {"cases": cases, "checks": checks, "targets": []}


def bench_book(quick: bool) -> dict:
    from tickgpu.app.demo import DEFAULT_MESSAGES, bundled_data
    from tickgpu.bench import book_replay

    msg_path = bundled_data(DEFAULT_MESSAGES)
    ob_path = msg_path.with_name(msg_path.name.replace("_message_", "_orderbook_"))
    data = tickgpu.read_lobster(str(msg_path), str(ob_path))
    streams = {"AMZN 2012-06-21 level 1": book_replay.from_lobster(data, limit=10_000 if quick else None),
               "synthetic": book_replay.from_columns(ref.synthetic_stream(20_000 if quick else 500_000))}
    cases, checks = [], []
    for name, s in streams.items():
        reps = 5 if quick else 20
        tm = time_call(lambda: book_replay.tickgpu_replay(s), repeats=reps, budget_s=3.0)
        cases.append(case("book", f"tickgpu Book [{name}]", s.n, tm, threads=1))
        tm = time_call(lambda: book_replay.python_replay(s), repeats=3, warmup=1, budget_s=4.0)
        cases.append(case("book", f"pure Python book [{name}]", s.n, tm, threads=1))
        checks.append({"stream": name, **book_replay.compare(s)})
    for c in cases:
        base = [b for b in cases if b["n"] == c["n"] and b["impl"].startswith("pure Python")]
        c["speedup_vs"] = "pure Python book"
        c["speedup"] = base[0]["per_item_ns"] / c["per_item_ns"] if base else math.nan
    tk = [c for c in cases if c["impl"].startswith("tickgpu") and "synthetic" in c["impl"]]
    tg = [target("book replay per core (synthetic)", tk[0]["items_per_s"] if tk else math.nan,
                 TARGET_BOOK_PER_CORE, "msgs/s")]
    return {"cases": cases, "checks": checks, "targets": tg}


SECTIONS = {"greeks": (bench_greeks, "options"), "implied_vol": (bench_implied_vol, "options"),
            "surface": (bench_surface, "points"), "book": (bench_book, "msgs")}


def run(args) -> int:
    """Run every section, print the tables and targets, save JSON; 0 unless a section errored."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough that the tables do not wrap
        console = Console(width=130)
    quick = bool(getattr(args, "quick", False))
    res = {"suite": "cpu", "quick": quick, "machine": machine_info(), "sections": {}, "targets": []}
    console.print(f"[bold]tickgpu CPU suite[/bold] on {res['machine']['cpu_model']}, "
                  f"{res['machine']['cores']} cores{' (quick)' if quick else ''}")
    failed = False
    t_all = time.perf_counter()
    for name, (fn, unit) in SECTIONS.items():
        t0 = time.perf_counter()
        try:
            out = fn(quick)
        except Exception as e:  # a failing section is reported; the others still run
            out = {"error": f"{type(e).__name__}: {e}", "cases": [], "targets": []}
            failed = True
            console.print(f"[red]{name}: {out['error']}[/red]")
        out["seconds"] = time.perf_counter() - t0
        res["sections"][name] = out
        res["targets"].extend(out.get("targets", []))
        if out["cases"]:
            print_section(console, f"{name} ({out['seconds']:.1f} s)", out["cases"], unit)
        if name == "greeks" and "scaling" in out:
            rows = ", ".join(f"{r['threads']}: {r['speedup_vs_1']:.2f}x" for r in out["scaling"]["rows"])
            console.print(f"greeks thread scaling at n={out['scaling']['n']:,} (threads: speed-up): {rows}")
    res["seconds"] = time.perf_counter() - t_all
    print_targets(console, res["targets"])
    path = write_results("cpu", res, getattr(args, "out", "benchmarks/results"))
    console.print(f"saved {path}")
    return 1 if failed else 0
