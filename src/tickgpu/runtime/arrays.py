"""GPU arrays from other libraries (CuPy, PyTorch, Numba, JAX...), read without importing them.

A GPU array is anything with ``__cuda_array_interface__`` (CAI, read first: it is a plain dict) or
a ``__dlpack_device__`` naming a CUDA device (then the DLPack capsule is read with ctypes).
Outputs are made by the input's own library, imported lazily from ``type(x).__module__``, so
torch is imported only when the caller passed torch tensors. Where that library makes none, they
are tickgpu's own `DeviceArray`, which exports DLPack (in C, csrc/py/dlpack.c), and JAX takes them
over from there.

CuPy arrays and PyTorch CUDA tensors are recognised by type and read through their own attributes
(their interfaces build a dict on every access, microseconds each). A tick loop on CuPy arrays that
drops each call's results before the next gets the same result arrays back, rewritten, instead of
ten new ones a call (`empty_outputs`, `RECYCLE_SETS`).
"""
from __future__ import annotations

import ctypes
import math
import sys
import threading

import numpy as np

from tickgpu.memory.errors import PoolError

__all__ = ["DeviceView", "is_device_array", "device_view", "view_or_none", "producer_stream", "empty_like_kind",
           "forget_results",
           "empty_outputs", "adopt_outputs", "DeviceArray", "dlpack_capsule"]

_DL_CUDA, _DL_CUDA_MANAGED = 2, 13
_DL_DTYPES = {(2, 64): np.float64, (2, 32): np.float32, (1, 8): np.uint8, (0, 8): np.int8, (6, 8): np.bool_,
              (0, 32): np.int32, (0, 64): np.int64}


def is_device_array(x) -> bool:
    """True if `x` is an array in GPU memory (CAI or DLPack on a CUDA device); never raises."""
    if isinstance(x, (np.ndarray, np.generic, int, float, bool)) or x is None:
        return False
    tx = type(x)
    if tx is (_CUPY[0] or _cupy_ndarray()):   # its interface is a dict built afresh on each access
        return True
    if tx is (_TORCH[0] or _torch_tensor()):
        return bool(x.is_cuda)
    try:
        if getattr(x, "__cuda_array_interface__", None) is not None:
            return True
    except PoolError:    # a closed tickgpu array (ManagedArray): say so, not "not an array"
        raise
    except Exception:    # torch raises for a CPU tensor's CAI; that is a "no"
        pass
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        kind, _ = dev()
    except Exception:
        return False
    return int(kind) in (_DL_CUDA, _DL_CUDA_MANAGED)


class DeviceView:
    """What the runtime needs of a GPU array: address, shape, dtype, contiguity, stream, owner.

    ptr, shape, dtype, contiguous; stream: the CAI stream to order work on (1 legacy default, 2
    per-thread), None where unknown; device_id; source: the caller's array (keeps its memory
    alive); capsule: the DLPack capsule read, kept alive while its pointer is in use; size: the
    elements (Python ints: np.prod costs microseconds a call), taken from the caller where it
    knows them. A plain class with slots: one is made per GPU-array argument per call.
    """

    __slots__ = ("ptr", "shape", "dtype", "contiguous", "stream", "device_id", "source", "capsule", "size")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, contiguous: bool, stream: int | None,
                 device_id: int | None, source: object, capsule: object = None, size: int | None = None):
        self.ptr, self.shape, self.dtype, self.contiguous = ptr, shape, dtype, contiguous
        self.stream, self.device_id, self.source, self.capsule = stream, device_id, source, capsule
        self.size = math.prod(shape) if size is None else size

    def __repr__(self) -> str:
        return (f"DeviceView(ptr={self.ptr:#x}, shape={self.shape}, dtype={self.dtype}, contiguous={self.contiguous}, "
                f"stream={self.stream}, device_id={self.device_id})")


def _c_contiguous(shape, strides, itemsize) -> bool:
    if strides is None:
        return True
    expect = itemsize
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim != 1 and st != expect:
            return False
        expect *= dim
    return True


_TYPESTR: dict[str, np.dtype] = {}   # CAI typestr -> dtype: np.dtype() parses the string each time


def _from_cai(x, cai) -> DeviceView:
    typestr = cai["typestr"]
    dtype = _TYPESTR.get(typestr)
    if dtype is None:
        dtype = _TYPESTR[typestr] = np.dtype(typestr)
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    ptr = int(cai["data"][0])
    dev = None
    try:
        kind, dev = x.__dlpack_device__()
        dev = int(dev)
    except Exception:
        pass
    return DeviceView(ptr, shape, dtype, _c_contiguous(shape, strides, dtype.itemsize),
                      cai.get("stream"), dev, x)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


