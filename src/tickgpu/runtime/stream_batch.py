"""What one `Pipeline` call carries: its inputs made ready, its outputs, and the call's statistics.

Kept apart from the streams and events of :mod:`tickgpu.runtime.streams`: this is host-side
argument handling only (names, broadcasting, dtype conversion, ``out=`` checks), no driver call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tickgpu.finance import _checks

__all__ = ["PipelineStats", "PipelineCall", "CONST_SLOT", "CONST_AREA"]

# Each broadcast value gets a 16-byte slot (the aligned kernel variants assume 16-byte aligned
# pointers); an op has at most 8 inputs.
CONST_SLOT, CONST_AREA = 16, 128
_DEFAULTS = {"greeks": {"div": 0.0, "call": True}, "implied_vol": {"div": 0.0, "call": True}}
_U8, _BOOL = np.dtype(np.uint8), np.dtype(np.bool_)


@dataclass
class PipelineStats:
    """What the last `Pipeline.run`, `Pipeline.serial` or `Pipeline.stream` did.

    Attributes
    ----------
    mode : str
        "pipeline", "serial" or "stream".
    n, chunks : int
        Options computed, and chunks they were cut into.
    first_result_s : float
        Seconds from the call's start until chunk 0's outputs were in host memory. For run and
        serial: the host time until a timing event was recorded ahead of chunk 0's first copy,
        plus the device time between that event and one recorded after chunk 0's copies out
        (event timing; no host wait is added to the run). For stream: the host wait for the
        first batch (its results are yielded then).
    total_s : float
        Wall time of the whole call, input conversion and final synchronization included.
    bytes_in, bytes_out : int
        Bytes copied host -> device and device -> host.
    options_per_s : float
        n / total_s.
    pcie_bound_s : float or None
        max(bytes_in / h2d_bw, bytes_out / d2h_bw) where the caller passed measured copy
        bandwidths: no pipeline over PCIe can beat it.
    """

    mode: str
    n: int
    chunks: int
    first_result_s: float
    total_s: float
    bytes_in: int
    bytes_out: int
    options_per_s: float
    pcie_bound_s: float | None = None

    @property
    def throughput_options_per_s(self) -> float:
        return self.options_per_s

    @property
    def efficiency(self) -> float | None:
        """pcie_bound_s / total_s (1.0 = as fast as the copies alone allow), None without bandwidths."""
        if self.pcie_bound_s is None or self.total_s <= 0:
            return None
        return self.pcie_bound_s / self.total_s


class PipelineCall:
    """One call's (or batch's) inputs, made ready: arrays of the kernel's dtypes, or single values."""

    def __init__(self, fam, dtype, inputs: dict, out: dict | None):
        names = fam.inputs
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise TypeError(f"{fam.name}: unexpected input {unknown[0]!r}; the inputs are {', '.join(names)}")
        given = dict(_DEFAULTS[fam.name], **inputs)
        missing = [k for k in names if k not in given]
        if missing:
            raise TypeError(f"{fam.name}: missing input {missing[0]!r}")
        self.values: list = []      # per input: a 1-D contiguous array of the kernel's dtype, or a number
        self.pattern = 0            # bit i set where input i is an array
        n, first = None, None
        for i, name in enumerate(names):
            x, flag = given[name], name == fam.flag
            v = _prepare(name, x, flag, dtype)
            if isinstance(v, np.ndarray):
                if n is not None and v.size != n:
                    raise ValueError(f"{name}: length {v.size} does not match {first}'s length {n}")
                n, first = v.size, first or name
                self.pattern |= 1 << i
            self.values.append(v)
        self.n = 1 if n is None else n
        self.itemsizes = [1 if name == fam.flag else dtype.itemsize for name in names]
        self.out_specs = [(name, fam.out_dtype(role, dtype)) for name, role in fam.outputs]
        self.outputs = _outputs(self.out_specs, self.n, out)
        # Array slices plus the one copy of the constant block (whose 128 bytes hold the single values).
        self.bytes_in = sum(self.n * s if (self.pattern >> i) & 1 else 0
                            for i, s in enumerate(self.itemsizes)) + (CONST_AREA if self.n else 0)
        self.bytes_out = self.n * sum(odt.itemsize for _, odt in self.out_specs)


def _prepare(name: str, x, flag: bool, dtype: np.dtype):
    """`x` as the kernel reads it: a contiguous 1-D array of `dtype` (uint8 for a flag), or a number.

    Real numbers only, as `tickgpu.greeks` takes them (TypeError naming the input otherwise: NumPy
    would parse strings, drop imaginary parts and make None a NaN); a flag takes bools or
    integers, any nonzero one a call.
    """
    try:
        a = _checks.real_array(name, x, flags=flag)
    except OverflowError:
        raise ValueError(f"{name}: an integer beyond float64's range (~1.8e308)") from None
    if a.ndim > 1:
        raise ValueError(f"{name}: must be a number or a 1-D array, got shape {a.shape}")
    if flag and a.dtype.kind not in "biu":
        raise TypeError(f"{name}: must be bool or integers (nonzero: a call), got {a.dtype}")
    if a.size == 1:                # a single value, or a one-element array: broadcast like a number
        v = a.reshape(-1)[0]
        if flag:
            return 1 if v != 0 else 0
        try:
            return float(v)
        except OverflowError:
            raise ValueError(f"{name}: an integer beyond float64's range (~1.8e308)") from None
    if flag:
        if a.dtype not in (_U8, _BOOL):
            a = a != 0            # any nonzero value is a call
        return np.ascontiguousarray(a).view(_U8)
    # A converting copy costs a pass over host memory at memcpy speed; arrays of the right
    # dtype (ideally pinned) are copied to the device straight from the caller's memory.
    return np.ascontiguousarray(a, dtype=dtype)


def _outputs(specs, n: int, out: dict | None) -> dict:
    out = dict(out or {})
    unknown = sorted(set(out) - {name for name, _ in specs})
    if unknown:
        raise ValueError(f"out[{unknown[0]!r}]: not an output; the outputs are {', '.join(n for n, _ in specs)}")
    res = {}
    for name, odt in specs:
        a = out.get(name)
        if a is None:
            res[name] = np.empty(n, dtype=odt)
            continue
        if not isinstance(a, np.ndarray) or a.shape != (n,) or a.dtype != odt or not a.flags.c_contiguous \
                or not a.flags.writeable:
            desc = f"{type(a).__name__} {getattr(a, 'shape', '')} {getattr(a, 'dtype', '')}"
            raise ValueError(f"out[{name!r}]: must be a writeable C-contiguous NumPy array of shape ({n},) and "
                             f"dtype {odt}, got {desc}")
        for other, b in res.items():
            if out.get(other) is not None and np.shares_memory(a, b):
                raise ValueError(f"out[{name!r}]: shares memory with out[{other!r}]; each result needs its own")
        res[name] = a
    return res
