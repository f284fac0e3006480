"""The ``tickgpu`` command: demo, doctor, bench, build-kernels.

Only argparse is imported up front so that ``tickgpu --help`` answers at once; each subcommand
imports what it needs when it runs.
"""
from __future__ import annotations

import argparse
import sys

SUITES = ("cpu", "gpu", "memory", "quant")
# Suites that measure the GPU (each warms the GPU backend up first): refused, with the runtime's
# reason, where no GPU is usable, before they import what they compare against (CuPy, PyTorch).
GPU_SUITES = ("gpu", "memory", "quant")
# The demo's largest chain, strikes x expiries (each a call and a put). Measured at the bound:
# 2M options, 0.75 GB resident and 1 s a tick on two CPU cores; beyond, a demo is a stress test
# (and 1e8 x 1e5 would ask for 146 TiB).
DEMO_MAX_CHAIN = 1_000_000

# Exit codes: 0 success, 1 a check inside the command failed (or the output's reader went away,
# as with rich and Python's own advice on SIGPIPE), 2 usage (bad arguments, or input files that
# are missing or cannot be used), 3 not available here.
EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _positive_or_zero(text: str) -> int:
    v = _integer(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def _positive(text: str) -> int:
    v = _integer(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def unreadable_file(path) -> tuple[type[OSError], str] | None:
    """Why `path` is not a regular file this process can read, as (the OSError it amounts to, the
    reason), or None where it is one: the one rule for every input file the commands take."""
    import os

    if os.path.isdir(path):
        return IsADirectoryError, f"{path} is a directory, not a file"
    if not os.path.exists(path):
        return FileNotFoundError, f"no such file: {path}"
    if not os.path.isfile(path):
        return OSError, f"{path} is not a regular file"
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        return type(e), f"cannot read {path}: {e.strerror or e}"
    return None


def readable_file(text: str) -> str:
    """argparse type for an input file: `text` unchanged if it names a regular file this process
    can read; otherwise ArgumentTypeError saying why (`unreadable_file`), so that a mistyped path
    is refused before a run rather than ignored."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    why = unreadable_file(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why[1])
    return text


def writable_dir(text: str) -> str:
    """argparse type for an output directory: `text` unchanged if it is a directory that can be
    written in, or one that can be created; otherwise ArgumentTypeError saying why.

    Checked when the arguments are read, so that a bad --out fails before a run rather than after
    it: a scratch directory is made and removed in the nearest folder that exists. Nothing is left
    behind; the directory itself is made only when results are written.
    """
    import os
    import tempfile
    from pathlib import Path

    if not text:
        # Path("") is the working directory: results would land wherever the command was run.
        raise argparse.ArgumentTypeError("an empty path names no directory (use . for this one)")
    path = Path(text)
    base = next(b for b in (path, *path.parents) if os.path.exists(b))
    if not base.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory" if base == path else
                                         f"{base} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tickgpu-probe-", dir=base))
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write in {base}: {e.strerror or e}") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tickgpu",
        description="Latency-first option and order-book kernels on the GPU, and on the CPU where it wins.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser(
        "demo", help="replay a day of real order-book data as a market maker: book, signal model, surface, greeks, "
                     "implied vol",
        description="Replays a LOBSTER message file tick by tick. Every message updates the book and its "
                    "features; on every underlying tick (a message after which the mid price differs from "
                    "the mid before it) the shipped quantized signal model predicts the mid's next move and "
                    "an option chain around the mid is repriced with full greeks from a vol surface, its "
                    "implied vols solved back from simulated quotes. Reports per-stage latency (a table, "
                    "and demo.json and demo.html in --out). Exit 1 if the implied vol check fails, 2 for "
                    "bad arguments or input files, 3 if --backend gpu is asked for and no GPU is usable.")
    d.add_argument("--data", metavar="MESSAGE_CSV",
                   help="LOBSTER message file (default: the bundled AMZN 2012-06-21 level-1 day)")
    d.add_argument("--orderbook", metavar="ORDERBOOK_CSV",
                   help="matching LOBSTER orderbook file (default: found beside --data by name)")
    d.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto",
                   help="where the library calls run (default auto: the GPU where one is usable and it wins, "
                        "the CPU otherwise)")
    d.add_argument("--ticks", type=_positive_or_zero, default=2000,
                   help="underlying ticks to replay (default 2000; 0 = the whole file)")
    d.add_argument("--strikes", type=_positive, default=100,
                   help=f"strikes per expiry (default 100; strikes x expiries at most {DEMO_MAX_CHAIN:,})")
    d.add_argument("--expiries", type=_positive, default=12, help="expiries in the chain (default 12)")
    d.add_argument("--out", type=writable_dir, default="tickgpu-report",
                   help="report directory (default tickgpu-report/)")
    d.add_argument("--quiet", action="store_true", help="no progress bar and no table")

    doc = sub.add_parser("doctor", help="what this machine offers: CPU, memory, huge pages, memlock, GPU, versions")
    doc.add_argument("--json", action="store_true", help="print the report as JSON")

    b = sub.add_parser("bench", help="benchmarks side by side against what you would use otherwise",
                       description="Runs a benchmark suite and saves JSON to --out. Suites: cpu (native core "
                                   "vs NumPy/SciPy, vollib, QuantLib, a Python book); gpu, memory and quant "
                                   "need a usable GPU (gpu also CuPy and PyTorch, quant PyTorch with CUDA); "
                                   "all runs every suite that can run here and says why the others cannot.")
    b.add_argument("--suite", choices=(*SUITES, "all"), default="cpu", help="the suite to run (default cpu)")
    b.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    b.add_argument("--out", type=writable_dir, default="benchmarks/results",
                   help="result directory (default benchmarks/results)")
    b.add_argument("--floor", metavar="FLOOR_TXT", type=readable_file,
                   help="gpu, memory and quant suites: output of the floor programs, to compare tickgpu "
                        "against the hardware floor")

    sub.add_parser("build-kernels", add_help=False,
                   help="compile the Triton and CUDA C kernels into a bundle (arguments go to the builder)")
    return p


def cmd_demo(args) -> int:
    if args.strikes * args.expiries > DEMO_MAX_CHAIN:
        print(f"tickgpu demo: --strikes x --expiries: {args.strikes:,} x {args.expiries:,} is more than the "
              f"demo's {DEMO_MAX_CHAIN:,} (strike, expiry) pairs", file=sys.stderr)
        return EXIT_USAGE
    from tickgpu.app.demo import main as demo_main

    return demo_main(args)


def cmd_doctor(args) -> int:
    import json

    from tickgpu.diag import doctor

    info = doctor.collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.console import Console

    doctor.render(info, Console())
    return 0


def _load_suite(name: str):
    """The suite's module, or (None, reason) where it is not part of this installation or, for a
    GPU suite, where no GPU is usable."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(f"tickgpu.bench.{name}") is None:
        return None, f"suite '{name}' is not part of this installation"
    if name in GPU_SUITES:
        from tickgpu import runtime

        if not runtime.available():
            return None, f"suite '{name}' needs a usable GPU: {runtime.unavailable_reason()}"

    try:
        mod = importlib.import_module(f"tickgpu.bench.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("tickgpu.bench"):
            return None, f"suite '{name}' is not part of this installation"
        return None, f"suite '{name}' needs a module that is not installed: {e.name}"
    if not hasattr(mod, "run"):
        return None, f"tickgpu.bench.{name} has no run(args)"
    return mod, ""


def cmd_bench(args) -> int:
    """Runs one suite, or every suite for ``all`` (unavailable ones are listed and skipped).

    Exit status: that of the suite; for ``all``, the worst of those that ran, or 3 when none could.
    """
    names = SUITES if args.suite == "all" else (args.suite,)
    codes = []
    for name in names:
        mod, why = _load_suite(name)
        if mod is None:
            print(f"tickgpu bench: {why}" + ("; skipped" if args.suite == "all" else ""), file=sys.stderr)
            if args.suite != "all":
                return EXIT_UNAVAILABLE
            continue
        try:
            code = mod.run(args)
        except Exception as e:
            from tickgpu.errors import BackendUnavailable

            if isinstance(e, ModuleNotFoundError):
                why = f"needs the module '{e.name}', which is not installed here"
            elif isinstance(e, BackendUnavailable):
                why = str(e)
            else:
                raise
            print(f"tickgpu bench: suite '{name}' cannot run here: {why}", file=sys.stderr)
            if args.suite != "all":
                return EXIT_UNAVAILABLE
            continue
        codes.append(int(code or 0))
    return max(codes) if codes else EXIT_UNAVAILABLE


def cmd_build_kernels(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        print("tickgpu build-kernels: needs Triton (pip install 'tickgpu[build]'); no GPU is needed",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        from tickgpu.kernels.build import main as build_main
    except ImportError as e:
        print(f"tickgpu build-kernels: the kernel builder is not part of this installation ({e})",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    return int(build_main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `tickgpu doctor --json | head -1`: the reader closed the pipe. Stop without a traceback;
        # stdout goes to /dev/null so that the interpreter's final flush does not fail again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


def _run(argv: list[str]) -> int:
    # Everything after build-kernels belongs to the builder, --help included.
    if argv and argv[0] == "build-kernels":
        return cmd_build_kernels(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"tickgpu {version('tickgpu')}")
        return 0
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    handlers = {"demo": cmd_demo, "doctor": cmd_doctor, "bench": cmd_bench}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