# Function objects of our own (pythonapi's attributes are shared, and so are their argtypes).
_capsule_read = ctypes.pythonapi["PyCapsule_GetPointer"]
_capsule_read.restype, _capsule_read.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _from_dlpack(x, stream: int | None) -> DeviceView:
    # The producer orders its pending work before `stream` (DLPack's contract for the consumer's stream).
    capsule = x.__dlpack__(stream=stream) if stream is not None else x.__dlpack__()
    t = _DLTensor.from_address(_capsule_read(capsule, b"dltensor"))   # DLManagedTensor starts with its DLTensor
    code = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or code not in _DL_DTYPES:
        raise TypeError(f"GPU array of DLPack dtype code {t.dtype.code} bits {t.dtype.bits} lanes "
                        f"{t.dtype.lanes} is not supported")
    dtype = np.dtype(_DL_DTYPES[code])
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim))
    return DeviceView(int(t.data or 0) + int(t.byte_offset), shape, dtype,
                      _c_contiguous(shape, strides, dtype.itemsize), None, int(t.device.device_id), x, capsule)


def _unordered(x, cai) -> bool:
    """Whether `x`'s interface promises nothing about when its data is ready while DLPack would.

    Version 3 names the stream to order on. Version 2 names none and promises nothing: JAX's
    (version 2) hands out the address of a buffer whose transfer or computation may still be
    running. PyTorch's (version 2 too) is ordered on its current stream (`producer_stream`); any
    other such producer that has ``__dlpack__`` is read through DLPack instead, whose producer
    must make its pending work visible on the stream the consumer names.
    """
    return (cai.get("version", 0) < 3 and "stream" not in cai and _library(x) != "torch"
            and hasattr(type(x), "__dlpack__"))


def device_view(x, name: str, dlpack_stream: int | None = None) -> DeviceView:
    """The `DeviceView` of GPU array `x` (argument `name`, for messages)."""
    try:
        cai = getattr(x, "__cuda_array_interface__", None)
    except Exception:
        cai = None
    if cai is not None and not _unordered(x, cai):
        return _from_cai(x, cai)
    try:
        return _from_dlpack(x, dlpack_stream)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None


def view_or_none(x, name: str, dlpack_stream: int | None = None, stream: bool = True) -> DeviceView | None:
    """`device_view(x)` where `x` is a GPU array, else None: one probe of its interface, not two.

    Same answer as `is_device_array(x)` followed by `device_view`, for callers that look at every
    argument (a CuPy array builds its interface dict afresh on each access). ``stream=False``: the
    caller already knows the stream to order on, and a CuPy array is read through its own
    attributes, its view naming no stream (CuPy's interface names its current stream, the same
    for every array, so one array's interface tells it).
    """
    tx = type(x)
    if tx in _PLAIN:
        return None
    if not stream and tx is (_CUPY[0] or _cupy_ndarray()):
        data = x.data
        return DeviceView(data.ptr, x.shape, x.dtype, x.flags.c_contiguous, None, data.device_id, x, None, x.size)
    if tx is (_TORCH[0] or _torch_tensor()):
        v = _torch_view(x)
        if v is not None:
            return v
        if x.is_cuda and x.requires_grad:
            raise TypeError(f"{name}: a CUDA tensor that requires grad; pass {name}.detach() (tickgpu computes "
                            f"no gradients)")
    try:
        cai = getattr(x, "__cuda_array_interface__", None)
    except PoolError:    # a closed tickgpu array (ManagedArray)
        raise
    except Exception:    # torch raises for a CPU tensor's CAI: not a GPU array through CAI
        cai = None
    if cai is not None and not _unordered(x, cai):
        return _from_cai(x, cai)
    if cai is None and not is_device_array(x):
        return None
    try:
        return _from_dlpack(x, dlpack_stream)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None


def _cupy_ndarray():
    """CuPy's array type where CuPy is imported (by the caller: this module never imports it);
    remembered in `_CUPY` once found."""
    cupy = sys.modules.get("cupy")
    nd = _CUPY[0] = getattr(cupy, "ndarray", None) if cupy is not None else None
    return nd


_CUPY = [None]


