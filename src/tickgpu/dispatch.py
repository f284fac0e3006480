"""Which backend runs a call: the one place where "auto" is decided.

``backend="auto"`` runs on the GPU only where it wins with transfers counted: inputs that already
live on the GPU stay there; host inputs go to the GPU only at or above the crossover size that
was measured for that operation on the device (``tickgpu bench --suite gpu`` writes it).
"""
from __future__ import annotations

import functools
import json
import os
from importlib import resources

from tickgpu.errors import BackendUnavailable


@functools.lru_cache(maxsize=1)
def crossover() -> dict[str, int]:
    """Element counts from which the GPU beat the CPU backend, NumPy in and NumPy out.

    Measured on the GPU machine by ``tickgpu bench --suite gpu`` and shipped as data/crossover.json
    (see benchmarks/results/ for the sweep behind it). An operation without an entry never goes to the
    GPU for host data under "auto".
    """
    try:
        text = resources.files("tickgpu").joinpath("data/crossover.json").read_text()
    except (FileNotFoundError, OSError):
        return {}
    table = json.loads(text).get("crossover_n", {})
    return {op: int(n) for op, n in table.items() if n is not None}


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True where the GPU backend can run: a driver, a device and a bundle for its architecture."""
    if os.environ.get("TICKGPU_DISABLE_GPU"):
        return False
    try:
        from tickgpu.runtime import available
    except ImportError:
        return False
    try:
        return bool(available())
    except Exception:
        return False


def choose(op: str, n: int, backend: str, on_device: bool = False) -> str:
    """'cpu' or 'gpu' for operation `op` over `n` elements."""
    if backend == "cpu":
        if on_device:
            raise ValueError(f"{op}: backend='cpu' was asked for but the inputs are GPU arrays")
        return "cpu"
    if backend == "gpu":
        if not gpu_available():
            raise BackendUnavailable(f"{op}: backend='gpu' but no usable GPU ({gpu_reason()})")
        return "gpu"
    if on_device:
        return "gpu"
    threshold = crossover().get(op)
    if threshold is not None and n >= threshold and gpu_available():
        return "gpu"
    return "cpu"


def gpu_reason() -> str:
    try:
        from tickgpu.runtime import unavailable_reason
    except ImportError as e:
        return f"GPU runtime not importable: {e}"
    return unavailable_reason()
