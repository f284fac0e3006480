"""Greeks and implied vols bound to fixed NumPy arrays: checked once, then recomputed from their
contents per call. (Bindings of GPU arrays: `tickgpu.runtime.bound_device`.)

A tick loop usually owns its inputs: the same arrays, updated in place as quotes arrive. For that
loop, `tickgpu.greeks` and `tickgpu.implied_vol` repeat work on every call that the loop does not
need: argument checks, shapes, dtypes, dispatch, the staging table. `bind_greeks` and
`bind_implied_vol` do that work once::

    spot = np.empty(1024, np.float32); ...           # the loop's own arrays
    tick = tickgpu.runtime.bind_greeks(spot, strike, t, rate, vol, div, call, dtype=np.float32)
    ivs = tickgpu.runtime.bind_implied_vol(mid, spot, strike, t, rate, div, call, dtype=np.float32)
    while True:
        spot[:] = latest_spots()                      # in place: the bindings read the new values
        g = tick()                                    # Greeks, new arrays every call
        vol, status = ivs()

Each call is one native round trip (the arrays into the tick's staging, the tick's graph, the
results out) on the staged path's own plan and graph for that size, and the same kernel, so the
results are those of `tickgpu.greeks(..., backend="gpu")` / `tickgpu.implied_vol(...,
backend="gpu", return_status=True)` to the bit. While a resident greeks kernel is open
(`tickgpu.runtime.resident`), a greeks binding it can serve goes through its mailbox, as
`tickgpu.greeks` does. A binding holds references to its arrays;
resizing one (``ndarray.resize``) is refused by NumPy while they are held.
"""
from __future__ import annotations

import operator

import numpy as np

from tickgpu._native import ffi as _ffi
from tickgpu.finance import _checks
from tickgpu.finance import greeks as _greeks_api
from tickgpu.finance import iv as _iv_api
from tickgpu.finance.greeks import Greeks, _greeks_of
from tickgpu.runtime import ops
from tickgpu.runtime.bound_device import (DeviceBoundGreeks, DeviceBoundImpliedVol, has_device_array,
                                          host_array_length)
from tickgpu.runtime.staged import _output_blocks, bucket, plan_for

__all__ = ["BoundGreeks", "BoundImpliedVol", "bind_greeks", "bind_implied_vol"]

_from_buffer = _ffi.from_buffer
_empty = np.empty
_rows = operator.itemgetter(*range(10))   # the block's ten rows as views, in one call
_I8, _BOOL = np.dtype(np.int8), np.dtype(np.bool_)


def _single(name: str, x) -> float:
    if isinstance(x, (bool, np.bool_)):
        _checks.real_array(name, x)   # raises: a boolean in a number's place
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"{name}: an integer beyond float64's range (~1.8e308)") from None


_STAGED_BY_BINDING = object()   # what a runner's staging holds after a binding's call


