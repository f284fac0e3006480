"""The tickgpu command (help, doctor, demo, bench) and the demo report's statistics."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tickgpu.app import report

DATA = Path(__file__).resolve().parents[2] / "src" / "tickgpu" / "data"
AMZN_BOOK = DATA / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv"


def tickgpu_cmd(*args, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TICKGPU_DISABLE_GPU="1", COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "tickgpu", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


# ---- help and dispatch ----------------------------------------------------------------------------

def test_help_lists_every_command():
    r = tickgpu_cmd("--help")
    assert r.returncode == 0, r.stderr
    for cmd in ("demo", "doctor", "bench", "build-kernels"):
        assert cmd in r.stdout


def test_no_command_prints_help_and_fails():
    r = tickgpu_cmd()
    assert r.returncode == 2
    assert "usage" in r.stdout.lower()


def test_bad_arguments_are_usage_errors():
    r = tickgpu_cmd("demo", "--ticks", "-3")
    assert r.returncode == 2
    assert "--ticks" in r.stderr and "must be >= 0" in r.stderr


def test_demo_missing_data_file_names_it(tmp_path):
    r = tickgpu_cmd("demo", "--data", str(tmp_path / "nope.csv"), "--quiet")
    assert r.returncode == 2
    assert "nope.csv" in r.stderr


def test_version():
    import tickgpu

    r = tickgpu_cmd("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"tickgpu {tickgpu.__version__}"


@pytest.mark.skipif(importlib.util.find_spec("tickgpu.bench.quant") is not None,
                    reason="the quant suite is installed here")
def test_bench_suite_not_installed_exits_3():
    r = tickgpu_cmd("bench", "--suite", "quant")
    assert r.returncode == 3
    assert "quant" in r.stderr and "not part of this installation" in r.stderr


def test_unknown_bench_suite_module_is_reported():
    from tickgpu import cli

    mod, why = cli._load_suite("no_such_suite")
    assert mod is None and "not part of this installation" in why


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="triton is installed here")
def test_build_kernels_without_triton_says_why():
    r = tickgpu_cmd("build-kernels", "--help")
    assert r.returncode == 3
    assert "Triton" in r.stderr


# ---- output directories and build-kernels arguments: one line, exit 2, no traceback ----------------

def _unwritable_outs(tmp_path) -> list[tuple[str, str]]:
    """(an --out that cannot be used, the reason the message must give)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    outs = [(str(a_file), "exists and is not a directory"), (str(a_file / "x"), "is not a directory")]
    if Path("/dev/null").exists():
        outs.append(("/dev/null/x", "/dev/null is not a directory"))
    if Path("/proc/self").is_dir():   # procfs: no directory can be made there, not even by root
        outs.append(("/proc/forbidden", "cannot write in /proc"))
    return outs


@pytest.mark.parametrize("command", [["demo", "--quiet"], ["bench", "--suite", "all", "--quick"]])
def test_unwritable_out_is_a_usage_error(tmp_path, command):
    for out, why in _unwritable_outs(tmp_path):
        r = tickgpu_cmd(*command, "--out", out, timeout=60)
        assert r.returncode == 2, (out, r.stdout + r.stderr)
        assert "Traceback" not in r.stderr
        assert "argument --out" in r.stderr and why in r.stderr, r.stderr


def test_unwritable_out_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """The audit's case: the replay (or the suite) ran to the end and only then the report failed."""
    from tickgpu import cli
    from tickgpu.app import demo

    def must_not_run(*a, **k):
        raise AssertionError("ran before --out was checked")

    monkeypatch.setattr(demo, "run_demo", must_not_run)
    monkeypatch.setattr(cli, "_load_suite", must_not_run)
    for argv in (["demo", "--quiet"], ["bench", "--suite", "all", "--quick"]):
        with pytest.raises(SystemExit) as e:
            cli.main([*argv, "--out", "/dev/null/x" if Path("/dev/null").exists() else str(tmp_path / "a")])
        assert e.value.code == 2
        assert "--out" in capsys.readouterr().err


