"""Argument checks shared by the finance operations.

Mismatched shapes always raise. With ``strict=True`` the first bad element raises a ValueError
naming the argument, its index and the reason; without it, bad elements come back as NaN.
"""
from __future__ import annotations

import numpy as np

BACKENDS = ("auto", "cpu", "gpu")
DTYPES = (np.float64, np.float32)


def check_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise TypeError(f"dtype: must be float64 or float32, got {dt}")
    return dt


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    return backend


def broadcast_shape(**arrays) -> tuple[int, ...]:
    """The common shape of the arguments, or a ValueError naming the two that disagree."""
    try:
        return np.broadcast_shapes(*(np.shape(a) for a in arrays.values()))
    except ValueError:
        pass
    shape: tuple[int, ...] = ()
    seen = None
    for name, a in arrays.items():
        try:
            shape = np.broadcast_shapes(shape, np.shape(a))
        except ValueError:
            raise ValueError(
                f"shape mismatch: {name} has shape {np.shape(a)}, which does not broadcast "
                f"with {seen} (together {shape})"
            ) from None
        seen = name if seen is None else f"{seen}, {name}"
    raise AssertionError("unreachable")


def _index(a: np.ndarray, flat: int):
    return int(flat) if a.ndim <= 1 else tuple(int(i) for i in np.unravel_index(flat, a.shape))


def require(name: str, a, ok: np.ndarray, reason: str) -> None:
    """Raise ValueError at the first element of `a` where `ok` is False."""
    if not np.all(ok):
        a = np.asarray(a)
        flat = int(np.flatnonzero(~np.broadcast_to(ok, a.shape).ravel())[0])
        value = a.ravel()[flat].item()   # a Python number: "got -0.1", not "np.float64(-0.1)"
        where = f"{name}[{_index(a, flat)}]" if a.ndim else name
        raise ValueError(f"{where}: {reason}, got {value!r}")


def require_finite(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    require(name, a, np.isfinite(a), "must be finite")
    return a


def require_positive(name: str, a) -> np.ndarray:
    a = require_finite(name, a)
    require(name, a, a > 0, "must be > 0")
    return a


def require_nonnegative(name: str, a) -> np.ndarray:
    a = require_finite(name, a)
    require(name, a, a >= 0, "must be >= 0")
    return a