class _BoundTick:
    """What a binding of one staged op does: check the arrays once, then one round trip a call."""

    _fam = None          # the op's family (tickgpu.runtime.ops)
    _api = ""            # the public name, for messages

    def __init__(self, values, dtype):
        from tickgpu.runtime import context

        fam, api = self._fam, self._api
        dt = _checks.check_dtype(dtype)
        values = list(values)
        n = first = None
        for name, x in zip(fam.inputs, values):
            if type(x) in _checks.SCALAR_TYPES:
                continue            # a single value: made an array below, once n is known
            m = host_array_length(api, name, x, name == fam.flag, dt)
            if n is None:
                n, first = m, name
            elif m != n:
                raise ValueError(f"{api}: {name} has {m} elements, {first} has {n}")
        if n is None:
            raise TypeError(f"{api}: at least one input must be a NumPy array (single values alone: "
                            f"call tickgpu.{api.removeprefix('bind_')})")
        # A single value (a Python or NumPy number) is fixed at binding: an array of its own, copied
        # in with the others at each call (rebind to change it).
        for i, (name, x) in enumerate(zip(fam.inputs, values)):
            if type(x) in _checks.SCALAR_TYPES:
                values[i] = (np.full(n, _checks.call_flag(f"{api}: {name}", x), np.bool_) if name == fam.flag
                             else np.full(n, _single(f"{api}: {name}", x), dt))
        ctx = context()
        if not 1 <= n <= ctx.staging_elements:
            raise ValueError(f"{api}: {first} has {n} elements; a binding takes 1 to {ctx.staging_elements} "
                             f"(tickgpu.{api.removeprefix('bind_')} takes any number)")
        self.n, self.dtype, self.arrays = n, dt, tuple(values)
        # Arrays the C entry reads as they are (runtime/fasttick.py): float arrays of dtype, bool flags.
        self._fast_ok = all(x.dtype is (_BOOL if i == fam.flag_index else dt) for i, x in enumerate(self.arrays))
        self._ctx = ctx
        self._m = bucket(n, ctx.staging_elements)
        self._plan = None
        self._t_in = _ffi.new("tg_hot_copy[]", len(values))
        for i, x in enumerate(values):
            self._t_in[i].src = _from_buffer(x)      # the arrays stay referenced by self.arrays
            self._t_in[i].bytes = x.nbytes
        # One copy out per output block of the op's staging (greeks: one; implied vol: vols, statuses).
        self._n_out = len(_output_blocks(fam, dt)[0])
        self._t_out = _ffi.new("tg_hot_copy[]", self._n_out)
        with ctx.lock:
            ctx.enter()
            self._replan()

    def _replan(self) -> None:
        """The staged path's plan for this size (built by warm-up; again after scratch moved)."""
        ctx = self._ctx
        plan = plan_for(ctx, self._fam, self.dtype, self._m, 0, (), None)
        if plan.ng:
            raise AssertionError(f"{self._api}: the op's plan takes a grid")
        for i in range(len(self.arrays)):
            self._t_in[i].dst = plan.t_in[i].dst
        for b in range(self._n_out):
            self._t_out[b].src = plan.t_out[b].src
            self._t_out[b].bytes = plan.t_out[b].bytes
        self._plan = plan

    def _run(self, *blocks) -> None:
        """One round trip: the bound arrays in, the graph, the results out into `blocks`."""
        ctx = self._ctx
        t_out = self._t_out
        with ctx.lock:
            ctx.enter()
            for b, blk in enumerate(blocks):
                t_out[b].dst = _from_buffer(blk)
            plan = self._plan
            if plan.epoch != ctx.bundle.scratch_epoch:
                self._replan()
                plan = self._plan
            if plan.graph.holder is not plan:
                plan.bind()
            r = plan.runner
            # This call writes every input slot: the plan's record of what its slots hold is stale.
            # (A marker, not the binding: the runner would keep a dropped binding and its arrays.)
            r.staged_by = _STAGED_BY_BINDING
            ctx.driver.roundtrip(self._t_in, len(self.arrays), plan.graph.exec, r.stream, t_out, self._n_out)
            r.stats["replays"] += 1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dtype.name} n={self.n}>"


class BoundGreeks(_BoundTick):
    """Greeks of fixed NumPy arrays, recomputed from their current contents on every call.

    Parameters
    ----------
    spot, strike, t, rate, vol, div : numpy.ndarray or number
        One-dimensional, C-contiguous arrays of `dtype`, all of one length n (1 <= n <= the
        runtime's staging elements, 131,072 by default), read on every call, never written; or
        single numbers, fixed at binding (at least one input must be an array).
    call : numpy.ndarray or bool
        Of the same length, bool or uint8 (nonzero: a call); or one bool, fixed at binding.
    dtype : numpy.float64 or numpy.float32
        Of the inputs, the computation and the results.

    Raises
    ------
    TypeError
        An input that is neither a NumPy array of the right dtype nor a number, or no array at
        all, naming the input.
    ValueError
        An input that is not one-dimensional and C-contiguous, lengths that differ, or a length
        outside [1, staging elements], naming the input.
    BackendUnavailable
        No usable GPU (the binding lives on the GPU backend's staging; `tickgpu.greeks` with
        ``backend="auto"`` is the call that falls back to the CPU).
    """

    _fam, _api = ops.GREEKS, "bind_greeks"

    def __init__(self, spot, strike, t, rate, vol, div, call, *, dtype=np.float64):
        super().__init__((spot, strike, t, rate, vol, div, call), dtype)
        # The same arrays as the resident kernel's request (stride 1 each), made once.
        self._resident_in = _ffi.new("tg_bsm_inputs *")
        slots = _ffi.cast("void **", self._resident_in)
        strides = _ffi.cast("int64_t *", self._resident_in)
        for k, x in enumerate(self.arrays):
            slots[2 * k] = _from_buffer(x)
            strides[2 * k + 1] = 1
        self._resident_key = (self._fam.name, self.dtype)

    def __call__(self) -> Greeks:
        """The greeks of the bound arrays' current contents: a new `Greeks` of n-element arrays.

        Where a resident greeks kernel of this dtype is open (`tickgpu.runtime.resident`) and takes
        n options, the call goes through its mailbox, as `tickgpu.greeks` would; else the graph."""
        fast = _greeks_api._fast
        if fast is not None and self._fast_ok:
            # The C entry takes the bound arrays as it takes a plain call's (same plan, same bits);
            # None where it cannot (a resident kernel open, scratch moved): the path below.
            g = fast(self.dtype, "gpu", *self.arrays)
            if g is not None:
                return g
        m, n = self._m, self.n
        if ops.RESIDENT:   # empty unless a resident kernel is open: one truth test otherwise
            r = ops.RESIDENT.get(self._resident_key)
            if r is not None:
                block = r.call_bound(self._resident_in, n)
                if block is not None:
                    return _greeks_of(_rows(block))
        block = _empty((10, m), self.dtype)
        self._run(block)
        return _greeks_of(_rows(block) if n == m else [row[:n] for row in block])


