"""Argument checks shared by the finance operations.

Mismatched shapes always raise. With ``strict=True`` the first bad element raises a ValueError
naming the argument, its index and the reason; without it, bad elements come back as NaN.

The checks run on every call, so the common cases (Python scalars, NumPy arrays, the two float
dtypes) are answered by type and dictionary lookups before anything general is tried.
"""
from __future__ import annotations

import numpy as np

BACKENDS = ("auto", "cpu", "gpu")
DTYPES = (np.float64, np.float32)

_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)
_DTYPE_OF = {np.float64: _F64, np.float32: _F32, _F64: _F64, _F32: _F32, float: _F64,
             "float64": _F64, "float32": _F32, "f8": _F64, "f4": _F32, "d": _F64, "f": _F32}
# Types whose shape is () without asking NumPy (np.shape(1.0) converts to an array first).
# Single real numbers: Python's and every real NumPy scalar type (complex ones are not prices).
SCALAR_TYPES = frozenset({float, int, bool, np.bool_, np.float16, np.float32, np.float64, np.longdouble,
                          np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64})
_ndarray = np.ndarray


def check_dtype(dtype) -> np.dtype:
    try:
        return _DTYPE_OF[dtype]
    except (KeyError, TypeError):
        pass
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: must be float64 or float32, got {dtype!r}") from None
    if dt not in (_F64, _F32):
        raise TypeError(f"dtype: must be float64 or float32, got {dt}")
    return dt


def check_backend(backend: str) -> str:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    return backend


def shape_of(a) -> tuple[int, ...]:
    """np.shape(a), without converting scalars, NumPy arrays or GPU arrays."""
    t = type(a)
    if t in SCALAR_TYPES:
        return ()
    if t is np.ndarray:
        return a.shape
    shape = getattr(a, "shape", None)
    if isinstance(shape, tuple) and not isinstance(a, (list, tuple)):
        return shape if type(shape) is tuple else tuple(map(int, shape))   # CuPy's; PyTorch's Size: a subclass
    if shape is not None and not isinstance(a, (list, tuple)):
        try:
            return tuple(int(d) for d in shape)
        except TypeError:
            pass
    return np.shape(a)


def host_shape(values) -> tuple[int, ...] | None:
    """The common shape of `values` where the answer needs no broadcasting, else None.

    The per-call fast path: every value is a NumPy array or a scalar (`SCALAR_TYPES`), and the
    arrays of more than zero dimensions all have one shape. Such values are all on the host
    and broadcast to that shape; for anything else (lists, GPU arrays, shapes to broadcast or
    that mismatch) None says to take the general path (`broadcast_values`), which gives the
    same shape where this one gives one.
    """
    shape = ()
    for v in values:
        tv = type(v)
        if tv is _ndarray:
            s = v.shape
            if s and s != shape:
                if shape:   # a second shape: broadcasting (or its error) is the general path's
                    return None
                shape = s
        elif tv not in SCALAR_TYPES:
            return None
    return shape