def _torch_tensor():
    """PyTorch's tensor type where torch is imported (by the caller), remembered in `_TORCH`."""
    torch = sys.modules.get("torch")
    t = _TORCH[0] = getattr(torch, "Tensor", None) if torch is not None else None
    return t


_TORCH = [None]
_TORCH_DTYPES: dict = {}   # torch dtype -> NumPy dtype, for the dtypes a kernel reads


def _torch_view(x) -> DeviceView | None:
    """The view of a CUDA tensor from its own attributes -- what its interface (version 2, no stream)
    would say, without building the dict (a few us a tensor) -- or None where the interface itself
    must answer: a CPU, sparse or grad-requiring tensor, a dtype no kernel reads."""
    if not x.is_cuda or x.requires_grad or x.is_sparse:
        return None
    if not _TORCH_DTYPES:
        torch = sys.modules["torch"]
        _TORCH_DTYPES.update({torch.float64: np.dtype(np.float64), torch.float32: np.dtype(np.float32),
                              torch.uint8: np.dtype(np.uint8), torch.int8: np.dtype(np.int8),
                              torch.bool: np.dtype(np.bool_)})
    dtype = _TORCH_DTYPES.get(x.dtype)
    if dtype is None:
        return None
    shape = tuple(x.shape)
    return DeviceView(x.data_ptr() if x.numel() else 0, shape, dtype, x.is_contiguous(), None, x.device.index, x)


_PLAIN = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.bool_, np.uint8, np.int64, type(None)})


def producer_stream(v: DeviceView) -> int | None:
    """The stream the array's producer orders its work on, or None where it does not say.

    CAI v3 names it (1: legacy default, 2: per-thread default, else a CUstream). PyTorch's
    interface names none, so its current stream is asked for (torch is already imported when a
    tensor was passed).
    """
    if v.stream is not None:
        return int(v.stream)
    if _library(v.source) == "torch":
        torch = sys.modules.get("torch")
        if torch is not None:
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # ~10x cheaper than current_stream()
            if raw is not None and v.device_id is not None:
                return int(raw(v.device_id))
            return int(torch.cuda.current_stream(v.source.device).cuda_stream)
    return None


#: Up to this many elements, same-dtype results are rows of one allocation (`empty_outputs`).
ROWS_OF_ONE_BLOCK = 1 << 16
#: CuPy results of up to ROWS_OF_ONE_BLOCK elements are kept after the call: once nothing but this
#: module holds them (the caller has dropped every result array, every view of one and every
#: memory pointer into them), the next call of the same size, dtypes and stream hands out the same
#: arrays again instead of making new ones (ten CuPy arrays made and freed cost ~30 us a call).
#: Up to RECYCLE_SETS sets a kind, RECYCLE_KINDS kinds (the oldest kind is forgotten first);
#: `forget_results` drops them all.
RECYCLE_SETS = 3
RECYCLE_KINDS = 32
_RECYCLE: dict = {}
_RECYCLE_LOCK = threading.Lock()


class _ResultSet:
    """A call's CuPy results kept for reuse: the arrays, their device addresses, and the reference
    counts of every object through which they can be reached when this set alone holds them."""

    __slots__ = ("outs", "ptrs", "objs", "counts")

    def __init__(self, outs: tuple, roots: tuple):
        self.outs = outs   # 1-D arrays (`_cupy_outputs` keeps no others)
        self.ptrs = tuple(o.data.ptr for o in outs)
        # The arrays, their roots, their memory pointers and the memory behind them: a view of a
        # result, a pointer taken from one, an array made over such a pointer, a DLPack export, all
        # hold one of these.
        objs = [*outs, *roots, *(a.data for a in (*outs, *roots))]
        objs += list({id(m): m for m in (a.data.mem for a in objs[:len(outs) + len(roots)])}.values())
        self.objs = tuple(objs)
        self.counts = ()   # set by the maker once its own references are gone (`seal`)

    def seal(self) -> None:
        """Take the reference counts as they are now: those of the set holding the arrays alone."""
        self.counts = self._counts()

    def _counts(self) -> tuple:
        return tuple(map(sys.getrefcount, self.objs))

    def free(self) -> bool:
        """Whether nothing but this set reaches the arrays, and none was reshaped in place (a 1-D
        array reshaped to anything else has more dimensions)."""
        return self._counts() == self.counts and all(o.ndim == 1 for o in self.outs)


def forget_results() -> None:
    """Drop the CuPy results kept for reuse (their memory goes back to CuPy's pool once the caller
    holds none of them)."""
    with _RECYCLE_LOCK:
        _RECYCLE.clear()


