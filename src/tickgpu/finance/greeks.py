"""Black-Scholes-Merton prices and greeks of European options, on the CPU core or the GPU."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from tickgpu import dispatch
from tickgpu._native import as_input, check, ffi, lib
from tickgpu.finance import _checks

__all__ = ["Greeks", "greeks"]

GREEK_NAMES = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


@dataclass(frozen=True)
class Greeks:
    """Price and greeks of a batch of European options, each an array of the inputs' broadcast shape.

    Units follow QuantLib: ``vega``, ``rho`` and ``phi`` (dividend rho) per 1.00 change of vol,
    rate and dividend yield (divide by 100 for "per point"); ``theta`` and ``charm`` per year of
    calendar time (divide by 365 for per day); ``vanna`` = d delta / d vol; ``volga`` =
    d vega / d vol.
    """

    price: np.ndarray
    delta: np.ndarray
    gamma: np.ndarray
    vega: np.ndarray
    theta: np.ndarray
    rho: np.ndarray
    phi: np.ndarray
    vanna: np.ndarray
    volga: np.ndarray
    charm: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        """The ten arrays by name, in the order of the fields."""
        return {name: getattr(self, name) for name in GREEK_NAMES}


def greeks(spot, strike, t, rate, vol, div=0.0, call=True, *, dtype=np.float64, backend="auto",
           strict=False) -> Greeks:
    """Black-Scholes-Merton price and greeks of European options with a continuous dividend yield.

    Parameters
    ----------
    spot, strike : array_like
        Underlying price and strike, in currency, > 0.
    t : array_like
        Time to expiry in years, >= 0.
    rate, div : array_like
        Continuously compounded risk-free rate and dividend yield (per year, 0.05 = 5%).
        For Black-76 on futures pass the forward as ``spot`` and ``div = rate``.
    vol : array_like
        Black-Scholes volatility per sqrt(year), > 0 (0.2 = 20%).
    call : bool or array_like of bool
        True for calls, False for puts (an integer array of 0 and 1 is accepted too).
    dtype : numpy.float64 or numpy.float32
        Precision of the computation and of the results. float32 computes in float32 throughout.
    backend : {"auto", "cpu", "gpu"}
        Where to compute; "auto" leaves it to :func:`tickgpu.dispatch.choose`.
    strict : bool
        If True, the first bad element raises instead of giving NaN.

    Returns
    -------
    Greeks
        Arrays of the broadcast shape of the inputs (0-d arrays when all inputs are scalars), of
        `dtype`; units as in :class:`Greeks`.

    Raises
    ------
    ValueError
        Shapes that do not broadcast (always). With ``strict=True``, also the first bad element,
        naming the argument, its index and the reason (non-finite, spot <= 0, strike <= 0, t < 0,
        vol <= 0, judged on the values as converted to `dtype`; then rate or div out of range),
        e.g. ``"vol[3]: must be > 0, got -0.1"``, ``"vol: must be > 0, got 1e-50 (0.0 in
        float32)"``.
    TypeError
        A `dtype` other than float64 / float32, a `call` that is not boolean, or an input that is
        not real numbers (strings, complex, None, booleans: ``greeks(S, K, t, r, vol, False)`` is
        refused, not a dividend yield of 0).

    Notes
    -----
    Without ``strict``, an element with a non-finite input, spot <= 0, strike <= 0, t < 0 or
    vol <= 0 (after conversion to `dtype`: float32 overflows beyond ~3.4e38 and underflows below
    ~1e-45) gives NaN in all ten outputs, and the other elements are unaffected. So does an
    element out of range, where the discounted spot ``spot * exp(-div * t)`` or the discounted
    strike ``strike * exp(-rate * t)``, computed in `dtype`, is 0 or overflows (``rate * t`` or
    ``div * t`` beyond what the dtype can discount, e.g. ``rate * t < -709`` in float64, ``< -88``
    in float32): `implied_vol` reports the same options as BAD_INPUT. At t == 0 (or -0.0) the
    result is the intrinsic value with the limit greeks: in the money delta = +-1 and theta =
    -/+(r K - q S); out of the money everything 0; gamma, vega, vanna, volga 0; exactly at the
    money delta = +-1/2, gamma = +inf, theta = -inf (the limits as t -> 0). Where the normal
    density at d1 underflows (far from the money, a tiny or a huge vol) vanna, volga and the
    density part of charm are 0, their limits. A price is never negative (nor -0.0): far out of
    the money, where its two legs' difference rounds below zero, it is 0, so `implied_vol` takes
    every price this gives. See csrc/tickgpu.h.
    """
    fast = _fast
    if fast is not None and strict is False:
        g = fast(dtype, backend, spot, strike, t, rate, vol, div, call)
        if g is not None:   # a Greeks as _greeks_of makes it; None: not a call the C entry takes
            return g
    dt = _checks.check_dtype(dtype)
    if type(backend) is not str or backend not in _BACKENDS:
        _checks.check_backend(backend)
    values = (spot, strike, t, rate, vol, div, call)
    try:
        shape, on_device = shape_and_place(_ARG_NAMES, values)
        if call is not True:
            call = _call_flags(call)
            values = (spot, strike, t, rate, vol, div, call)
        if strict:
            _check_elements(spot, strike, t, rate, vol, div, dt)
        n = 1
        for d in shape:
            n *= d
        if dispatch.choose("greeks", n, backend, on_device=on_device) == "gpu":
            return _greeks_of((_ops or _runtime_ops()).greeks_arrays(values, dt, shape, on_device))
        return _greeks_cpu(values, dt, shape, n)
    except OverflowError as e:      # a Python int beyond float64's range, met converting it
        raise _checks.int_overflow(_ARG_NAMES, values, e) from None


_ops = None
# The GPU runtime's C entry for a staged tick (Ticker.call of tickgpu._fasttick), set while a context
# has one (runtime/fasttick.py): the usual NumPy call goes from here straight into C.
_fast = None


def _runtime_ops():
    """tickgpu.runtime.ops, imported on first GPU use (importing tickgpu never loads the runtime)."""
    global _ops
    if _ops is None:
        from tickgpu.runtime import ops

        _ops = ops
    return _ops


_ARG_NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")
_host_shape = _checks.host_shape
_BACKENDS = frozenset(_checks.BACKENDS)
_F64 = np.dtype(np.float64)
_BOOL, _U8 = np.dtype(np.bool_), np.dtype(np.uint8)
_ndarray = np.ndarray
_empty = np.empty
# Types that are never GPU arrays: answered by type, so host calls skip the probing.
_HOST_TYPES = frozenset({float, int, bool, np.ndarray, np.float64, np.float32, np.bool_, np.int64, np.uint8,
                         list, tuple})


def _greeks_of(arrays) -> Greeks:
    # Greeks is frozen: its __init__ goes through object.__setattr__ field by field; filling the
    # instance dict directly is the same object, several times cheaper per call (one unpacking
    # into the dict's keys: no keyword dict and no iterator per call).
    g = _new(Greeks)
    d = g.__dict__
    (d["price"], d["delta"], d["gamma"], d["vega"], d["theta"], d["rho"], d["phi"], d["vanna"], d["volga"],
     d["charm"]) = arrays
    return g


_new = object.__new__


def bind_inputs(pointers, strides, values, dt: np.dtype, shape, scratch, names) -> list:
    """Point `pointers[i]` / `strides[i]` (views of a native input struct) at each of `values`.

    A Python scalar goes into `scratch[i]` (stride 0); an array already of `shape`, `dt` and
    C-contiguous is read in place (stride 1); anything else is converted once (`as_input`), after
    a TypeError naming the argument (`names`, in the order of `values`) if it is not real numbers.
    Returns the converted arrays, which must stay alive until the native call returns.
    """
    keep = []
    i = 0
    for v in values:
        tv = type(v)
        # Arrays first: the per-tick case. Slot k of the struct is (pointer, stride) at 2k, 2k + 1.
        if tv is _ndarray and v.dtype is dt and v.shape == shape and v.flags.c_contiguous:
            pointers[i] = _from_buffer(v)
            strides[i + 1] = 1 if v.size != 1 else 0
        elif tv is float or tv is int:
            k = i >> 1
            scratch[k] = v
            pointers[i] = scratch + k
            strides[i + 1] = 0
        else:
            # real_array converts a non-array once, as as_input would, and refuses what would
            # only become a number by parsing ("100"), truncation (complex) or as NaN (None),
            # and booleans (a flag passed in a number's place).
            arr, stride = as_input(_checks.real_array(names[i >> 1], v), shape, dt)
            keep.append(arr)
            pointers[i] = _from_buffer(arr)
            strides[i + 1] = stride
        i += 2
    return keep


def bind_flags(pointers, strides, slot: int, call, shape, scratch) -> object:
    """The `call` flags into slot `slot` of the input struct (bool or uint8 arrays in place)."""
    tc = type(call)
    if tc is bool or tc is int:
        scratch[0] = 1 if call else 0
        pointers[2 * slot] = scratch
        strides[2 * slot + 1] = 0
        return None
    if tc is _ndarray and (call.dtype is _BOOL or call.dtype is _U8) and call.shape == shape \
            and call.flags.c_contiguous:
        pointers[2 * slot] = _from_buffer(call)
        strides[2 * slot + 1] = 1 if call.size != 1 else 0
        return None
    flags, stride = as_input(call, shape, np.uint8)
    pointers[2 * slot] = _from_buffer(flags)
    strides[2 * slot + 1] = stride
    return flags


class ArgFrame:
    """One thread's native arguments for a CPU call: made once, every slot rewritten by each call.

    The greeks and implied-vol input structs have one layout (seven (pointer, stride) pairs, the
    flags last), so one block serves both. Each call writes all seven input slots (and, for
    greeks, all ten output pointers) before the C call, so nothing of an earlier call is read.
    A frame belongs to one call at a time: `take_frame` pops it from its thread's free list and
    `give_frame` returns it after the C call has returned. Another thread (which may run while the
    C call has released the GIL) has frames of its own; a call started on the same thread while
    one is binding (from a signal handler) finds the list empty and makes another; a call that
    raises just drops its frame.
    """

    __slots__ = ("bsm", "iv", "pointers", "strides", "scratch64", "scratch32", "flag", "outputs", "out")

    def __init__(self):
        self.bsm = ffi.new("tg_bsm_inputs *")
        self.iv = ffi.cast("tg_iv_inputs *", self.bsm)
        self.pointers, self.strides = ffi.cast("void **", self.bsm), ffi.cast("int64_t *", self.bsm)
        self.scratch64, self.scratch32, self.flag = ffi.new("double[6]"), ffi.new("float[6]"), ffi.new("uint8_t[1]")
        self.outputs = ffi.new("tg_greeks_outputs *")
        self.out = ffi.cast("uintptr_t *", self.outputs)


_frames = threading.local()


def take_frame() -> ArgFrame:
    """A frame of this thread's that no call is using (see `ArgFrame`)."""
    try:
        free = _frames.free
    except AttributeError:
        free = _frames.free = []
    return free.pop() if free else ArgFrame()


