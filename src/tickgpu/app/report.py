"""Latency statistics and the demo's self-contained HTML report (inline SVG, no external files).

Latencies are recorded in nanoseconds (``time.perf_counter_ns``) and reported in microseconds.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np

QUANTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}


def percentile(values, q: float) -> float:
    """The q-th percentile (0 <= q <= 100) by linear interpolation between closest ranks.

    The same definition as ``numpy.percentile``'s default ("linear", Hyndman-Fan type 7): rank
    q/100 * (n - 1) in the sorted values. NaN for no values; ValueError for q outside [0, 100].
    """
    if not 0.0 <= q <= 100.0 or math.isnan(q):
        raise ValueError(f"q: must be in [0, 100], got {q!r}")
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if a.size == 0:
        return float("nan")
    rank = q / 100.0 * (a.size - 1)
    lo = int(math.floor(rank))
    hi = min(lo + 1, a.size - 1)
    frac = rank - lo
    return float(a[lo] + (a[hi] - a[lo]) * frac)


def summarize_ns(samples_ns) -> dict:
    """Count, p50/p99/p99.9, mean, min and max of nanosecond samples, in microseconds."""
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    out = {"n": int(a.size)}
    for name, q in QUANTILES.items():
        out[f"{name}_us"] = percentile(a, q)
    if a.size:
        out.update(mean_us=float(a.mean()), min_us=float(a.min()), max_us=float(a.max()))
    else:
        out.update(mean_us=float("nan"), min_us=float("nan"), max_us=float("nan"))
    return out


def log_bin_edges(values, bins: int = 40) -> np.ndarray:
    """`bins` + 1 log-spaced edges spanning the positive values (latencies span decades).

    Non-positive values are left below the first edge. A single distinct value gets a bin
    of +-10 % around it. ValueError if there is no positive value or bins < 1.
    """
    if bins < 1:
        raise ValueError(f"bins: must be >= 1, got {bins}")
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[np.isfinite(a) & (a > 0)]
    if a.size == 0:
        raise ValueError("values: no positive finite value to bin")
    lo, hi = float(a.min()), float(a.max())
    if hi <= lo:
        lo, hi = lo * 0.9, hi * 1.1
    return np.geomspace(lo, hi, bins + 1)


def histogram(values, edges) -> np.ndarray:
    """Counts of `values` per bin [edges[i], edges[i+1]), the last bin closed on the right.

    Values outside [edges[0], edges[-1]] and NaN are not counted (``numpy.histogram``'s rule).
    ValueError for edges that are not strictly increasing or fewer than two.
    """
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or not np.all(np.diff(e) > 0):
        raise ValueError("edges: need at least two strictly increasing values")
    a = np.asarray(values, dtype=np.float64).ravel()
    a = a[(a >= e[0]) & (a <= e[-1])]
    idx = np.searchsorted(e, a, side="right") - 1
    idx[a == e[-1]] = e.size - 2
    return np.bincount(idx, minlength=e.size - 1).astype(np.int64)


def svg_histogram(samples_us, title: str, *, bins: int = 40, width: int = 520, height: int = 170) -> str:
    """A latency histogram as an inline SVG: log-spaced bins, p50/p99/p99.9 marked."""
    a = np.asarray(samples_us, dtype=np.float64)
    a = a[np.isfinite(a) & (a > 0)]
    esc = html.escape
    if a.size == 0:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" role="img">'
                f'<text x="4" y="24" font-size="12">{esc(title)}: no samples</text></svg>')
    edges = log_bin_edges(a, bins)
    counts = histogram(a, edges)
    left, right, top, bottom = 44, 10, 22, 30
    pw, ph = width - left - right, height - top - bottom
    lx0, lx1 = math.log(edges[0]), math.log(edges[-1])

    def x_of(v: float) -> float:
        return left + pw * (math.log(v) - lx0) / (lx1 - lx0)

    cmax = max(int(counts.max()), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)} latency histogram">',
             f'<text x="{left}" y="14" font-size="12" font-weight="bold">{esc(title)}</text>',
             f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#444"/>']
    for i, c in enumerate(counts):
        if c == 0:
            continue
        x0, x1 = x_of(edges[i]), x_of(edges[i + 1])
        h = ph * c / cmax
        parts.append(f'<rect x="{x0:.1f}" y="{top + ph - h:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
                     f'height="{h:.1f}" fill="#4a78b5"><title>{edges[i]:.2f}-{edges[i + 1]:.2f} us: '
                     f'{int(c)}</title></rect>')
    colors = {"p50": "#2a9d3a", "p99": "#d98a00", "p99.9": "#c0392b"}
    for k, (name, q) in enumerate(QUANTILES.items()):
        v = percentile(a, q)
        x = x_of(min(max(v, edges[0]), edges[-1]))
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="{colors[name]}" '
                     f'stroke-dasharray="3,2"/>')
        parts.append(f'<text x="{min(x + 2, width - 80):.1f}" y="{top + 10 + 11 * k}" font-size="10" '
                     f'fill="{colors[name]}">{name} {v:.2f}</text>')
    for v in (edges[0], math.sqrt(edges[0] * edges[-1]), edges[-1]):
        x = x_of(v)
        parts.append(f'<text x="{x:.1f}" y="{height - 14}" font-size="10" text-anchor="middle">{v:.3g}</text>')
    parts.append(f'<text x="{left + pw / 2:.1f}" y="{height - 2}" font-size="10" text-anchor="middle">'
                 f'microseconds (log scale)</text>')
    parts.append(f'<text x="4" y="{top + 10}" font-size="10">{cmax}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:12px}.ok{color:#2a9d3a}.bad{color:#c0392b}
code{background:#f4f4f4;padding:1px 4px}
"""


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:,.2f}"
    return html.escape(str(v))