class BoundImpliedVol(_BoundTick):
    """Implied vols of fixed NumPy arrays, recomputed from their current contents on every call.

    Parameters
    ----------
    price, spot, strike, t, rate, div : numpy.ndarray or number
        As `BoundGreeks`'s inputs: arrays of one length n read on every call, or single numbers
        fixed at binding.
    call : numpy.ndarray or bool
    dtype : numpy.float64 or numpy.float32
        Of the inputs, the solve and the vols.

    Each call returns ``(vol, status)``: new arrays of n vols (`dtype`) and n `IVStatus` codes
    (int8), those of ``tickgpu.implied_vol(..., backend="gpu", return_status=True)``.

    Raises
    ------
    TypeError, ValueError, BackendUnavailable
        As `BoundGreeks`.
    """

    _fam, _api = ops.IMPLIED_VOL, "bind_implied_vol"

    def __init__(self, price, spot, strike, t, rate, div, call, *, dtype=np.float64):
        super().__init__((price, spot, strike, t, rate, div, call), dtype)

    def __call__(self) -> tuple[np.ndarray, np.ndarray]:
        """(vol, status) of the bound arrays' current contents, new arrays of n elements."""
        fast = _iv_api._fast
        if fast is not None and self._fast_ok:   # as BoundGreeks.__call__
            outs = fast(self.dtype, "gpu", *self.arrays)
            if outs is not None:
                return outs
        m, n = self._m, self.n
        vol, status = _empty(m, self.dtype), _empty(m, _I8)
        self._run(vol, status)
        return (vol, status) if n == m else (vol[:n], status[:n])


def bind_greeks(spot, strike, t, rate, vol, div, call, *, dtype=np.float64,
                out=None) -> BoundGreeks | DeviceBoundGreeks:
    """`tickgpu.greeks` on the GPU for fixed arrays, checked once.

    - NumPy arrays give a `BoundGreeks`: a round trip through staging per call, new results each
      time.
    - NumPy arrays in mapped pinned memory (`tickgpu.memory.mapped_array`) with ``out``, a (10, n)
      array there too, give a `DeviceBoundGreeks` that launches the kernel on them in place (zero
      copy) and waits: each call rewrites the rows of ``out`` (`Greeks` order).
    - GPU arrays (CuPy, PyTorch, ...) give a `DeviceBoundGreeks`: one launch per call on the
      arrays' stream, no wait, into result arrays made once. A library that makes no arrays for
      others to write (JAX, whose arrays never change in place) gets tickgpu `DeviceArray`
      results instead, each call waiting for its launch. They are rewritten by every call:
      wrapping one in a JAX array (``jax.dlpack.from_dlpack``) breaks JAX's rule that an array
      never changes, so copy what JAX should keep.

    Single numbers may be mixed into any of them.
    """
    values = (spot, strike, t, rate, vol, div, call)
    if out is not None or has_device_array(values):
        return DeviceBoundGreeks(*values, dtype=dtype, out=out)
    return BoundGreeks(*values, dtype=dtype)


def bind_implied_vol(price, spot, strike, t, rate, div, call, *, dtype=np.float64,
                     out=None) -> BoundImpliedVol | DeviceBoundImpliedVol:
    """`tickgpu.implied_vol` on the GPU for fixed arrays, checked once: a `BoundImpliedVol` for
    NumPy arrays, a `DeviceBoundImpliedVol` for GPU arrays or, with ``out=(vol, status)``, for
    mapped NumPy arrays (see `bind_greeks`)."""
    values = (price, spot, strike, t, rate, div, call)
    if out is not None or has_device_array(values):
        return DeviceBoundImpliedVol(*values, dtype=dtype, out=out)
    return BoundImpliedVol(*values, dtype=dtype)