def test_writable_dir_leaves_nothing_behind(tmp_path):
    from tickgpu.cli import writable_dir

    for out in (tmp_path / "new" / "nested", tmp_path):   # one to be made, one that is there
        assert writable_dir(str(out)) == str(out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, option, why", [
    (["--family", "noop", "--nvcc", "/nonexistent/nvcc"], "--nvcc", "/nonexistent/nvcc: no such executable"),
    (["--family", "noop", "--out", "{file}/x"], "--out", "is not a directory"),
    (["--family", "noop", "--out", "{file}"], "--out", "exists and is not a directory"),
    (["--arch", "bogus"], "--arch", "expected one of sm_80, sm_90 (the architectures tickgpu's runtime loads), got 'bogus'"),
    (["--arch", "sm_0"], "--arch", "got 'sm_0'"),
    (["--arch", "sm_99999"], "--arch", "got 'sm_99999'"),
    (["--family", "implied_vol", "--lbr-dir", "/nonexistent"], "--lbr-dir", "/nonexistent: no lbr_core.h there"),
])
def test_build_kernels_bad_arguments_exit_2_before_building(tmp_path, monkeypatch, capsys, argv, option, why):
    """What `tickgpu build-kernels ARGV` hands to the builder (the command itself also needs Triton,
    see below); nothing is compiled, so neither nvcc nor a GPU is needed."""
    from tickgpu.kernels import build

    (tmp_path / "f").write_text("")
    monkeypatch.setattr(build, "build_bundle", lambda *a, **k: pytest.fail("the build started"))
    with pytest.raises(SystemExit) as e:
        build.main([a.format(file=tmp_path / "f") for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and why in err, err
    assert "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="build-kernels needs Triton")
def test_build_kernels_bad_arch_exits_2():
    r = tickgpu_cmd("build-kernels", "--arch", "bogus", "--family", "noop", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "argument --arch" in r.stderr and "expected one of sm_80, sm_90" in r.stderr and "Traceback" not in r.stderr


def test_build_kernels_tool_that_cannot_run_is_a_build_error():
    """For callers of build_bundle, which takes nvcc unchecked: named, not a FileNotFoundError."""
    from tickgpu.kernels.build import BuildError, _run

    with pytest.raises(BuildError, match="cannot run /nonexistent/nvcc"):
        _run(["/nonexistent/nvcc", "--version"])


# ---- doctor ---------------------------------------------------------------------------------------

def test_doctor_json_has_the_facts():
    r = tickgpu_cmd("doctor", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert set(info) >= {"platform", "cpu", "memory", "huge_pages", "memlock", "gpu", "versions", "native"}
    # Each figure against an independent reading of the same fact.
    assert info["cpu"]["logical_cores"] == os.cpu_count()
    assert info["versions"]["numpy"] == np.__version__
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert info["memlock"]["unlimited"] == (soft == resource.RLIM_INFINITY)
    if soft != resource.RLIM_INFINITY:
        assert info["memlock"]["soft_bytes"] == soft
    assert isinstance(info["platform"]["wsl2"], bool)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.is_file():
        assert f"[{info['huge_pages']['thp_mode']}]" in thp.read_text()
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        m = re.search(r"^HugePages_Total:\s+(\d+)", meminfo.read_text(), re.M)
        if m:
            assert info["huge_pages"]["total"] == int(m.group(1))
    # TICKGPU_DISABLE_GPU is set for these runs: the report must say the GPU is off and why.
    assert info["gpu"]["runtime"]["available"] is False
    assert info["gpu"]["runtime"]["reason"]
    assert info["native"]["loaded"] is True and info["native"]["threads"] >= 1


def test_doctor_table_runs():
    r = tickgpu_cmd("doctor")
    assert r.returncode == 0, r.stderr
    assert "huge pages" in r.stdout and "memlock" in r.stdout


# ---- report statistics ----------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 10, 1001])
def test_percentile_matches_numpy(rng, n):
    x = rng.lognormal(3.0, 1.0, n)
    for q in (0.0, 1.0, 50.0, 99.0, 99.9, 100.0, float(rng.uniform(0, 100))):
        assert report.percentile(x, q) == pytest.approx(np.percentile(x, q), rel=1e-12, abs=0)


def test_percentile_of_integers_and_ties(rng):
    x = rng.integers(0, 5, 500)
    for q in (10.0, 50.0, 99.9):
        assert report.percentile(x, q) == pytest.approx(np.percentile(x, q), rel=1e-12)


def test_percentile_edges():
    assert np.isnan(report.percentile([], 50))
    with pytest.raises(ValueError, match="q"):
        report.percentile([1.0], 101)
    with pytest.raises(ValueError, match="q"):
        report.percentile([1.0], float("nan"))


def test_summarize_matches_numpy(rng):
    ns = rng.integers(1_000, 10_000_000, 777)
    s = report.summarize_ns(ns)
    us = ns / 1e3
    assert s["n"] == 777
    assert s["p50_us"] == pytest.approx(np.percentile(us, 50))
    assert s["p99_us"] == pytest.approx(np.percentile(us, 99))
    assert s["p99.9_us"] == pytest.approx(np.percentile(us, 99.9))
    assert s["mean_us"] == pytest.approx(us.mean())
    assert s["max_us"] == pytest.approx(us.max())


@pytest.mark.parametrize("bins", [1, 7, 40])
def test_histogram_matches_numpy(rng, bins):
    x = rng.lognormal(2.0, 1.5, 5000)
    edges = report.log_bin_edges(x, bins)
    assert edges.size == bins + 1
    assert edges[0] == pytest.approx(x.min()) and edges[-1] == pytest.approx(x.max())
    assert np.all(np.diff(np.log(edges)) == pytest.approx(np.log(edges[1] / edges[0])))
    want, _ = np.histogram(x, edges)
    got = report.histogram(x, edges)
    np.testing.assert_array_equal(got, want)
    # Values outside the edges and NaN are not counted, as in numpy.histogram.
    y = np.concatenate([x, [edges[0] / 2, edges[-1] * 2, np.nan, edges[-1]]])
    np.testing.assert_array_equal(report.histogram(y, edges), np.histogram(y[np.isfinite(y)], edges)[0])


def test_histogram_edges_bad_input():
    with pytest.raises(ValueError, match="edges"):
        report.histogram([1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="values"):
        report.log_bin_edges([0.0, -1.0])
    with pytest.raises(ValueError, match="bins"):
        report.log_bin_edges([1.0], 0)
    e = report.log_bin_edges([5.0, 5.0, 5.0], 4)          # one distinct value: still a valid bin
    assert e[0] < 5.0 < e[-1] and report.histogram([5.0] * 3, e).sum() == 3


def test_svg_histogram_is_svg(rng):
    svg = report.svg_histogram(rng.lognormal(1, 1, 300), "greeks <&>")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "greeks &lt;&amp;&gt;" in svg and "p99.9" in svg
    import xml.etree.ElementTree as ET

    ET.fromstring(svg)                                     # well-formed
    assert "no samples" in report.svg_histogram([], "empty")


# ---- demo -----------------------------------------------------------------------------------------

def _mid_changes_from_orderbook(n_ticks: int) -> int:
    """Messages needed for n_ticks mid changes, counted straight from the orderbook CSV."""
    ob = np.loadtxt(AMZN_BOOK, delimiter=",", skiprows=1, dtype=np.int64, max_rows=20_000)
    quoted = (ob[:, 1] > 0) & (ob[:, 3] > 0)
    mid = np.where(quoted, (ob[:, 0] + ob[:, 2]) / 2.0, np.nan)
    seen, prev = 0, np.nan
    for i, m in enumerate(mid):
        if np.isfinite(m) and np.isfinite(prev) and m != prev:
            seen += 1
            if seen == n_ticks:
                return i + 1
        if np.isfinite(m):
            prev = m
    raise AssertionError("not enough ticks in the first 20,000 rows")


def test_demo_runs_and_writes_reports(tmp_path):
    out = tmp_path / "rep"
    r = tickgpu_cmd("demo", "--ticks", "50", "--out", str(out), "--strikes", "20", "--expiries", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "implied_vol" in r.stdout and "p99.9" in r.stdout
    rep = json.loads((out / "demo.json").read_text())
    assert set(rep["stages"]) == {"book", "features", "signal", "surface", "greeks", "quotes", "implied_vol",
                                  "tick_total"}
    for name, s in rep["stages"].items():
        assert {"n", "p50_us", "p99_us", "p99.9_us", "mean_us", "backend"} <= set(s)
        assert 0 < s["p50_us"] <= s["p99_us"] <= s["p99.9_us"] <= s["max_us"]
        assert s["n"] == (rep["throughput"]["messages"] if name in ("book", "features") else 50)
    assert rep["throughput"]["ticks"] == 50
    assert rep["chain"]["options"] == 4 * 20 * 2
    assert rep["backends"] == {"book": "cpu", "features": "cpu", "surface": "cpu", "greeks": "cpu",
                               "implied_vol": "cpu", "signal": "cpu"}
    # The signal model predicted on every tick; the ticks whose next 50 events were replayed are
    # scored against what followed (a correlation, so within [-1, 1]).
    sig = rep["signal"]
    assert sig["predictions"] == 50 and sig["backend"] == "cpu" and sig["scheme"] == "w8a16"
    assert 3 <= sig["scored"] < 50 and -1 <= sig["information_coefficient"] <= 1
    # Ticks are mid changes: the replay must stop exactly where the file's 50th mid change is.
    assert rep["throughput"]["messages"] == _mid_changes_from_orderbook(50)
    check = rep["iv_check"]
    assert check["passed"] and check["non_ok"] == 0 and check["checked"] == 50 * 160
    assert check["max_abs_residual"] <= check["tolerance"] < check["max_abs_vol_error"]
    html = (out / "demo.html").read_text()
    assert "<svg" in html and html.count("<svg") == 8 and "<script" not in html
    assert "signal model (w8a16, cpu): 50 predictions" in html and " ".join(sig["summary"].split()) in " ".join(r.stdout.split())
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_demo_gpu_backend_unavailable_is_a_clear_error(tmp_path):
    r = tickgpu_cmd("demo", "--ticks", "5", "--backend", "gpu", "--out", str(tmp_path), "--quiet")
    assert r.returncode == 3
    assert "gpu" in r.stderr.lower()


AMZN_MESSAGES = DATA / "AMZN_2012-06-21_34200000_57600000_message_1.csv"


def _head(path: Path, lines: int) -> str:
    with open(path) as f:
        return "".join(next(f) for _ in range(lines))


@pytest.mark.parametrize("case, said", [
    ("bad_row", r"x_message_1\.csv, line 5, column 4 \(size\): not a number: '1x0'"),
    ("row_count", r"x_orderbook_1\.csv: 18 rows, but .*x_message_1\.csv has 19"),
    ("empty", r"x_message_1\.csv: no messages"),
    ("not_a_book", r"x_orderbook_1\.csv, orderbook row 5: not a valid book: bid level 1: price 0"),
])
def test_demo_bad_data_is_a_clear_usage_error(tmp_path, case, said):
    """Input files that cannot be replayed get one line naming the file and where, and exit 2 as
    a missing file does (not a traceback and exit 1, which means a check failed)."""
    msg = _head(AMZN_MESSAGES, 20)
    book = _head(AMZN_BOOK, 20)   # both with a header: 19 rows
    if case == "bad_row":
        lines = msg.splitlines(keepends=True)
        lines[4] = "34200.1,1,5,1x0,2238100,1\n"
        msg = "".join(lines)
    elif case == "row_count":
        book = _head(AMZN_BOOK, 19)
    elif case == "empty":
        msg = book = ""
    else:
        lines = book.splitlines(keepends=True)
        ask, ask_size, _, _ = lines[6].split(",")
        lines[6] = f"{ask},{ask_size},0,5\n"
        book = "".join(lines)
    (tmp_path / "x_message_1.csv").write_text(msg)
    (tmp_path / "x_orderbook_1.csv").write_text(book)
    r = tickgpu_cmd("demo", "--data", str(tmp_path / "x_message_1.csv"), "--quiet", "--out", str(tmp_path / "rep"),
                    "--strikes", "4", "--expiries", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(said, " ".join(r.stderr.split())), r.stderr   # (rich wraps the line)
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("case, said", [
    # Both sides quoted by the second message, and the mid never changes after it.
    ("no_tick", r"x_message_1\.csv: no underlying tick in its 3 messages \(a message after which"),
    # Opening mid 2 ticks = $0.0002: strikes from 70 % of it, to the cent, are $0.00.
    ("tiny_prices", r"x_message_1\.csv: the opening mid \$0\.0002 is too small for a chain listed to the cent: "
                    r"its lowest strikes .* round to \$0\.00"),
])
def test_demo_data_with_nothing_to_check_is_a_usage_error(tmp_path, case, said):
    """A valid file the demo cannot reprice on used to end silently under --quiet with exit 1 (a
    failed check: no tick), or in all-NaN vols and 'FAILED' (prices too small): now one line
    saying why, and exit 2, before any report is written."""
    if case == "no_tick":
        msg = "1,1,1,100,5000000,1\n2,1,2,100,5010000,-1\n3,1,3,50,5010000,-1\n"
    else:
        msg = "1,1,1,100,1,1\n2,1,2,100,3,-1\n3,1,3,100,2,-1\n4,1,4,100,2,1\n"
    (tmp_path / "x_message_1.csv").write_text(msg)
    r = tickgpu_cmd("demo", "--data", str(tmp_path / "x_message_1.csv"), "--quiet", "--out", str(tmp_path / "rep"),
                    "--strikes", "4", "--expiries", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(said, " ".join(r.stderr.split())), r.stderr
    assert not (tmp_path / "rep").exists()


def test_demo_input_that_is_not_a_file_says_what_it_is(tmp_path):
    msg = _small_day(tmp_path)
    for args, said in [(("--data", str(tmp_path)), f"--data: {tmp_path} is a directory, not a file"),
                       (("--data", str(msg), "--orderbook", str(tmp_path)),
                        f"--orderbook: {tmp_path} is a directory, not a file"),
                       (("--data", "/dev/null"), "--data: /dev/null is not a regular file"),
                       (("--data", str(tmp_path / "nope.csv")), f"--data: no such file: {tmp_path / 'nope.csv'}")]:
        r = tickgpu_cmd("demo", *args, "--quiet", "--out", str(tmp_path / "rep"), timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        assert said in " ".join(r.stderr.split()), r.stderr
        assert "no such file" not in r.stderr or "nope" in said
    assert not (tmp_path / "rep").exists()


def _small_day(tmp_path, rows: int = 200) -> Path:
    """The bundled day's first rows (header included) as a message and orderbook pair."""
    (tmp_path / "x_message_1.csv").write_text(_head(AMZN_MESSAGES, rows))
    (tmp_path / "x_orderbook_1.csv").write_text(_head(AMZN_BOOK, rows))
    return tmp_path / "x_message_1.csv"


@pytest.mark.parametrize("ticks", ["1000000000", "99999999999999999999"])
def test_demo_more_ticks_than_the_file_replays_it_all(tmp_path, ticks):
    """Buffers are sized by what the file can give (a tick is a message), not by --ticks: the
    audit saw a 37 GiB MemoryError and 'Maximum allowed dimension exceeded'."""
    msg = _small_day(tmp_path)
    runs = {}
    for asked in (ticks, "0"):        # 0: the whole file, the other branch of the replay
        out = tmp_path / f"rep{asked}"
        r = tickgpu_cmd("demo", "--data", str(msg), "--ticks", asked, "--quiet", "--out", str(out),
                        "--strikes", "4", "--expiries", "2")
        assert r.returncode == 0, r.stdout + r.stderr
        runs[asked] = json.loads((out / "demo.json").read_text())
    rep, whole = runs[ticks], runs["0"]
    assert rep["data"]["messages"] == rep["data"]["messages_in_file"] == 199
    assert 0 < rep["throughput"]["ticks"] == whole["throughput"]["ticks"] < 199
    assert f"of the {int(ticks):,} asked for" in rep["note"]


def test_demo_chain_beyond_the_bound_is_a_usage_error(tmp_path):
    r = tickgpu_cmd("demo", "--strikes", "100000000", "--expiries", "100000", "--quiet", "--out", str(tmp_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"--strikes x --expiries: 100,000,000 x 100,000 is more than the demo's 1,000,000", r.stderr)
    assert list(tmp_path.iterdir()) == []


def test_demo_chain_bound_is_inclusive(tmp_path, monkeypatch, capsys):
    from tickgpu import cli
    from tickgpu.app import demo

    monkeypatch.setattr(demo, "main", lambda args: 0)
    base = ["demo", "--out", str(tmp_path), "--quiet"]
    assert cli.main([*base, "--strikes", "1000", "--expiries", str(cli.DEMO_MAX_CHAIN // 1000)]) == 0
    assert cli.main([*base, "--strikes", "1000", "--expiries", str(cli.DEMO_MAX_CHAIN // 1000 + 1)]) == 2
    assert "--strikes x --expiries" in capsys.readouterr().err


def test_demo_out_of_memory_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """Within the bound a small machine can still run out: a message naming the options, exit 2."""
    import argparse

    from tickgpu.app import demo

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(demo, "run_demo", no_memory)
    args = argparse.Namespace(data=str(_small_day(tmp_path)), orderbook=None, backend="cpu", ticks=5,
                              strikes=1000, expiries=1000, out=str(tmp_path / "rep"), quiet=True)
    assert demo.main(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "out of memory" in err and "--strikes 1,000" in err and "--expiries 1,000" in err
    assert not (tmp_path / "rep").exists()


# ---- bench ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_bench_cpu_quick_writes_results(tmp_path):
    r = tickgpu_cmd("bench", "--suite", "cpu", "--quick", "--out", str(tmp_path), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    files = list(tmp_path.glob("cpu-*.json"))
    assert len(files) == 1, files
    res = json.loads(files[0].read_text())
    assert res["suite"] == "cpu" and res["quick"] is True
    assert {"cpu_model", "cores", "python", "numpy", "date"} <= set(res["machine"])
    assert set(res["sections"]) == {"greeks", "implied_vol", "surface", "book"}
    for name, sec in res["sections"].items():
        assert "error" not in sec, sec.get("error")
        assert sec["cases"], name
        for c in sec["cases"]:
            assert {"impl", "n", "median_ns", "p99_ns", "items_per_s", "speedup"} <= set(c)
            assert c["median_ns"] > 0
    names = " ".join(t["name"] for t in res["targets"])
    assert "greeks" in names and "implied vol" in names and "book" in names
    for t in res["targets"]:
        assert isinstance(t["passed"], bool)
    # The baselines agree with tickgpu (a fast wrong answer must not win).
    g = res["sections"]["greeks"]["checks"][-1]["max_abs_diff"]
    assert max(g.values()) < 1e-8
    assert res["sections"]["implied_vol"]["checks"]["tickgpu_vs_true_vol_max_abs"] < 1e-8
    assert res["sections"]["surface"]["checks"][-1]["max_abs_diff"] < 1e-12
    syn = [c for c in res["sections"]["book"]["checks"] if c["stream"] == "synthetic"][0]
    assert syn["tickgpu_rejected"] == 0 and syn["max_abs_mid_diff"] == 0.0


# ---- argument checks, pipes and unusable inputs ----------------------------------------------------

@pytest.mark.parametrize("option, value", [("--ticks", "abc"), ("--strikes", "1.5"), ("--expiries", "1e3")])
def test_count_that_is_not_a_whole_number_says_so(option, value):
    """argparse used to answer with the checking function's name: 'invalid _positive value'."""
    r = tickgpu_cmd("demo", option, value, "--quiet", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"argument {option}: must be a whole number, got '{value}'" in r.stderr, r.stderr
    assert "_positive" not in r.stderr


@pytest.mark.parametrize("command", [["demo", "--quiet"], ["bench", "--suite", "cpu", "--quick"]])
def test_empty_out_is_a_usage_error(tmp_path, command):
    """Path('') is the working directory: the results landed wherever the command was run."""
    r = tickgpu_cmd(*command, "--out", "", timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "argument --out: an empty path names no directory" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_bench_floor_that_cannot_be_read_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """A mistyped --floor was ignored: the suite ran (minutes on a GPU) without its floor ratios."""
    from tickgpu import cli

    monkeypatch.setattr(cli, "_load_suite", lambda name: pytest.fail("the suite ran"))
    for floor, why in [(tmp_path / "nope.txt", "no such file"), (tmp_path, "is a directory, not a file"),
                       ("", "an empty path names no file")]:
        with pytest.raises(SystemExit) as e:
            cli.main(["bench", "--suite", "gpu", "--out", str(tmp_path / "out"), "--floor", str(floor)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "argument --floor: " in err and why in err, err
    (tmp_path / "floor.txt").write_text("")
    assert cli.readable_file(str(tmp_path / "floor.txt")) == str(tmp_path / "floor.txt")


@pytest.mark.parametrize("suite", ["gpu", "memory", "quant"], ids=lambda s: f"{s}_suite")   # not "gpu": a GPU-test mark
def test_gpu_suites_without_a_gpu_say_the_gpu_is_missing(tmp_path, suite):
    """The gpu suite used to say it needed CuPy, the quant suite that torch saw no device: the
    reason is the GPU, and the runtime's reason for it is given."""
    r = tickgpu_cmd("bench", "--suite", suite, "--quick", "--out", str(tmp_path), timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"suite '{suite}' needs a usable GPU: disabled by TICKGPU_DISABLE_GPU" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and list(tmp_path.iterdir()) == []


def test_bench_help_says_which_suites_need_a_gpu():
    r = tickgpu_cmd("bench", "--help", timeout=60)
    assert r.returncode == 0
    assert "gpu, memory and quant need a usable GPU" in " ".join(r.stdout.split())


@pytest.mark.parametrize("argv", [["--version"], ["doctor", "--json"], ["doctor"]])
def test_closed_output_pipe_is_not_a_traceback(argv):
    """`tickgpu doctor --json | head -1` ended in a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)                        # the reader is gone before the first write
    try:
        r = subprocess.run([sys.executable, "-m", "tickgpu", *argv], stdout=write_end, stderr=subprocess.PIPE,
                           text=True, timeout=60, env=dict(os.environ, TICKGPU_DISABLE_GPU="1"))
    finally:
        os.close(write_end)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def _without_read_override():
    """A command prefix under which chmod 000 keeps this process out (root reads anything)."""
    if os.geteuid() != 0:
        return []
    import shutil

    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: an unreadable file cannot be made")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "--"]


@pytest.mark.parametrize("which", ["--data", "--orderbook", "beside"])
def test_demo_unreadable_input_names_the_option(tmp_path, which):
    """An unreadable file was reported as '[Errno 13] Permission denied: PATH', naming no option."""
    msg = _small_day(tmp_path)
    book = tmp_path / "x_orderbook_1.csv"
    args = ["--data", str(msg)] + (["--orderbook", str(book)] if which == "--orderbook" else [])
    locked = msg if which == "--data" else book
    locked.chmod(0)
    try:
        env = dict(os.environ, TICKGPU_DISABLE_GPU="1", COLUMNS="200")
        r = subprocess.run([*_without_read_override(), sys.executable, "-m", "tickgpu", "demo", *args, "--quiet",
                            "--out", str(tmp_path / "rep")], capture_output=True, text=True, timeout=120, env=env)
    finally:
        locked.chmod(0o644)
    option = "the orderbook file beside --data" if which == "beside" else which
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"tickgpu demo: {option}: cannot read {locked}: Permission denied" in " ".join(r.stderr.split()), r.stderr
    assert "Errno" not in r.stderr and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("case, said", [
    ("backwards", r"message 6 is at 1 s, before message 5 at 34200\.\d+ s \(LOBSTER times are seconds after midnight, "
                  r"in order\)"),
    ("past_a_day", r"its message times span 1,000,000,\d{3} s, more than a day"),
])
def test_demo_message_times_out_of_order_or_beyond_a_day_are_usage_errors(tmp_path, case, said):
    """Times 31 years on reprice every option past its expiry: the demo ended in a 'FAILED' vol
    check and exit 1 (the library's fault, as it read) on a file that is not a LOBSTER day."""
    msg = _small_day(tmp_path)
    lines = msg.read_text().splitlines(keepends=True)     # a header, then messages 1, 2, ...
    for k in range(6, len(lines)) if case == "past_a_day" else (6,):
        f = lines[k].split(",")
        f[0] = repr(float(f[0]) + 1e9) if case == "past_a_day" else "1"
        lines[k] = ",".join(f)
    msg.write_text("".join(lines))
    r = tickgpu_cmd("demo", "--data", str(msg), "--ticks", "0", "--quiet", "--out", str(tmp_path / "rep"),
                    "--strikes", "4", "--expiries", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(said, " ".join(r.stderr.split())), r.stderr
    assert not (tmp_path / "rep").exists()


def test_demo_failed_check_under_quiet_is_said(tmp_path, monkeypatch, capsys):
    """With --quiet a failed vol check exited 1 and printed nothing at all."""
    import argparse

    from tickgpu.app import demo

    real = demo.run_demo

    def failing(*a, **k):
        result = real(*a, **k)
        result.report["iv_check"]["passed"] = False
        result.report["iv_check"]["summary"] = "1 without a vol: FAILED"
        return result

    monkeypatch.setattr(demo, "run_demo", failing)
    args = argparse.Namespace(data=str(_small_day(tmp_path)), orderbook=None, backend="cpu", ticks=5,
                              strikes=4, expiries=2, out=str(tmp_path / "rep"), quiet=True)
    assert demo.main(args) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert "tickgpu demo: implied vol check: 1 without a vol: FAILED" in " ".join(out.err.split())
