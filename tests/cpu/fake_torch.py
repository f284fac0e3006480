"""A stand-in for the few parts of PyTorch that tickgpu's device path touches, over the mock driver's
"device" memory: CUDA tensors (a storage, an offset, a shape and strides; dtypes that are singletons
as PyTorch's are), ``empty``, ``unbind`` and the current raw stream. Installed as
``sys.modules["torch"]`` by `install` for a test (the real torch, where the tests have imported it,
comes back after).
"""
from __future__ import annotations

import ctypes
import math
import sys
import types

import numpy as np


class dtype:  # noqa: N801 - PyTorch's name
    def __init__(self, name: str, np_dtype):
        self.name, self.np = name, np.dtype(np_dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


float64, float32 = dtype("float64", np.float64), dtype("float32", np.float32)
bool_, uint8, int8 = dtype("bool", np.bool_), dtype("uint8", np.uint8), dtype("int8", np.int8)
_OF_NUMPY = {d.np: d for d in (float64, float32, bool_, uint8, int8)}


class device:  # noqa: N801
    def __init__(self, kind: str, index: int | None = None):
        self.type, self.index = kind, index


class _Storage:
    def __init__(self, mock, nbytes: int):
        self.ptr = mock.mem_alloc(max(nbytes, 1))


class Tensor:
    """Only what the runtime reads, and a way to read the values back (`get`)."""

    _mock = None
    stream = 0   # device 0's current raw stream (0: the legacy default stream, as PyTorch's default)
    other_streams: dict = {}

    def __init__(self, shape, dt: dtype, storage: _Storage, offset: int = 0, strides=None, index: int = 0):
        self.shape, self.dtype, self._storage, self._offset = tuple(shape), dt, storage, offset
        self._strides = tuple(strides) if strides is not None else _c_strides(self.shape)
        self._index = index
        self.requires_grad, self.is_sparse = False, False
        self._kind = "cuda"   # another kind ("xpu"): a device numbered from 0 as well, not CUDA

    @property
    def is_cuda(self) -> bool:
        return self._kind == "cuda" and self._index >= 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> device:
        return device(self._kind, self._index) if self._index >= 0 else device("cpu")

    @property
    def __cuda_array_interface__(self):   # PyTorch's: version 2, no stream, strides None when contiguous
        if not self.is_cuda:
            raise AttributeError(f"Can't get __cuda_array_interface__ on non-CUDA tensor type: {self._kind}")
        item = self.dtype.np.itemsize
        strides = None if self.is_contiguous() else tuple(s * item for s in self._strides)
        return {"shape": self.shape, "typestr": self.dtype.np.str, "data": (self.data_ptr(), False), "version": 2,
                "strides": strides}

    def __dlpack_device__(self):
        return (2 if self.is_cuda else 14, self._index)   # kDLCUDA, kDLOneAPI

    def __array__(self, dtype=None, copy=None):   # PyTorch's answer for a tensor not in host memory
        raise TypeError(f"can't convert {self._kind}:{self._index} device type tensor to numpy. Use Tensor.cpu() "
                        f"to copy the tensor to host memory first.")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def numel(self) -> int:
        return math.prod(self.shape)

    def get_device(self) -> int:
        return self._index

    def is_contiguous(self) -> bool:
        return self._strides == _c_strides(self.shape)

    def data_ptr(self) -> int:
        return self._storage.ptr + self._offset * self.dtype.np.itemsize

    def unbind(self, dim: int = 0) -> tuple:
        assert dim == 0 and len(self.shape) == 2
        rows, cols = self.shape
        return tuple(Tensor((cols,), self.dtype, self._storage, self._offset + r * self._strides[0],
                            self._strides[1:], self._index) for r in range(rows))

    def __getitem__(self, s: slice) -> "Tensor":
        start, stop, step = s.indices(self.shape[0])
        assert len(self.shape) == 1
        return Tensor((len(range(start, stop, step)),), self.dtype, self._storage, self._offset + start * self._strides[0],
                      (step * self._strides[0],), self._index)

    def get(self) -> np.ndarray:
        assert self.is_contiguous()
        out = np.empty(self.shape, self.dtype.np)
        ctypes.memmove(out.ctypes.data, self.data_ptr(), out.nbytes)
        return out


Tensor.__module__ = "torch"


def _c_strides(shape) -> tuple:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def empty(shape, dtype=float64, device=None) -> Tensor:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    index = 0 if device is None or device.index is None else device.index
    return Tensor(shape, dtype, _Storage(Tensor._mock, math.prod(shape) * dtype.np.itemsize), index=index)


def asarray(host: np.ndarray) -> Tensor:
    """A CUDA tensor holding `host`'s values (``torch.as_tensor(host, device="cuda")``)."""
    host = np.ascontiguousarray(host)
    t = empty(host.shape, _OF_NUMPY[host.dtype])
    ctypes.memmove(t.data_ptr(), host.ctypes.data, host.nbytes)
    return t


def _current_stream(index: int) -> int:
    """torch._C._cuda_getCurrentRawStream: the current stream of device `index`."""
    if not isinstance(index, int) or index < 0:
        raise TypeError(f"a device index, not {index!r}")
    return Tensor.stream if index == 0 else Tensor.other_streams.get(index, 0)


def install(monkeypatch, mock) -> types.ModuleType:
    """Make this module ``torch`` (over `mock`'s memory) for one test, and make the runtime forget
    any tensor type and dtypes it has seen."""
    from tickgpu.runtime import arrays

    Tensor._mock = mock
    Tensor.stream = 0
    Tensor.other_streams = {}   # the current stream of devices other than 0
    mod = types.ModuleType("torch")
    mod.Tensor, mod.empty, mod.device = Tensor, empty, device
    for d in (float64, float32, uint8, int8):
        setattr(mod, d.name, d)
    mod.bool = bool_
    mod._C = types.SimpleNamespace(_cuda_getCurrentRawStream=_current_stream)
    mod.asarray = asarray
    monkeypatch.setitem(sys.modules, "torch", mod)
    monkeypatch.setattr(arrays, "_TORCH", [None])
    monkeypatch.setattr(arrays, "_TORCH_DTYPES", {})
    monkeypatch.setattr(arrays, "_TORCH_OF", {})
    return mod
