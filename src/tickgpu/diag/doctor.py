"""`tickgpu doctor`: what this machine offers a latency-critical process, in one report.

Everything here reads files under /proc and /sys, package metadata and, where present,
``nvidia-smi``; nothing loads the CUDA driver except through ``tickgpu.runtime`` (which is cheap and
never raises), and nothing imports torch or triton.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = ("tickgpu", "numpy", "cffi", "cuda-bindings", "triton", "rich", "scipy")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else what the platform module knows."""
    text = _read("/proc/cpuinfo") or ""
    for key in ("model name", "Hardware", "Processor", "cpu model"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or platform.machine()


def cpu_info() -> dict:
    """Model, logical cores online, and cores this process may run on (its affinity mask)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return {"model": cpu_model(), "logical_cores": os.cpu_count() or 1, "usable_cores": usable,
            "machine": platform.machine()}


def meminfo() -> dict[str, int]:
    """/proc/meminfo as {field: value}; sizes in kB as the kernel reports them, counts as counts."""
    out: dict[str, int] = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        m = re.match(r"^(\S+):\s+(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def memory_info(mi: dict[str, int]) -> dict:
    total = mi.get("MemTotal")
    avail = mi.get("MemAvailable")
    return {"total_bytes": total * 1024 if total is not None else None,
            "available_bytes": avail * 1024 if avail is not None else None}


def huge_pages(mi: dict[str, int]) -> dict:
    """Explicit huge pages (HugePages_*) and the transparent-huge-page mode (the bracketed one)."""
    thp_raw = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    thp = None
    if thp_raw:
        m = re.search(r"\[(\w+)\]", thp_raw)
        thp = m.group(1) if m else thp_raw.strip()
    return {"total": mi.get("HugePages_Total"), "free": mi.get("HugePages_Free"),
            "size_kb": mi.get("Hugepagesize"), "thp_mode": thp}


def memlock_limit() -> dict:
    """RLIMIT_MEMLOCK (bytes; None = unlimited): how much host memory may be pinned."""
    def fmt(v: int):
        return None if v == resource.RLIM_INFINITY else int(v)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {"soft_bytes": fmt(soft), "hard_bytes": fmt(hard),
            "unlimited": soft == resource.RLIM_INFINITY}


def is_wsl2() -> bool:
    """WSL2 kernels say "microsoft" in /proc/version; managed memory is limited there."""
    return "microsoft" in (_read("/proc/version") or "").lower()


def versions() -> dict[str, str | None]:
    """Installed versions from package metadata only: importing triton or torch costs seconds."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def native_core() -> dict:
    """Whether the native core loads, and how many threads its kernels use for large calls."""
    try:
        from tickgpu._native import lib
    except Exception as e:  # a missing or broken build: say so, the rest of the report still helps
        return {"loaded": False, "error": f"{type(e).__name__}: {e}", "threads": None}
    return {"loaded": True, "error": None, "threads": int(lib.tg_num_cores())}


def nvidia_smi(timeout_s: float = 10.0) -> dict:
    """GPUs as nvidia-smi lists them (name, driver, memory, compute capability), if it is on PATH."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"present": False, "gpus": [], "error": "nvidia-smi not on PATH"}
    query = "name,driver_version,memory.total,compute_cap,pci.bus_id"
    try:
        r = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"present": True, "gpus": [], "error": f"{type(e).__name__}: {e}"}
    if r.returncode != 0:
        return {"present": True, "gpus": [], "error": (r.stderr or r.stdout).strip()[:300]}
    gpus = []
    for line in r.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            gpus.append(dict(zip(("name", "driver", "memory", "compute_cap", "pci_bus_id"), parts)))
    return {"present": True, "gpus": gpus, "error": None}


def gpu_runtime() -> dict:
    """What tickgpu's GPU runtime says: usable or not, and why not."""
    if os.environ.get("TICKGPU_DISABLE_GPU"):
        return {"available": False, "reason": "TICKGPU_DISABLE_GPU is set"}
    try:
        from tickgpu import runtime
        available = getattr(runtime, "available")
        reason = getattr(runtime, "unavailable_reason")
    except (ImportError, AttributeError) as e:
        return {"available": False, "reason": f"GPU runtime not installed in this build ({e})"}
    try:
        ok = bool(available())
        return {"available": ok, "reason": "" if ok else str(reason())}
    except Exception as e:  # the runtime promises not to raise; a report must not die if it does
        return {"available": False, "reason": f"{type(e).__name__}: {e}"}


def collect() -> dict:
    """The whole report as plain JSON-serialisable data."""
    mi = meminfo()
    return {
        "platform": {"system": platform.system(), "release": platform.release(),
                     "python": sys.version.split()[0], "implementation": platform.python_implementation(),
                     "wsl2": is_wsl2()},
        "cpu": cpu_info(),
        "memory": memory_info(mi),
        "huge_pages": huge_pages(mi),
        "memlock": memlock_limit(),
        "gpu": {"runtime": gpu_runtime(), "nvidia_smi": nvidia_smi()},
        "versions": versions(),
        "native": native_core(),
    }


def _bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


def advice(info: dict) -> list[str]:
    """Plain-language notes on what the report means for tickgpu."""
    notes = []
    hp = info["huge_pages"]
    if not hp.get("total") and hp.get("thp_mode") not in ("always", "madvise"):
        notes.append("No huge pages: pinned pools use 4 KiB pages (more TLB misses on large copies).")
    elif not hp.get("total"):
        notes.append(f"No explicit huge pages; transparent huge pages in '{hp.get('thp_mode')}' mode "
                     "(pinned pools use madvise(MADV_HUGEPAGE)).")
    ml = info["memlock"]
    if not ml["unlimited"] and (ml["soft_bytes"] or 0) < (1 << 30):
        notes.append(f"memlock limit {_bytes(ml['soft_bytes'])}: large pinned pools may fail "
                     "(raise it with ulimit -l or limits.conf).")
    if info["platform"]["wsl2"]:
        notes.append("WSL2: managed memory is limited; tickgpu uses explicit copies there.")
    if not info["gpu"]["runtime"]["available"]:
        notes.append(f"GPU backend unavailable ({info['gpu']['runtime']['reason']}); "
                     "every operation runs on the CPU backend.")
    if not info["native"]["loaded"]:
        notes.append(f"Native core did not load: {info['native']['error']}")
    return notes


def render(info: dict, console) -> None:
    """Print the report as rich tables."""
    from rich.table import Table
    from rich.markup import escape

    t = Table(title="tickgpu doctor", show_header=False, title_justify="left")
    t.add_column("item", style="bold")
    t.add_column("value")
    p = info["platform"]
    t.add_row("platform", f"{p['system']} {p['release']}" + ("  (WSL2)" if p["wsl2"] else ""))
    t.add_row("python", f"{p['implementation']} {p['python']}")
    c = info["cpu"]
    t.add_row("cpu", f"{c['model']} ({c['machine']})")
    t.add_row("cores", f"{c['logical_cores']} logical, {c['usable_cores']} usable by this process")
    m = info["memory"]
    t.add_row("memory", f"{_bytes(m['total_bytes'])} total, {_bytes(m['available_bytes'])} available")
    hp = info["huge_pages"]
    t.add_row("huge pages", f"{hp['total']} x {hp['size_kb']} kB ({hp['free']} free); THP: {hp['thp_mode']}")
    ml = info["memlock"]
    t.add_row("memlock", "unlimited" if ml["unlimited"] else
              f"soft {_bytes(ml['soft_bytes'])}, hard {_bytes(ml['hard_bytes'])}")
    g = info["gpu"]
    rt = g["runtime"]
    t.add_row("GPU runtime", "available" if rt["available"] else escape(f"unavailable: {rt['reason']}"))
    smi = g["nvidia_smi"]
    if smi["gpus"]:
        for i, gpu in enumerate(smi["gpus"]):
            t.add_row(f"GPU {i}", f"{gpu['name']}, driver {gpu['driver']}, {gpu['memory']}, "
                      f"sm {gpu['compute_cap']}")
    else:
        t.add_row("nvidia-smi", smi["error"] or "no GPU listed")
    n = info["native"]
    t.add_row("native core", f"loaded, {n['threads']} threads" if n["loaded"] else f"not loaded: {n['error']}")
    for name, v in info["versions"].items():
        t.add_row(name, v or "not installed")
    console.print(t)
    for note in advice(info):
        console.print(escape(f"- {note}"))
