"""The native core: the CFFI module, status codes mapped to exceptions, and array plumbing.

Every C entry point takes element strides, so a broadcast scalar costs nothing and a contiguous
array is passed without a copy; anything else is made contiguous once, here.
"""
from __future__ import annotations

import numpy as np

from tickgpu._tickgpu_native import ffi, lib

__all__ = ["ffi", "lib", "NativeError", "check", "as_input", "ptr"]


class NativeError(RuntimeError):
    """A native-core call failed; ``status`` is the tg_status name."""

    def __init__(self, what: str, status: int):
        self.status = ffi.string(lib.tg_status_name(status)).decode()
        super().__init__(f"{what}: {self.status}")


def check(status: int, what: str) -> None:
    if status != lib.TG_OK:
        raise NativeError(what, status)


def ptr(a: np.ndarray, ctype: str = "void *"):
    """A C pointer to a NumPy array's first element (the array must outlive the call).

    The array must be C-contiguous (every array `as_input` returns is). ``ffi.from_buffer`` costs
    a tenth of ``a.ctypes.data``, which builds a ctypes object per call.
    """
    return ffi.cast(ctype, ffi.from_buffer(a))


def as_input(a: np.ndarray, shape: tuple[int, ...], dtype) -> tuple[np.ndarray, int]:
    """An array the C core can read as `shape` with one element stride: (array, stride).

    A single value is passed once with stride 0; an array already of `shape`, contiguous and of
    `dtype` is passed as it is; anything else is broadcast and copied once.
    """
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.size == 1:
        return np.ascontiguousarray(a, dtype=dtype).reshape(1), 0
    if a.shape == shape and a.dtype == dtype and a.flags.c_contiguous:
        return a, 1
    return np.ascontiguousarray(np.broadcast_to(a, shape), dtype=dtype), 1