def _cupy_outputs(cupy, shape, dtypes, device_id, stream) -> list:
    # Under a lock of its own: a set found free is handed out (the returned list holds its arrays)
    # before any other thread can find it free too.
    with _RECYCLE_LOCK:
        return _cupy_outputs_locked(cupy, shape, dtypes, device_id, stream)


def _cupy_outputs_locked(cupy, shape, dtypes, device_id, stream) -> list:
    k, n = len(dtypes), math.prod(shape)
    small = len(shape) == 1 and n <= ROWS_OF_ONE_BLOCK
    key = None
    if stream is not None and small:
        key = (device_id, stream, n, tuple(dtypes))
        sets = _RECYCLE.get(key)
        if sets is not None:
            for rs in sets:
                if rs.free():
                    return list(zip(rs.outs, rs.ptrs))
    with cupy.cuda.Device(device_id):
        if k > 1 and small and len(set(dtypes)) == 1:
            # Rows of one block, as the host path's small results: one allocation, not k.
            block = cupy.empty(k * n, dtype=dtypes[0])
            outs, roots = tuple(cupy.split(block, k)), (block,)
            del block
        else:
            outs = tuple(cupy.empty(shape, dtype=dt) for dt in dtypes)
            roots = ()
    if key is None:
        return [(o, o.data.ptr) for o in outs]
    sets = _RECYCLE.get(key)
    if sets is None:
        if len(_RECYCLE) >= RECYCLE_KINDS:
            del _RECYCLE[next(iter(_RECYCLE))]
        sets = _RECYCLE[key] = []
    if len(sets) < RECYCLE_SETS:
        rs = _ResultSet(outs, roots)
        del roots
        rs.seal()
        sets.append(rs)
        return list(zip(rs.outs, rs.ptrs))
    return [(o, o.data.ptr) for o in outs]


def empty_outputs(x, shape: tuple[int, ...], dtypes, device_id: int, stream: int | None = None
                  ) -> list[tuple[object, int]] | None:
    """New, uninitialised GPU arrays of `shape`, one per dtype, from `x`'s library, each with its
    device address; None where that library makes none (the caller makes `DeviceArray`s).

    `empty_like_kind` for a whole set of outputs: the device is entered once, and each address is
    read from the library's own attribute rather than through its interchange protocol. Same-dtype
    results of up to ROWS_OF_ONE_BLOCK elements are rows of one allocation. CuPy's, for a call that
    will run on `stream`, may be a previous call's results that nothing holds any more
    (`RECYCLE_SETS`): work the caller queued on that stream before dropping them runs before the
    kernel writes them again, as with any CuPy allocation on that stream.
    """
    lib = _library(x)
    if lib == "cupy":
        cupy = sys.modules.get("cupy") or __import__("cupy")
        return _cupy_outputs(cupy, shape, dtypes, device_id, stream)
    if lib == "torch":
        k, n = len(dtypes), math.prod(shape)
        if k > 1 and len(shape) == 1 and n <= ROWS_OF_ONE_BLOCK and len(set(dtypes)) == 1:
            block = empty_like_kind(x, (k, n), dtypes[0], device_id)
            base, row = block.data_ptr(), n * np.dtype(dtypes[0]).itemsize   # rows of a C-contiguous block
            return [(o, base + j * row) for j, o in enumerate(block.unbind(0))]
        outs = [empty_like_kind(x, shape, dt, device_id) for dt in dtypes]
        return [(o, o.data_ptr()) for o in outs]
    return None


def adopt_outputs(x, outs: list) -> list:
    """Finished `DeviceArray` results as arrays of `x`'s library where that library can take them
    over without a copy and cannot make them itself: JAX (``jax.dlpack.from_dlpack``; imported
    already, since `x` is one of its arrays). Any other kind comes back unchanged."""
    if _library(x) in ("jax", "jaxlib"):
        jax = sys.modules.get("jax")
        if jax is not None:
            return [jax.dlpack.from_dlpack(o) for o in outs]
    return outs


def _library(x) -> str:
    return type(x).__module__.split(".", 1)[0]