def render_html(report: dict, samples_us: dict[str, np.ndarray]) -> str:
    """The demo report as one HTML document: summary, stage table, one histogram per stage."""
    esc = html.escape
    rows = []
    for stage, s in report["stages"].items():
        rows.append("<tr>" + "".join(f"<td>{_fmt(x)}</td>" for x in (
            stage, s.get("backend", ""), s["n"], s["p50_us"], s["p99_us"], s["p99.9_us"], s["mean_us"],
            s["max_us"])) + "</tr>")
    src = report["data"]
    chain = report["chain"]
    check = report["iv_check"]
    ok_cls = "ok" if check["passed"] else "bad"
    summary = [
        ("tickgpu", report["tickgpu_version"]),
        ("data", f"{src['message_file']} ({src['messages']:,} messages replayed)"),
        ("underlying tick", report["definitions"]["underlying_tick"]),
        ("option chain", f"{chain['options']:,} options = {chain['expiries']} expiries x {chain['strikes']} "
                         f"strikes x call/put"),
        ("ticks", f"{report['throughput']['ticks']:,} underlying ticks, "
                  f"{report['throughput']['ticks_per_s']:,.0f} ticks/s, "
                  f"{report['throughput']['messages_per_s']:,.0f} messages/s (wall clock, whole replay)"),
        ("backend asked", report["backend_requested"]),
        ("machine", f"{report['machine'].get('cpu_model', '?')}, {report['machine'].get('cores', '?')} cores, "
                    f"python {report['machine'].get('python', '?')}"),
    ]
    summary_html = "".join(f"<tr><td>{esc(k)}</td><td style='text-align:left'>{esc(str(v))}</td></tr>"
                           for k, v in summary)
    sig = report.get("signal")
    signal_html = (f"\n<p>{esc(sig['summary'])}. Information coefficient: {esc(sig['definition'])}.</p>"
                   if sig else "")
    svgs = "".join(f"<div>{svg_histogram(samples_us[name], name)}</div>" for name in report["stages"]
                   if name in samples_us)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tickgpu demo report</title><style>{_CSS}</style></head>
<body>
<h1>tickgpu demo</h1>
<p>Created {esc(report['created'])}. {esc(report.get('note', ''))}</p>
<table>{summary_html}</table>
<h2>Latency per stage (microseconds)</h2>
<table><tr><th>stage</th><th>backend</th><th>samples</th><th>p50</th><th>p99</th><th>p99.9</th><th>mean</th>
<th>max</th></tr>{''.join(rows)}</table>
<p class="{ok_cls}">Implied-vol check: {esc(check['summary'])}</p>{signal_html}
<h2>Histograms</h2>
<div class="grid">{svgs}</div>
<p>Timed with <code>time.perf_counter_ns</code> around each stage of the Python loop; figures include the
Python call overhead a user of the library pays.</p>
</body></html>
"""


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None  # JSON has no NaN/inf; null says "not available"
    return x


def write_report(out_dir, report: dict, samples_ns: dict[str, np.ndarray]) -> tuple[Path, Path]:
    """Write ``demo.json`` and ``demo.html`` into `out_dir` (created); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, hpath = out / "demo.json", out / "demo.html"
    jpath.write_text(json.dumps(_jsonable(report), indent=2) + "\n")
    samples_us = {k: np.asarray(v, dtype=np.float64) / 1e3 for k, v in samples_ns.items()}
    hpath.write_text(render_html(report, samples_us))
    return jpath, hpath