def give_frame(frame: ArgFrame) -> None:
    """Return `frame` to this thread's free list once its C call has returned."""
    _frames.free.append(frame)


def _greeks_cpu(values: tuple, dt: np.dtype, shape, n: int) -> Greeks:
    fr = take_frame()
    pointers, strides = fr.pointers, fr.strides
    f64 = dt is _F64
    # Every converted array stays referenced until the call returns: the C core reads in place.
    keep = bind_inputs(pointers, strides, values[:6], dt, shape, fr.scratch64 if f64 else fr.scratch32,
                       _ARG_NAMES)
    flags = bind_flags(pointers, strides, 6, values[6], shape, fr.flag)
    if n <= _SMALL:
        # Small results share one block: one allocation instead of ten (rows are independent
        # C-contiguous arrays of `shape`; the block lives as long as any of them).
        block = _empty((10,) + shape, dt)
        out = fr.out
        base, step = int(_cast(_UINTPTR, _from_buffer(block))), n * dt.itemsize
        # Unrolled: ten stores, no range() iteration per call.
        out[0] = base
        out[1] = base + step
        out[2] = base + 2 * step
        out[3] = base + 3 * step
        out[4] = base + 4 * step
        out[5] = base + 5 * step
        out[6] = base + 6 * step
        out[7] = base + 7 * step
        out[8] = base + 8 * step
        out[9] = base + 9 * step
        # Rows by index: iterating an ndarray costs twice as much as ten subscripts.
        results = (block[0, ...], block[1, ...], block[2, ...], block[3, ...], block[4, ...], block[5, ...],
                   block[6, ...], block[7, ...], block[8, ...], block[9, ...])
    else:
        out = _cast(_VOID_PP, fr.outputs)
        results = [_empty(shape, dt) for _ in GREEK_NAMES]
        for i, a in enumerate(results):
            out[i] = _from_buffer(a)
    st = (lib.tg_greeks_f64 if f64 else lib.tg_greeks_f32)(n, fr.bsm, fr.outputs, 0)
    del keep, flags
    give_frame(fr)
    if st:
        check(st, "tg_greeks")
    return _greeks_of(results)


