"""Launching a bundle kernel: an argument buffer packed once, then updated in place.

``cuLaunchKernel`` takes ``void *kernelParams[]``: one pointer per parameter, each pointing at the
value's bytes. `ArgBuffer` keeps both in NumPy memory that lives as long as the kernel: the value
bytes laid out exactly as the device sees them (the manifest's offsets, checked against
``cuFuncGetParamInfo`` at load), and the pointer array aimed into it once. A launch then costs one
``struct.pack_into`` of the new pointers and sizes, and the driver call. A launch repeated with
everything but the argument values fixed is a `BoundLaunch` (`Launcher.bind`): one native call of
three arguments per launch.
"""
from __future__ import annotations

import struct

import numpy as np

from tickgpu.runtime.bundle import LoadedKernel

__all__ = ["ArgBuffer", "Launcher", "BoundLaunch", "grid_for", "MAX_ELEMENTS_PER_LAUNCH"]

_STRUCT_CODES = {"ptr": "Q", "i32": "i", "i64": "q", "f32": "f", "f64": "d"}

# n travels as an i32 and grids are bounded; bigger work is launched in slices of this size
# (a multiple of 16 elements, so a slice boundary keeps 16-byte alignment for every dtype).
MAX_ELEMENTS_PER_LAUNCH = 1 << 30