def _broadcast2(a: tuple, b: tuple) -> tuple | None:
    if len(a) < len(b):
        a, b = b, a
    lead = len(a) - len(b)
    out = list(a[:lead])
    for x, y in zip(a[lead:], b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def broadcast_values(names, values) -> tuple[int, ...]:
    """The common shape of `values` (named `names`), or the ValueError of `broadcast_shape`."""
    out: tuple = ()
    for name, v in zip(names, values):
        try:
            s = shape_of(v)
        except ValueError as e:     # a ragged nesting of lists
            raise ValueError(f"{name}: not an array of one shape ({e})") from None
        if not s or s == out:
            continue
        out = s if not out else _broadcast2(out, s)
        if out is None:
            broadcast_shape(**dict(zip(names, values)))   # raises, naming the arguments
            raise AssertionError("unreachable")
    return out


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


# dtype kinds that are real numbers: bool, signed and unsigned integers, floats.
_REAL_KINDS = frozenset("biuf")
# The elements of an object array (Python ints beyond int64, and what NumPy put beside them) that
# are real numbers: no bool (a flag), no string, None or complex.
_OBJECT_REALS = SCALAR_TYPES - {bool, np.bool_}


def int_overflow(names, values, error: OverflowError) -> Exception:
    """The error for an OverflowError a call raised converting its inputs: a ValueError naming the
    first input that is (or holds) a Python int beyond float64's range; `error` itself if none is."""
    for name, v in zip(names, values):
        try:
            if isinstance(v, int):
                float(v)
            elif isinstance(v, (list, tuple)):
                real_array(name, v, flags=True)   # only its integers' range matters here
        except OverflowError:
            return ValueError(f"{name}: an integer beyond float64's range (~1.8e308)")
        except ValueError as e:
            return e
    return error


def call_flag(name: str, x) -> bool:
    """A single call flag: True / False, or an integer 1 / 0 (as `tickgpu.greeks` takes them);
    else ValueError (another integer) or TypeError (not bool or integer) naming `name`."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        if x in (0, 1):
            return bool(x)
        raise ValueError(f"{name}: must be True/False (or 1/0), got {x!r}")
    raise TypeError(f"{name}: must be a bool, got {type(x).__name__}")


def array_of(name: str, a) -> np.ndarray:
    """np.asarray(a), or, for a ragged nesting of lists, a ValueError naming `name` (NumPy's own
    names no argument)."""
    try:
        return np.asarray(a)
    except ValueError as e:
        raise ValueError(f"{name}: not an array of one shape ({e})") from None
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None


def real_array(name: str, a, flags: bool = False) -> np.ndarray:
    """`a` as an ndarray of real numbers (not converted further), or TypeError naming `name`.

    NumPy would parse strings ("100"), drop the imaginary part of complex numbers (with a
    warning only) and turn None into NaN on the way to float; none of those is a price. Nor is a
    boolean (True as 1.0: ``greeks(S, K, t, r, vol, False)`` meant as a put would be a dividend
    yield of 0): refused unless `flags` (an input of call flags, where bools are the values).
    """
    if type(a) is _ndarray:
        arr = a
    else:
        try:
            arr = np.asarray(a)
        except ValueError as e:     # a ragged nesting of lists (array_of, inline: a per-call path)
            raise ValueError(f"{name}: not an array of one shape ({e})") from None
        except TypeError as e:      # an array NumPy cannot read (a tensor on a device other than CUDA)
            raise TypeError(f"{name}: {e}") from None
    if arr.dtype == object and arr.size and all(type(v) in _OBJECT_REALS for v in arr.flat):
        # Python ints beyond int64 (alone, or with floats: [2**64, 1.5]): numbers, as floats where they fit
        try:
            return arr.astype(np.float64)
        except OverflowError:
            raise ValueError(f"{name}: an integer beyond float64's range (~1.8e308)") from None
    if arr.dtype.kind not in _REAL_KINDS or (arr.dtype.kind == "b" and not flags):
        what = f"an array of {arr.dtype}" if isinstance(a, (np.ndarray, list, tuple)) else type(a).__name__
        raise TypeError(f"{name}: must be a real number or an array of real numbers, got {what}")
    return arr



def refuse_non_numbers(names, values, flag: str | None = None, skip=()) -> None:
    """What a call with nothing to compute (an empty broadcast shape) still refuses, as a call of
    any size does: the first of `values` (named by `names`, those in `skip` left out) that is not
    real numbers, a boolean other than the flag input `flag`'s, or an integer beyond float64's
    range (`real_array`'s TypeError or ValueError)."""
    for name, v in zip(names, values):
        if name not in skip:
            real_array(name, v, flags=name == flag)

def require(name: str, a, ok: np.ndarray, reason: str, seen: np.ndarray | None = None) -> None:
    """Raise ValueError at the first element of `a` where `ok` is False.

    `seen`, when given, is `a` as the computation sees it (converted to its dtype); where that
    changed the offending value (1e39 -> inf, 1e-50 -> 0.0 in float32) the message shows both.
    """
    if not np.all(ok):
        a = np.asarray(a)
        flat = int(np.flatnonzero(~np.broadcast_to(ok, a.shape).ravel())[0])
        value = a.ravel()[flat].item()   # a Python number: "got -0.1", not "np.float64(-0.1)"
        where = f"{name}[{_index(a, flat)}]" if a.ndim else name
        detail = ""
        if seen is not None:
            converted = np.broadcast_to(seen, a.shape).ravel()[flat]
            if converted.item() != value and value == value:    # NaN stays NaN: nothing to add
                detail = f" ({converted.item()!r} in {converted.dtype})"
        raise ValueError(f"{where}: {reason}, got {value!r}{detail}")


def _seen(a: np.ndarray, dtype) -> np.ndarray:
    """`a` (float64) as the kernel of `dtype` reads it: float32 rounds, overflows to inf and
    underflows to 0."""
    if dtype is None or np.dtype(dtype) == _F64:
        return a
    with np.errstate(over="ignore", under="ignore"):
        return a.astype(dtype)


def require_finite(name: str, a, dtype=None) -> np.ndarray:
    """`a` as float64, or ValueError at its first element that is not finite as `dtype`."""
    a = np.asarray(real_array(name, a), dtype=np.float64)
    seen = _seen(a, dtype)
    require(name, a, np.isfinite(seen), "must be finite", seen)
    return a


def require_positive(name: str, a, dtype=None) -> np.ndarray:
    """`a` as float64, or ValueError at its first element that is not finite and > 0 as `dtype`."""
    a = require_finite(name, a, dtype)
    seen = _seen(a, dtype)
    require(name, a, seen > 0, "must be > 0", seen)
    return a


def require_nonnegative(name: str, a, dtype=None) -> np.ndarray:
    """`a` as float64, or ValueError at its first element that is not finite and >= 0 as `dtype`."""
    a = require_finite(name, a, dtype)
    seen = _seen(a, dtype)
    require(name, a, seen >= 0, "must be >= 0", seen)
    return a