_from_buffer, _cast, _ffi_new = ffi.from_buffer, ffi.cast, ffi.new
# C types resolved once (a type given as a string is looked up on every call).
_VOID_PP, _UINTPTR = ffi.typeof("void **"), ffi.typeof("uintptr_t")


# Up to this many options the ten results are rows of one block (see _greeks_cpu).
_SMALL = 4096


def _call_flags(call):
    """`call` as flags (1 call, 0 put): a bool, or a bool / uint8 array; a device array unchanged."""
    if call is True or call is False:
        return call
    tc = type(call)
    if tc is _ndarray:
        if call.dtype is _BOOL:
            return call
        flags = call
    elif tc is np.bool_:
        return bool(call)
    else:
        if _is_device_array(call):
            return call
        flags = np.asarray(call)
    if flags.dtype == np.bool_:
        return flags
    if np.issubdtype(flags.dtype, np.integer):
        _checks.require("call", flags, (flags == 0) | (flags == 1), "must be True/False (or 1/0)")
        return flags.astype(np.uint8)
    raise TypeError(f"call: must be bool or an array of bool, got {flags.dtype}")


def _check_elements(spot, strike, t, rate, vol, div, dt: np.dtype) -> None:
    """strict=True: raise at the first bad element, argument by argument, judging the values as
    the kernel reads them (converted to `dt`); then the discounting rule (see `greeks`)."""
    spot = _checks.require_positive("spot", _host(spot), dt)
    strike = _checks.require_positive("strike", _host(strike), dt)
    t = _checks.require_nonnegative("t", _host(t), dt)
    rate = _checks.require_finite("rate", _host(rate), dt)
    _checks.require_positive("vol", _host(vol), dt)
    div = _checks.require_finite("div", _host(div), dt)
    require_discountable(spot, strike, t, rate, div, dt)