def grid_for(n: int, elements_per_block: int) -> tuple[int, int, int]:
    """The grid covering `n` elements at `elements_per_block` per block (at least one block)."""
    return (max(1, -(-n // elements_per_block)), 1, 1)


class ArgBuffer:
    """The parameter values of one kernel, laid out per its manifest, plus the void*[] into them.

    Attributes
    ----------
    values : numpy.ndarray of uint8
        The value bytes (offset i holds the parameter whose manifest offset is i).
    pointers : numpy.ndarray of uint64
        ``kernelParams``: pointers[i] = address of parameter i's value.
    address : int
        The address of ``pointers``, as passed to cuLaunchKernel / graph node updates.
    """

    def __init__(self, kernel: LoadedKernel):
        spec = kernel.spec
        self.kernel = kernel
        self.names = tuple(p.name for p in spec.params)
        size = max((p.offset + p.size for p in spec.params), default=0)
        # 16 bytes of slack keeps a zero-parameter kernel's buffer non-empty and addressable.
        self.values = np.zeros(size + 16, dtype=np.uint8)
        base = self.values.ctypes.data
        self.pointers = np.array([base + p.offset for p in spec.params], dtype=np.uint64)
        self.address = int(self.pointers.ctypes.data) if len(self.pointers) else base
        fmt, cursor = "<", 0
        for p in spec.params:
            fmt += f"{p.offset - cursor}x" if p.offset > cursor else ""
            fmt += _STRUCT_CODES[p.kind]
            cursor = p.offset + p.size
        self._all = struct.Struct(fmt)
        self._one = [struct.Struct("<" + _STRUCT_CODES[p.kind]) for p in spec.params]
        self._offsets = [p.offset for p in spec.params]
        self._n_contract = spec.n_contract

    @property
    def offsets(self) -> list[int]:
        """The byte offset in `values` of each parameter's value, in manifest order."""
        return list(self._offsets)

    def pack(self, *contract_values) -> None:
        """Write every parameter of the family's contract, in contract order.

        Triton's trailing scratch pointers are appended from the kernel's own scratch memory.
        """
        if len(contract_values) != self._n_contract:
            raise TypeError(f"kernel {self.kernel.variant}: {len(contract_values)} values for "
                            f"{self._n_contract} contract parameters")
        scratch = tuple(self.kernel.scratch.get(n, 0) for n in self.names[self._n_contract:])
        try:
            self._all.pack_into(self.values, 0, *contract_values, *scratch)
        except struct.error as e:
            # Find the offending parameter for the message (cold path: only on a bad value).
            for i, v in enumerate(contract_values):
                try:
                    self._one[i].pack(v)
                except struct.error:
                    raise ValueError(f"kernel {self.kernel.variant}: parameter {i} ({self.names[i]}): "
                                     f"{v!r} does not fit: {e}") from None
            raise

    def set(self, index: int, value) -> None:
        """Update one parameter in place (e.g. n, or one pointer)."""
        self._one[index].pack_into(self.values, self._offsets[index], value)

    def read(self) -> tuple:
        """The packed values, in parameter order (for tests and error messages)."""
        return self._all.unpack_from(self.values, 0)

    def snapshot(self) -> bytes:
        return self.values.tobytes()


class Launcher:
    """Launches one loaded kernel variant with its own, reused `ArgBuffer`.

    Not thread-safe: the argument buffer is shared by every launch through this object
    (the runtime keeps one per thread-confined use, under the op's lock).
    """

    def __init__(self, driver, kernel: LoadedKernel):
        self.driver = driver
        self.kernel = kernel
        self.args = ArgBuffer(kernel)
        self.launches = 0   # direct launches (graph replays are counted by their GraphRunner)

    def grid(self, n: int) -> tuple[int, int, int]:
        return grid_for(n, self.kernel.spec.elements_per_block)

    def launch(self, n: int, stream: int, *, sync: bool = False) -> None:
        """Launch over `n` elements with the values last packed; cuLaunchKernel copies them."""
        self.launch_grid(self.grid(n), stream, sync=sync)

    def launch_grid(self, grid: tuple[int, int, int], stream: int, *, sync: bool = False,
                    programmatic: bool = False) -> None:
        """Launch on an explicit `grid` (kernels whose grid follows their arguments: quant).

        ``programmatic``: as a programmatic dependent launch (the kernel may start before the work
        queued ahead of it on `stream` ends). Taken only for a kernel compiled to wait for that
        itself (its manifest entry says ``pdl``); any other launches plainly."""
        spec = self.kernel.spec
        if programmatic and spec.pdl:
            self.driver.launch_programmatic(self.kernel.func, grid, spec.block, spec.shared, stream,
                                            self.args.address, kernel=spec.variant)
            if sync:
                self.driver.stream_synchronize(stream)
        else:
            self.driver.launch(self.kernel.func, grid, spec.block, spec.shared, stream,
                               self.args.address, sync=sync, kernel=spec.variant)
        self.launches += 1

    def bind(self, n: int | None = None, stream: int = 0, *, grid: tuple[int, int, int] | None = None,
             context: int = 0) -> "BoundLaunch":
        """This kernel's launch over `n` elements (or on `grid`) on `stream`, fixed once: see `BoundLaunch`."""
        if (n is None) == (grid is None):
            raise TypeError(f"bind: kernel {self.kernel.spec.variant}: give n or grid, not both or neither")
        return BoundLaunch(self, self.grid(n) if grid is None else grid, stream, context)


def launch_desc(ffi, kernel: LoadedKernel, grid, stream: int, params: int, context: int = 0):
    """A ``tg_hot_launch_desc`` (csrc/tickgpu.h) of `kernel` on `grid` and `stream`, reading its
    parameters at each run from the ``void *[]`` at address `params`; `context` (0: none) made
    current first. The caller keeps the parameters alive as long as the description."""
    spec = kernel.spec
    desc = ffi.new("tg_hot_launch_desc *")
    desc.func = kernel.func
    desc.grid_x, desc.grid_y, desc.grid_z = grid
    desc.block_x, desc.block_y, desc.block_z = spec.block
    desc.shared_bytes = spec.shared
    desc.stream = stream
    desc.params = ffi.cast("void **", params)
    desc.ctx = context
    return desc


class BoundLaunch:
    """One kernel's launch with its function, grid, block, shared memory and stream fixed.

    ``bound()`` launches; ``bound(sync=True)`` launches and waits for the stream. The argument
    values are the launcher's `ArgBuffer`, read at each launch, so ``launcher.args.set`` or ``pack``
    between launches take effect. Where the driver has the native hot path, each launch is one
    call (`tg_hot_launch_desc_run`: a descriptor built once, three arguments) instead of
    `Launcher.launch`'s Python layers and an eleven-argument call; elsewhere (a stand-in driver)
    it is `Launcher.launch_grid`. With a `context` (a CUcontext handle), each launch first makes
    it current on the calling thread, in the same native call, so a caller need not (the context a
    kernel was loaded in must be current when it launches). Not thread-safe, like the launcher whose
    buffer it uses.
    """

    __slots__ = ("launcher", "grid", "stream", "context", "_desc", "_run", "_driver", "_variant")

    def __init__(self, launcher: Launcher, grid, stream: int, context: int = 0):
        grid = tuple(int(g) for g in grid)
        if len(grid) != 3 or min(grid) < 1 or max(grid) >= 1 << 31:
            raise ValueError(f"bind: kernel {launcher.kernel.spec.variant}: grid must be three sizes in "
                             f"[1, 2**31), got {grid}")
        self.launcher, self.grid, self.stream, self.context = launcher, grid, int(stream), int(context)
        d = self._driver = launcher.driver
        spec = launcher.kernel.spec
        self._variant = spec.variant
        self._run = self._desc = None
        hot = getattr(d, "_hot", None)
        if hot is not None:
            # The buffer lives as long as the launcher, which this object holds.
            self._desc = launch_desc(d._ffi, launcher.kernel, grid, self.stream, launcher.args.address, self.context)
            self._run = hot.tg_hot_launch_desc_run

    def __call__(self, sync: bool = False) -> None:
        run = self._run
        if run is None:
            if self.context:
                self._driver.ctx_set_current(self.context)
            self.launcher.launch_grid(self.grid, self.stream, sync=sync)
            return
        d = self._driver
        st = run(self._desc, sync, d._result)
        if st:
            d._hot_check(st, "cuCtxSetCurrent" if st == d._hot.TG_ECONTEXT else "cuLaunchKernel", self._variant)
        self.launcher.launches += 1

    def __repr__(self) -> str:
        return f"<BoundLaunch {self._variant} grid={self.grid} stream={self.stream:#x}>"
