"""Which backend runs a call: the one place where "auto" is decided.

``backend="auto"`` runs on the GPU only where it wins with transfers counted: inputs that already
live on the GPU stay there; host inputs go to the GPU only for element counts inside the range
where the GPU was measured to beat the CPU backend for that operation on the device
(``tickgpu bench --suite gpu`` measures it).

The measured ranges ship as ``tickgpu/data/crossover.json``::

    {"gpu_range": {"greeks": [256, null], "implied_vol": [128, null], ...}}

``[lo, hi]``: the GPU wins for lo <= n < hi; ``hi`` null (no upper end) when it won up to the
largest size measured. A range with an upper end is what an honest sweep gives where copies
through the host dominate at large sizes (the CPU backend scales over cores, a PCIe link does
not). The older form ``{"crossover_n": {op: n}}`` reads as ``[n, null]``. An operation without an
entry never goes to the GPU for host data under "auto".
"""
from __future__ import annotations

import functools
import json
import os
from importlib import resources

import numpy as np

from tickgpu.errors import BackendUnavailable

__all__ = ["choose", "gpu_range", "crossover", "gpu_available", "gpu_reason", "range_from_sweep"]


@functools.lru_cache(maxsize=1)
def gpu_range() -> dict[str, tuple[int, int | None]]:
    """{op: (lo, hi)}: element counts lo <= n < hi (hi None: no upper end) where the GPU beat the
    CPU backend, NumPy in and NumPy out, as shipped in data/crossover.json; {} without the file."""
    try:
        text = resources.files("tickgpu").joinpath("data/crossover.json").read_text()
    except (FileNotFoundError, OSError):
        return {}
    doc = json.loads(text)
    out: dict[str, tuple[int, int | None]] = {}
    for op, n in (doc.get("crossover_n") or {}).items():
        if n is not None:
            out[op] = (int(n), None)
    for op, lohi in (doc.get("gpu_range") or {}).items():
        if lohi is None or lohi[0] is None:
            out.pop(op, None)
            continue
        lo, hi = int(lohi[0]), (None if len(lohi) < 2 or lohi[1] is None else int(lohi[1]))
        if hi is not None and hi <= lo:
            raise ValueError(f"data/crossover.json: gpu_range[{op!r}] = {lohi!r}: the upper end must exceed the lower")
        out[op] = (lo, hi)
    return out


def crossover() -> dict[str, int]:
    """Element counts from which the GPU beat the CPU backend (the lower ends of `gpu_range`)."""
    return {op: lo for op, (lo, _) in gpu_range().items()}


def range_from_sweep(sweep) -> tuple[int, int | None] | None:
    """The (lo, hi) to ship from a sweep of rows {"n", "cpu_p50_us", "gpu_p50_us"}, or None.

    lo: the smallest size from which the GPU won at every measured size up to the first loss
    after it (isolated wins below a loss do not count); hi: that first loss (None if the GPU won
    up to the largest size). A lone loss between wins is taken as a loss: the range ends there.
    """
    rows = sorted(sweep, key=lambda r: r["n"])
    wins = [r["gpu_p50_us"] < r["cpu_p50_us"] for r in rows]
    best = None
    i = 0
    while i < len(rows):
        if not wins[i]:
            i += 1
            continue
        j = i
        while j < len(rows) and wins[j]:
            j += 1
        run = (rows[i]["n"], rows[j]["n"] if j < len(rows) else None)
        # The longest run of wins (by sizes covered) is the range; ties go to the larger sizes.
        span = (rows[j - 1]["n"] / rows[i]["n"], j)
        if best is None or span >= best[0]:
            best = (span, run)
        i = j
    return None if best is None else best[1]


# TICKGPU_DISABLE_GPU is read on every call (setting it between calls takes effect at once), from
# os.environ's own mapping: one dict lookup instead of os.environ.get's key encoding and
# value decoding. Only os.environ's internals are read, so any change made through os.environ is
# seen; a change made behind its back (os.putenv) was never seen by os.environ.get either.
_ENV_DATA = getattr(os.environ, "_data", None)
try:
    _DISABLE_KEY = os.environ.encodekey("TICKGPU_DISABLE_GPU")
except AttributeError:   # pragma: no cover - not CPython's os._Environ
    _ENV_DATA = None
if type(_ENV_DATA) is not dict:   # pragma: no cover
    _ENV_DATA = None


_runtime = None


def gpu_available() -> bool:
    """True where the GPU backend can run: a driver, a device and a bundle for its architecture.

    False while TICKGPU_DISABLE_GPU is set (read on every call). Not cached here:
    `tickgpu.runtime.available` caches its probe and knows when a context is made or dropped (a
    cached answer here outlived both); only the module is kept, so the import is paid once.
    """
    global _runtime
    if _ENV_DATA is not None:
        if _ENV_DATA.get(_DISABLE_KEY):
            return False
    elif os.environ.get("TICKGPU_DISABLE_GPU"):   # pragma: no cover
        return False
    runtime = _runtime
    if runtime is None:
        try:
            import tickgpu.runtime as runtime
        except ImportError:
            return False
        _runtime = runtime
    try:
        return bool(runtime.available())
    except Exception:
        return False


def choose(op: str, n: int, backend: str, on_device: bool = False) -> str:
    """'cpu' or 'gpu' for operation `op` over `n` elements (an int >= 0); `backend` "auto", "cpu"
    or "gpu". ValueError (TypeError for an `n` that is not an int) naming the argument otherwise;
    an `op` without a measured crossover goes to the CPU under "auto"."""
    if backend == "cpu":
        if on_device:
            raise ValueError(f"{op}: backend='cpu' was asked for but the inputs are GPU arrays")
        return "cpu"
    if backend == "gpu":
        if not gpu_available():
            raise BackendUnavailable(f"{op}: backend='gpu' but no usable GPU ({gpu_reason()})")
        return "gpu"
    if backend != "auto":
        raise ValueError(f"backend: must be 'auto', 'cpu' or 'gpu', got {backend!r}")
    if on_device:
        return "gpu"
    if type(n) is not int:
        if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
            raise TypeError(f"n: must be an int (elements), got {n!r}")
        n = int(n)
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    r = gpu_range().get(op)
    if r is not None and n >= r[0] and (r[1] is None or n < r[1]) and gpu_available():
        return "gpu"
    return "cpu"


def gpu_reason() -> str:
    if os.environ.get("TICKGPU_DISABLE_GPU"):
        return "disabled by TICKGPU_DISABLE_GPU"
    try:
        from tickgpu.runtime import unavailable_reason
    except ImportError as e:
        return f"GPU runtime not importable: {e}"
    return unavailable_reason() or "the runtime reports none"