def require_discountable(spot, strike, t, rate, div, dt: np.dtype, status: str = "") -> None:
    """ValueError naming rate (or div) and the index of the first element whose discounted strike
    ``strike * exp(-rate * t)`` (or spot ``spot * exp(-div * t)``), computed in `dt` as the kernels
    do, is 0 or not finite: rate * t (div * t) beyond what `dt` can discount. `status` (e.g.
    "BAD_INPUT") goes after the argument's name in the message."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        S, K, T, R, Q = (np.asarray(a, dtype=np.float64).astype(dt) for a in (spot, strike, t, rate, div))
        T = np.abs(T)   # t = -0.0 is 0
        shape = np.broadcast_shapes(S.shape, K.shape, T.shape, R.shape, Q.shape)
        for name, rt, base, what in (("rate", R, K, "strike"), ("div", Q, S, "spot")):
            disc = np.broadcast_to(base * np.exp(-rt * T), shape)
            bad = ~((disc > 0) & (disc < np.inf))
            if bad.any():
                flat = int(np.flatnonzero(bad.ravel())[0])
                index = flat if len(shape) <= 1 else tuple(int(i) for i in np.unravel_index(flat, shape))
                where = f"{name}[{index}]" if shape else name
                at = lambda a: np.broadcast_to(a, shape).ravel()[flat].item()  # noqa: E731
                raise ValueError(f"{where}: {status + ': ' if status else ''}{name} * t beyond what {dt} can "
                                 f"discount: {what} * exp(-{name} * t) "
                                 f"= {at(disc)!r} (t {at(T)!r}, {what} {at(base)!r}), got {at(rt)!r}")


def _is_device_array(x) -> bool:
    if type(x) in _HOST_TYPES or isinstance(x, (np.ndarray, np.generic)):
        return False
    # The class first: a CuPy array's interface is a property that builds a dict on each access.
    tx = type(x)
    if not (hasattr(tx, "__cuda_array_interface__") or hasattr(tx, "__dlpack_device__")
            or hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack_device__")):
        return False
    global _probe
    if _probe is None:
        try:
            from tickgpu.runtime import is_device_array as _probe
        except ImportError:
            return hasattr(x, "__cuda_array_interface__")
    return bool(_probe(x))


_probe = None   # tickgpu.runtime.is_device_array, imported on the first call that needs it


def shape_and_place(names, values) -> tuple[tuple[int, ...], bool]:
    """(the broadcast shape of `values`, whether any of them is a GPU array).

    NumPy arrays of one shape and scalars (the per-tick case) need neither broadcasting nor the
    GPU-array probe; anything else takes the general path, which gives the same shape (or raises
    naming the arguments, `names`).
    """
    shape = _host_shape(values)
    if shape is not None:
        return shape, False
    return _checks.broadcast_values(names, values), _any_on_device(values)


def _any_on_device(values) -> bool:
    for v in values:
        if type(v) not in _HOST_TYPES and _is_device_array(v):
            return True
    return False


def _host(x):
    """A host copy of a GPU array, for strict checks only (CuPy: .get(), PyTorch: .cpu())."""
    if not _is_device_array(x):
        return x
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    raise TypeError(f"strict=True cannot read a {type(x).__name__} on the host; pass strict=False")
