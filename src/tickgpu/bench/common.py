"""The benchmark harness: timing, machine description, JSON results, tables with ratios.

Every figure is a distribution of single-call wall times from ``time.perf_counter_ns`` after a
warm-up; medians and p99 are reported, never a best case. Results are saved as JSON with the date,
the machine and the git commit, so a number can always be traced to what produced it.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall times of repeated calls, in nanoseconds."""

    samples_ns: np.ndarray

    @property
    def n(self) -> int:
        return int(self.samples_ns.size)

    @property
    def median_ns(self) -> float:
        return float(np.median(self.samples_ns))

    @property
    def p99_ns(self) -> float:
        return float(np.percentile(self.samples_ns, 99))

    @property
    def min_ns(self) -> float:
        return float(self.samples_ns.min())


def time_call(fn: Callable[[], object], *, repeats: int = 20, warmup: int = 2,
              budget_s: float | None = None) -> Timing:
    """Call `fn` `warmup` times untimed, then `repeats` times timed one by one.

    With `budget_s`, timing stops early once that much time has been spent (at least 3 timed
    calls), so slow reference implementations do not stretch a run. The garbage collector is
    paused while timing: a collection inside one call would be charged to whichever ran then.
    """
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    samples = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for i in range(repeats):
            t0 = time.perf_counter_ns()
            fn()
            samples.append(time.perf_counter_ns() - t0)
            if budget_s is not None and i >= 2 and time.perf_counter() - start > budget_s:
                break
    finally:
        if was_enabled:
            gc.enable()
    return Timing(np.asarray(samples, dtype=np.int64))


def _cpu_model() -> str:
    from tickgpu.diag.doctor import cpu_model

    return cpu_model()


def git_commit() -> str | None:
    """The commit of the checkout tickgpu was imported from, or None outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return r.stdout.strip() + ("-dirty" if dirty else "")


def machine_info() -> dict:
    """CPU model, cores, Python, NumPy, tickgpu version, git commit, hostname and date."""
    import tickgpu

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return {
        "cpu_model": _cpu_model(),
        "cores": cores,
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "tickgpu": getattr(tickgpu, "__version__", None),
        "git_commit": git_commit(),
        "hostname": platform.node(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def machine_slug(info: dict) -> str:
    """A short file-name-safe machine label, e.g. ``intel-xeon-processor-2c``."""
    model = re.sub(r"\((R|TM|tm|r)\)|CPU|@.*$", "", info.get("cpu_model") or "cpu")
    words = re.findall(r"[a-z0-9]+", model.lower())[:4]
    return "-".join(words + [f"{info.get('cores', 0)}c"])


def write_results(suite: str, results: dict, out_dir) -> Path:
    """Write `results` to ``<out_dir>/<suite>-<machine>-<date>.json`` (a later run the same second
    gets a numbered suffix instead of overwriting); returns the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = results.get("machine") or machine_info()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{suite}-{machine_slug(info)}-{stamp}"
    path = out / f"{base}.json"
    k = 1
    while path.exists():
        path = out / f"{base}-{k}.json"
        k += 1
    path.write_text(json.dumps(jsonable(results), indent=2) + "\n")
    return path


def jsonable(x):
    """`x` with NumPy scalars made Python numbers and NaN/inf made null."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def case(section: str, impl: str, n: int, timing: Timing, *, items: int | None = None, threads: int | None = None,
         note: str = "") -> dict:
    """One measured row: `n` items per call (options, points, messages), `items` if it differs."""
    items = n if items is None else items
    med = timing.median_ns
    return {
        "section": section, "impl": impl, "n": int(n), "threads": threads, "repeats": timing.n,
        "median_ns": med, "p99_ns": timing.p99_ns, "min_ns": timing.min_ns,
        "per_item_ns": med / items if items else float("nan"),
        "items_per_s": items / (med * 1e-9) if med > 0 else float("nan"),
        "note": note,
    }


def add_ratios(cases: list[dict], baseline_impl: str) -> None:
    """Set ``speedup`` on each case: baseline's per-item time over the case's, at the same n
    (or the baseline's nearest n, for references that ran on a subsample)."""
    base = [c for c in cases if c["impl"] == baseline_impl]
    for c in cases:
        if not base:
            c["speedup_vs"], c["speedup"] = baseline_impl, float("nan")
            continue
        same = [b for b in base if b["n"] == c["n"]] or base
        b = min(same, key=lambda b: abs(math.log(max(b["n"], 1)) - math.log(max(c["n"], 1))))
        c["speedup_vs"] = baseline_impl
        c["speedup"] = b["per_item_ns"] / c["per_item_ns"] if c["per_item_ns"] > 0 else float("nan")


def target(name: str, measured: float, goal: float, unit: str) -> dict:
    """A pass/fail line: measured >= goal."""
    ok = bool(np.isfinite(measured) and measured >= goal)
    return {"name": name, "measured": measured, "goal": goal, "unit": unit, "passed": ok}


def _human(v: float, unit: str = "") -> str:
    if v is None or not np.isfinite(v):
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{suffix}{unit}"
    return f"{v:.2f}{unit}"


def _duration(ns: float) -> str:
    if ns is None or not np.isfinite(ns):
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def print_section(console, title: str, cases: list[dict], unit: str) -> None:
    """A rich table of one section: median, p99, throughput and speed-up against the baseline."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title), title_justify="left")
    for col in ("implementation", "n", "threads", "median", "p99", f"{unit}/s", "speed-up"):
        t.add_column(col, justify="left" if col == "implementation" else "right")
    for c in cases:
        sp = c.get("speedup", float("nan"))
        sp_txt = "-" if not np.isfinite(sp) else f"{sp:.2f}x"
        t.add_row(escape(c["impl"]) + (f" [dim]({escape(c['note'])})[/dim]" if c.get("note") else ""), f"{c['n']:,}",
                  "-" if c.get("threads") is None else str(c["threads"]),
                  _duration(c["median_ns"]), _duration(c["p99_ns"]), _human(c["items_per_s"]), sp_txt)
    if cases and cases[0].get("speedup_vs"):
        t.caption = f"speed-up: per-{unit} time of {cases[0]['speedup_vs']} / this row's"
    console.print(t)


def print_targets(console, targets: list[dict]) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="targets", title_justify="left")
    for col in ("target", "measured", "goal", "result"):
        t.add_column(col)
    for g in targets:
        mark = "[green]PASS[/green]" if g["passed"] else "[red]FAIL[/red]"
        t.add_row(escape(g["name"]), _human(g["measured"], " " + g["unit"]), _human(g["goal"], " " + g["unit"]), mark)
    console.print(t)
