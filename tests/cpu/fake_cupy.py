"""A stand-in for the few parts of CuPy that tickgpu's device path touches, over the mock driver's
"device" memory: arrays with CuPy's reference structure (each array holds its own memory pointer,
a pointer holds the memory, a view holds its root array as ``base``), ``empty``, ``split`` and
``cuda.Device``. Installed as ``sys.modules["cupy"]`` by `install` for a test.
"""
from __future__ import annotations

import ctypes
import math
import sys
import types

import numpy as np


class Memory:
    def __init__(self, mock, nbytes: int):
        self.ptr = mock.mem_alloc(max(nbytes, 1))
        self.size = nbytes


class MemoryPointer:
    def __init__(self, mem: Memory, offset: int):
        self.mem, self.ptr = mem, mem.ptr + offset
        self.device_id = 0


class _Flags:
    c_contiguous = True


class ndarray:  # noqa: N801 - CuPy's name
    """Only what the runtime reads, and a way to read the values back (`get`)."""

    _mock = None
    stream = 1   # what the interface names: CuPy's current stream (1: the legacy default)

    def __init__(self, shape, dtype, memptr: MemoryPointer, base=None):
        self.shape, self.dtype, self.data, self.base = tuple(shape), np.dtype(dtype), memptr, base
        self.flags = _Flags()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def __cuda_array_interface__(self):
        strides = None if self.flags.c_contiguous else (2 * self.dtype.itemsize,)   # as a [::2] view's
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False), "version": 3,
                "strides": strides, "stream": ndarray.stream}

    def __dlpack_device__(self):
        return (2, 0)

    def __getitem__(self, s: slice) -> "ndarray":
        start, stop, step = s.indices(self.shape[0])
        assert step == 1 and len(self.shape) == 1
        root = self.base if self.base is not None else self
        offset = self.data.ptr - self.data.mem.ptr + start * self.dtype.itemsize
        return ndarray((stop - start,), self.dtype, MemoryPointer(self.data.mem, offset), root)

    def get(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        ctypes.memmove(out.ctypes.data, self.data.ptr, out.nbytes)
        return out


ndarray.__module__ = "cupy._core.core"


def empty(shape, dtype=np.float64) -> ndarray:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dt = np.dtype(dtype)
    return ndarray(shape, dt, MemoryPointer(Memory(ndarray._mock, int(np.prod(shape)) * dt.itemsize), 0))


def asarray(host: np.ndarray) -> ndarray:
    host = np.ascontiguousarray(host)
    a = empty(host.shape, host.dtype)
    ctypes.memmove(a.data.ptr, host.ctypes.data, host.nbytes)
    return a


def split(a: ndarray, k: int) -> list:
    step = a.shape[0] // k
    return [a[i * step:(i + 1) * step] for i in range(k)]


class _Device:
    def __init__(self, device_id=0):
        self.id = device_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def install(monkeypatch, mock) -> types.ModuleType:
    """Make this module ``cupy`` (over `mock`'s memory) for one test, and make the runtime forget
    any CuPy type and kept results it has seen."""
    from tickgpu.runtime import arrays

    ndarray._mock = mock
    ndarray.stream = 1
    mod = types.ModuleType("cupy")
    mod.ndarray, mod.empty, mod.split, mod.asarray = ndarray, empty, split, asarray
    mod.cuda = types.SimpleNamespace(Device=_Device)
    monkeypatch.setitem(sys.modules, "cupy", mod)
    monkeypatch.setattr(arrays, "_CUPY", [None])
    monkeypatch.setattr(arrays, "_RECYCLE", {})
    return mod
