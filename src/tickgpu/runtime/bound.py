"""Greeks bound to fixed NumPy arrays: checked once, then recomputed from their contents per call.

A tick loop usually owns its inputs: the same arrays, updated in place as quotes arrive. For that
loop, `tickgpu.greeks` repeats work on every call that the loop does not need: argument checks,
shapes, dtypes, dispatch, the staging table. `bind_greeks` does that work once::

    spot = np.empty(1024, np.float32); ...           # the loop's own arrays
    tick = tickgpu.runtime.bind_greeks(spot, strike, t, rate, vol, div, call, dtype=np.float32)
    while True:
        spot[:] = latest_spots()                      # in place: the binding reads the new values
        g = tick()                                    # Greeks, new arrays every call

Each call is one native round trip (the arrays into the tick's staging, the tick's graph, the
results out) on the staged path's own plan and graph for that size, and the same kernel, so the
results are `tickgpu.greeks(..., backend="gpu")`'s to the bit. The binding holds references to its
arrays; resizing one (``ndarray.resize``) is refused by NumPy while they are held.
"""
from __future__ import annotations

import operator

import numpy as np

from tickgpu._native import ffi as _ffi
from tickgpu.finance.greeks import Greeks, _greeks_of
from tickgpu.runtime import ops
from tickgpu.runtime.staged import bucket, plan_for

__all__ = ["BoundGreeks", "bind_greeks"]

_NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")
_from_buffer = _ffi.from_buffer
_empty = np.empty
_rows = operator.itemgetter(*range(10))   # the block's ten rows as views, in one call


class BoundGreeks:
    """Greeks of fixed NumPy arrays, recomputed from their current contents on every call.

    Parameters
    ----------
    spot, strike, t, rate, vol, div : numpy.ndarray
        One-dimensional, C-contiguous arrays of `dtype`, all of one length n (1 <= n <= the
        runtime's staging elements, 65,536 by default). Read on every call, never written.
    call : numpy.ndarray
        Of the same length, bool or uint8 (nonzero: a call).
    dtype : numpy.float64 or numpy.float32
        Of the inputs, the computation and the results.

    Raises
    ------
    TypeError
        An input that is not a NumPy array of the right dtype, naming it.
    ValueError
        An input that is not one-dimensional and C-contiguous, lengths that differ, or a length
        outside [1, staging elements], naming the input.
    BackendUnavailable
        No usable GPU (the binding lives on the GPU backend's staging; `tickgpu.greeks` with
        ``backend="auto"`` is the call that falls back to the CPU).
    """

    def __init__(self, spot, strike, t, rate, vol, div, call, *, dtype=np.float64):
        from tickgpu.finance import _checks
        from tickgpu.runtime import context

        dt = _checks.check_dtype(dtype)
        values = (spot, strike, t, rate, vol, div, call)
        n = None
        for name, x in zip(_NAMES, values):
            if type(x) is not np.ndarray:
                raise TypeError(f"bind_greeks: {name} must be a NumPy array, got {type(x).__name__}")
            want = (np.dtype(np.bool_), np.dtype(np.uint8)) if name == "call" else (dt,)
            if x.dtype not in want:
                raise TypeError(f"bind_greeks: {name} must be of dtype {' or '.join(map(str, want))}, got {x.dtype}")
            if x.ndim != 1 or not x.flags.c_contiguous:
                raise ValueError(f"bind_greeks: {name} must be one-dimensional and C-contiguous, "
                                 f"got shape {x.shape}{'' if x.flags.c_contiguous else ', not contiguous'}")
            if n is None:
                n = x.shape[0]
            elif x.shape[0] != n:
                raise ValueError(f"bind_greeks: {name} has {x.shape[0]} elements, spot has {n}")
        ctx = context()
        if not 1 <= n <= ctx.staging_elements:
            raise ValueError(f"bind_greeks: spot has {n} elements; a binding takes 1 to {ctx.staging_elements} "
                             f"(tickgpu.greeks takes any number)")
        self.n, self.dtype, self.arrays = n, dt, values
        self._ctx = ctx
        self._m = bucket(n, ctx.staging_elements)
        self._plan = None
        self._t_in = _ffi.new("tg_hot_copy[]", len(values))
        self._t_out = _ffi.new("tg_hot_copy[1]")
        for i, x in enumerate(values):
            self._t_in[i].src = _from_buffer(x)      # the arrays stay referenced by self.arrays
            self._t_in[i].bytes = x.nbytes
        with ctx.lock:
            ctx.enter()
            self._replan()

    def _replan(self) -> None:
        """The staged path's plan for this size (built by warm-up; again after scratch moved)."""
        ctx = self._ctx
        plan = plan_for(ctx, ops.GREEKS, self.dtype, self._m, 0, (), None)
        if plan.ng or len(plan.blocks) != 1:
            raise AssertionError("bind_greeks: the greeks plan is not one output block without a grid")
        for i in range(len(self.arrays)):
            self._t_in[i].dst = plan.t_in[i].dst
        self._t_out[0].src = plan.t_out[0].src
        self._t_out[0].bytes = plan.t_out[0].bytes
        self._plan = plan

    def __call__(self) -> Greeks:
        """The greeks of the bound arrays' current contents: a new `Greeks` of n-element arrays."""
        ctx = self._ctx
        m, n = self._m, self.n
        block = _empty((10, m), self.dtype)
        with ctx.lock:
            ctx.enter()
            self._t_out[0].dst = _from_buffer(block)
            plan = self._plan
            if plan.epoch != ctx.bundle.scratch_epoch:
                self._replan()
                plan = self._plan
            if plan.graph.holder is not plan:
                plan.bind()
            r = plan.runner
            # This call writes every input slot: the plan's record of what its slots hold is stale.
            r.staged_by = self
            ctx.driver.roundtrip(self._t_in, len(self.arrays), plan.graph.exec, r.stream, self._t_out, 1)
            r.stats["replays"] += 1
        return _greeks_of(_rows(block) if n == m else [row[:n] for row in block])

    def __repr__(self) -> str:
        return f"<BoundGreeks {self.dtype.name} n={self.n}>"


def bind_greeks(spot, strike, t, rate, vol, div, call, *, dtype=np.float64) -> BoundGreeks:
    """`tickgpu.greeks` on the GPU for fixed NumPy arrays, checked once (see `BoundGreeks`)."""
    return BoundGreeks(spot, strike, t, rate, vol, div, call, dtype=dtype)