def empty_like_kind(x, shape: tuple[int, ...], dtype, device_id: int):
    """A new, uninitialised GPU array of `shape`/`dtype` from the same library as `x`.

    CuPy and PyTorch make their own arrays (on `device_id`); any other producer gets a
    `DeviceArray` (CAI-compatible, so CuPy, Numba and PyTorch can all read it).
    """
    lib = _library(x)
    dtype = np.dtype(dtype)
    if lib == "cupy":
        cupy = sys.modules.get("cupy") or __import__("cupy")
        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=dtype)
    if lib == "torch":
        torch = sys.modules.get("torch") or __import__("torch")
        if not _TORCH_OF:
            _TORCH_OF.update({np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
                              np.dtype(np.int8): torch.int8, np.dtype(np.uint8): torch.uint8})
        return torch.empty(shape, dtype=_TORCH_OF[dtype], device=x.device)
    return None


_TORCH_OF: dict = {}   # NumPy dtype -> torch dtype, for the dtypes a kernel writes


# ---- DLPack export -------------------------------------------------------------------------------
# The capsule and its callbacks are C (csrc/py/dlpack.c says why): the tensor holds a reference to
# the exporting object until the consumer releases it, from any thread, and nothing Python is
# touched once the interpreter is finalizing.
_DL_CPU = 1
_DL_CODE = {np.dtype(dt): code for code, dt in _DL_DTYPES.items()}
_DL_CODE[np.dtype(np.float16)] = (2, 16)
_EXPORT: list = []   # [tg_dlpack_capsule], bound on first use


def _exporter():
    if not _EXPORT:
        import atexit

        from tickgpu import _tickgpu_native
        from tickgpu._native import lib

        # PyDLL: the call holds the GIL and a NULL return raises the exception the C code set.
        f = ctypes.PyDLL(_tickgpu_native.__file__).tg_dlpack_capsule
        f.restype = ctypes.py_object
        f.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int]
        atexit.register(lib.tg_dlpack_at_exit)
        _EXPORT.append(f)
    return _EXPORT[0]


def dlpack_capsule(owner, ptr: int, shape: tuple[int, ...], dtype: np.dtype, device: tuple[int, int]):
    """A DLPack capsule ("dltensor") of the C-contiguous array at `ptr` on `device` (DLPack's
    (device_type, device_id)); `owner` stays alive until the consumer releases the tensor."""
    code = _DL_CODE.get(np.dtype(dtype))
    if code is None:
        raise BufferError(f"DLPack export: dtype {np.dtype(dtype)} has no DLPack code here")
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    return _exporter()(owner, ptr, len(shape), dims, code[0], code[1], int(device[0]), int(device[1]))


class DeviceArray:
    """A minimal GPU array owned by tickgpu, for producers whose library cannot make one.

    Exposes ``__cuda_array_interface__`` (version 3) and DLPack (``__dlpack__``, so
    ``torch.from_dlpack``, ``cupy.from_dlpack`` and ``jax.dlpack.from_dlpack`` take it without a
    copy); freed when garbage-collected and no DLPack consumer holds it. tickgpu hands these out
    with their work finished, so a consumer's stream needs no ordering.
    """

    def __init__(self, context, shape: tuple[int, ...], dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._context = context
        nbytes = max(1, math.prod(self.shape) * self.dtype.itemsize)
        # From the context's device pool: a steady stream of calls makes no driver allocation.
        self.ptr, self._token = context.memory.device(nbytes)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3, "stream": None}

    def __dlpack_device__(self) -> tuple[int, int]:
        return _DL_CUDA, int(getattr(self._context, "ordinal", 0))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this array (legacy, unversioned, which consumers accept whatever
        `max_version` they name). BufferError for ``copy=True`` or another `dl_device`."""
        if copy:
            raise BufferError("DeviceArray.__dlpack__: copy=True is not supported (export is zero-copy)")
        here = self.__dlpack_device__()
        if dl_device is not None and tuple(int(v) for v in dl_device) != here:
            raise BufferError(f"DeviceArray.__dlpack__: dl_device {tuple(dl_device)} is not this array's {here}")
        return dlpack_capsule(self, self.ptr, self.shape, self.dtype, here)

    def __del__(self):
        try:
            self._context.memory.free_device(self._token)
        except Exception:
            pass

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        kind, dev = self.__dlpack_device__()
        where = f"cuda:{dev}" if kind == _DL_CUDA else "host"
        return f"<{type(self).__name__} shape={self.shape} dtype={self.dtype.name} {where} ptr={self.ptr:#x}>"

    def get(self) -> np.ndarray:
        """A NumPy copy (synchronous)."""
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            self._context.driver.memcpy_dtoh(out.ctypes.data, self.ptr, out.nbytes)
        return out
