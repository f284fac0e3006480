"""Bundle kernels by name on device buffers: the kernel runtime behind tickgpu.quant on the GPU.

``tickgpu.runtime.kernel_runtime()`` returns the process's `KernelRuntime`, which offers what
:mod:`tickgpu.quant._gpu` asks of one:

- ``upload(array) -> DeviceBuffer``: a device copy of a NumPy array;
- ``empty(shape, dtype) -> DeviceBuffer``: uninitialised; dtype "int8", "int32", "float16",
  "bfloat16" or "float32";
- ``write(buffer, array)``: copies a host array into an existing buffer;
- ``download(buffer) -> ndarray``: waits for the work queued so far, then copies back (bfloat16
  comes back as its uint16 bit patterns);
- ``launch(variant, grid, args)``: a bundle variant on ``grid`` with ``args`` in the order of the
  kernel's parameters (its manifest ``params`` without Triton's scratch pointers): buffers (or raw
  device addresses) for pointers, ints for i32, floats for f32;
- ``has(variant) -> bool``: whether the bundle holds the variant for this device;
- ``prepare(variant, grid, args) -> PreparedLaunch``: the same, checked and packed once, for
  ``PreparedLaunch.launch()`` to repeat at the cost of the driver call;
- ``mapped(shape, dtype) -> MappedBuffer``: pinned host memory that kernels address directly
  (its device mapping), with a NumPy view ``.host``;
- ``capture(prepared) -> StepGraph``: prepared launches captured once as one CUDA graph;
  ``StepGraph.replay()`` launches it and waits (one native call, GIL released). A kernel after the
  first whose manifest entry says ``pdl`` (compiled to wait for its predecessor itself: the sm_90
  quant variants) is captured as a programmatic dependent launch, so it launches while the kernel
  before it runs (``KernelRuntime.programmatic`` False captures plain edges).

Everything runs in order on the context's one stream, so a buffer given back to the pool may be
handed out again at once: whatever the next owner queues runs after what the last one queued.
Buffers come from a small caching pool (power-of-two size classes, 256 bytes and up) so that a
model step allocates nothing from the driver once warm.

What a launch checks (cheaply, every time; a `PreparedLaunch` once): the variant exists; the
argument count and kinds; i32 range; for an ``aligned16`` variant, that every pointer is 16-byte
aligned and its ``multiple_of_16`` parameters are multiples of 16 (what it was compiled assuming:
a wrong promise would read the wrong bytes, not fail); that ``grid`` is the manifest's rule for
these arguments (``rows``: (M, 1, 1); ``tiles``: (ceil(M/block_m) * ceil(N/block_n), 1, 1)); that
a tiled GEMM has M and N of at least 1 (its tile index divides by their tile counts); and that
every `DeviceBuffer` or `MappedBuffer` holds the bytes the kernel reaches through it for these
sizes, with a non-negative row stride where it reaches past its first row
(:mod:`tickgpu.runtime.extents` has the rules: ``(rows - 1) * stride + columns`` elements of the
kernel's element size, e.g. ``(M - 1) * stride_am + K`` int8 codes for a GEMM's A, with W16A16's
lo-limb half row, and weight rows to K rounded up to 16 for the CUDA C W8A16 kernel; nothing for
a pointer the variant never dereferences). Bad arguments raise ValueError / TypeError naming the
variant and the parameter; a buffer too small names the bytes needed, the sizes they follow from,
and the buffer's bytes. A raw integer device address is checked for none of this: passing one is
the caller's promise that it addresses enough memory.
"""
from __future__ import annotations

import threading

import numpy as np

from tickgpu.runtime.bundle import QUANT_FAMILY, BundleError
from tickgpu.runtime.extents import compile_reach, reach_formula
from tickgpu.runtime.launch import Launcher

__all__ = ["DeviceBuffer", "MappedBuffer", "BufferPool", "KernelRuntime", "PreparedLaunch", "StepGraph", "DTYPES"]

#: Element types of device buffers: name -> the NumPy dtype that holds them on the host.
DTYPES = {"int8": np.dtype(np.int8), "int32": np.dtype(np.int32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(np.uint16), "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
          "uint8": np.dtype(np.uint8)}
_NAME_OF = {np.dtype(np.int8): "int8", np.dtype(np.int32): "int32", np.dtype(np.float16): "float16",
            np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.uint8): "uint8"}
_I32 = (-2**31, 2**31)
MIN_BLOCK = 256   # bytes: the smallest size class (and the alignment every buffer has)


class BufferPool:
    """Device blocks by power-of-two size class, kept for reuse instead of freed.

    Safe because every user queues its work on one stream (see the module docstring). `trim`
    returns the cached blocks to the driver.
    """

    def __init__(self, driver):
        self.driver = driver
        self._lock = threading.Lock()   # buffers are given back from whichever thread collects them
        self.free: dict[int, list[int]] = {}
        self.in_use = 0          # bytes handed out
        self.reserved = 0        # bytes obtained from the driver (in use + cached)

    @staticmethod
    def size_class(nbytes: int) -> int:
        return max(MIN_BLOCK, 1 << max(0, (int(nbytes) - 1).bit_length()))

    def acquire(self, nbytes: int) -> tuple[int, int]:
        """(device pointer, block size) of a block of at least `nbytes`."""
        size = self.size_class(nbytes)
        with self._lock:
            cached = self.free.get(size)
            ptr = cached.pop() if cached else None
            self.in_use += size
        if ptr is None:
            try:
                ptr = self.driver.mem_alloc(size)
            except BaseException:
                with self._lock:
                    self.in_use -= size
                raise
            with self._lock:
                self.reserved += size
        return ptr, size

    def release(self, ptr: int, size: int) -> None:
        with self._lock:
            self.in_use -= size
            self.free.setdefault(size, []).append(ptr)

    def trim(self) -> int:
        """Free every cached block (after the device finished with them); returns the bytes freed."""
        with self._lock:
            blocks = [(p, s) for s, ps in self.free.items() for p in ps]
            self.free.clear()
        if not blocks:
            return 0
        self.driver.ctx_synchronize()
        for p, s in blocks:
            self.driver.mem_free(p)
        with self._lock:
            self.reserved -= sum(s for _, s in blocks)
        return sum(s for _, s in blocks)


class DeviceBuffer:
    """A dense device array from a `KernelRuntime`'s pool; the block returns to the pool when collected.

    Attributes
    ----------
    ptr : int
        Device address (256-byte aligned).
    shape : tuple of int
    dtype : str
        One of :data:`DTYPES`.
    nbytes : int
    """

    __slots__ = ("ptr", "shape", "dtype", "nbytes", "_pool", "_block", "__weakref__")

    def __init__(self, pool: BufferPool, shape, dtype: str):
        if dtype not in DTYPES:
            raise TypeError(f"dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"shape: must be non-negative, got {self.shape}")
        self.dtype = dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        self._pool = pool
        self.ptr, self._block = pool.acquire(max(1, self.nbytes))

    @property
    def __cuda_array_interface__(self) -> dict:
        typestr = "<u2" if self.dtype == "bfloat16" else DTYPES[self.dtype].str
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False), "strides": None,
                "version": 3, "stream": None}

    def __del__(self):
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.release(self.ptr, self._block)

    def __repr__(self) -> str:
        return f"DeviceBuffer(shape={self.shape}, dtype={self.dtype!r}, ptr={self.ptr:#x})"


class MappedBuffer:
    """A dense array in pinned host memory that kernels read and write through its device mapping.

    A typed view of a buffer from the context's `tickgpu.memory.PinnedPool` (mapped arenas):
    ``ptr`` is the device address (what a kernel argument takes), ``host`` a NumPy view of the same
    bytes (bfloat16 as uint16). The buffer returns to the pool when this is collected. Host writes
    are seen by kernels launched after them; kernel writes are seen by the host once the launch's
    stream has been waited for.
    """

    __slots__ = ("ptr", "shape", "dtype", "nbytes", "host", "_buf", "__weakref__")

    def __init__(self, pool, shape, dtype: str):
        if dtype not in DTYPES:
            raise TypeError(f"dtype: must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        self._buf = pool.acquire(max(1, self.nbytes))
        self.ptr = self._buf.device_ptr
        self.host = self._buf.array(DTYPES[dtype], self.shape)

    def __del__(self):
        buf, self._buf = getattr(self, "_buf", None), None
        if buf is not None and not buf.released:
            try:
                # Released without a stream: every step waits for its stream before returning.
                buf.release()
            except Exception:   # interpreter shutdown, or the pool closed first
                pass


_SIZED = (DeviceBuffer, MappedBuffer)   # arguments whose size a launch checks


class StepGraph:
    """Prepared launches captured once as one CUDA graph on the runtime's stream (`KernelRuntime.capture`).

    The graph records the argument values of its launches, so it stays valid while their buffers
    live (it keeps them) and while no scratch block they name moved: `replay` checks the bundle's
    scratch epoch and captures again where one did.
    """

    def __init__(self, runtime: "KernelRuntime", prepared: list):
        self.runtime = runtime
        self.prepared = list(prepared)
        self.exec = 0
        self._graph = 0
        self._epoch = -1
        self.replays = 0
        self._capture()

    def _capture(self) -> None:
        rt, d = self.runtime, self.runtime.driver
        ctx = rt.ctx
        with ctx.lock:
            ctx.enter()
            self._destroy()
            d.stream_begin_capture(rt.stream)
            try:
                # After the first kernel, each one compiled to wait for its predecessor itself is a
                # programmatic dependent launch: it starts while the one before it runs.
                for i, p in enumerate(self.prepared):
                    p.launch(programmatic=rt.programmatic and i > 0 and p.pdl)
            except BaseException:
                # End the capture (the stream must leave capture mode) and drop what it made; the
                # launch's own error is the one that propagates.
                try:
                    d.graph_destroy(d.stream_end_capture(rt.stream))
                except Exception:
                    pass
                raise
            graph = d.stream_end_capture(rt.stream)
            self._graph = graph
            self.exec = d.graph_instantiate(graph)
            self._epoch = ctx.bundle.scratch_epoch

    def replay(self) -> None:
        """Launch the graph and wait for it."""
        ctx = self.runtime.ctx
        with ctx.lock:
            ctx.enter()
            if ctx.bundle.scratch_epoch != self._epoch:
                self._capture()
            self.runtime.driver.graph_launch(self.exec, self.runtime.stream, sync=True)
        self.replays += 1

    def _destroy(self) -> None:
        d = self.runtime.driver
        if self.exec:
            d.graph_exec_destroy(self.exec)
            self.exec = 0
        if self._graph:
            d.graph_destroy(self._graph)
            self._graph = 0

    def __del__(self):
        try:
            self._destroy()
        except Exception:
            pass


class KernelRuntime:
    """Named bundle kernels on `DeviceBuffer` s, in order on the context's stream.

    Parameters
    ----------
    ctx : tickgpu.runtime.device.Context
        Its driver, bundle, launchers, lock and stream are used (not copied).
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self.driver = ctx.driver
        self.stream = ctx.stream
        self.sm_count = ctx.sm_count   # the GEMM tile rule's (tickgpu.quant._gpu.gemm_tile)
        self.pool = BufferPool(ctx.driver)
        self.launches = 0
        # Graphs chain their kernels by programmatic dependent launch where the kernels wait for it
        # themselves (the bundle's sm_90 quant variants, manifest "pdl"); False captures plain edges.
        # Read when a graph is captured: graphs captured before a change keep their edges.
        self.programmatic = True
        self._reach: dict = {}   # variant -> extents.VariantReach, compiled on first launch

    # ---- memory ------------------------------------------------------------------------------
    def empty(self, shape, dtype: str) -> DeviceBuffer:
        """An uninitialised device buffer of `shape` and `dtype` (see :data:`DTYPES`)."""
        return DeviceBuffer(self.pool, shape, dtype)

    def mapped(self, shape, dtype: str) -> MappedBuffer:
        """Pinned host memory of `shape` and `dtype` that kernels address directly (see `MappedBuffer`)."""
        return MappedBuffer(self.ctx.memory.pinned, shape, dtype)

    def capture(self, prepared: list) -> StepGraph:
        """`prepared` launches (from `prepare`) as one graph; ``replay()`` runs it and waits."""
        return StepGraph(self, prepared)

    def upload(self, array) -> DeviceBuffer:
        """A device copy of `array` (C-contiguous copy made first if needed), queued on the stream.

        bfloat16 data cannot be told from uint16 on the host: upload such bit patterns with
        ``upload_as(array, "bfloat16")``.
        """
        a = np.ascontiguousarray(array)
        name = _NAME_OF.get(a.dtype)
        if name is None:
            raise TypeError(f"upload: arrays of dtype {a.dtype} are not supported ({sorted(_NAME_OF.values())})")
        return self.upload_as(a, name)

    def upload_as(self, array, dtype: str) -> DeviceBuffer:
        """Like `upload`, with the device element type named (the host array's itemsize must match)."""
        a = np.ascontiguousarray(array)
        if a.dtype.itemsize != DTYPES[dtype].itemsize:
            raise TypeError(f"upload_as: {a.dtype} elements cannot hold {dtype}")
        buf = DeviceBuffer(self.pool, a.shape, dtype)
        if a.nbytes:
            with self.ctx.lock:
                self.ctx.enter()
                # From pageable memory the driver stages the bytes before returning: `a` may go.
                self.driver.memcpy_htod_async(buf.ptr, a.ctypes.data, a.nbytes, self.stream)
        return buf

    def write(self, buf: DeviceBuffer, array) -> None:
        """Copy host `array` into `buf` (same shape and element size), queued on the stream."""
        a = np.ascontiguousarray(array)
        if a.shape != buf.shape or a.dtype.itemsize != DTYPES[buf.dtype].itemsize:
            raise ValueError(f"write: array of shape {a.shape} and dtype {a.dtype} does not fit a {buf.dtype} "
                             f"buffer of shape {buf.shape}")
        if a.nbytes:
            with self.ctx.lock:
                self.ctx.enter()
                self.driver.memcpy_htod_async(buf.ptr, a.ctypes.data, a.nbytes, self.stream)

    def download(self, buf: DeviceBuffer) -> np.ndarray:
        """A host copy of `buf`, after everything queued so far (bfloat16 as uint16 bits)."""
        out = np.empty(buf.shape, DTYPES[buf.dtype])
        with self.ctx.lock:
            self.ctx.enter()
            if out.nbytes:
                self.driver.memcpy_dtoh_async(out.ctypes.data, buf.ptr, out.nbytes, self.stream)
            self.driver.stream_synchronize(self.stream)
        return out

    def synchronize(self) -> None:
        """Wait for everything queued on the runtime's stream."""
        with self.ctx.lock:
            self.ctx.enter()
            self.driver.stream_synchronize(self.stream)

    # ---- kernels -------------------------------------------------------------------------------
    def has(self, variant: str) -> bool:
        """Whether the bundle holds `variant` for this device's architecture."""
        return variant in self.ctx.bundle.kernels

    def spec(self, variant: str):
        """The manifest entry (`KernelSpec`) of `variant` for this device's architecture."""
        lk = self.ctx.bundle.kernels.get(variant)
        if lk is None:
            raise BundleError(f"no kernel variant {variant!r} for {self.ctx.arch} in the bundle at "
                              f"{self.ctx.manifest.root}")
        return lk.spec

    def grid(self, variant: str, args) -> tuple[int, int, int]:
        """The grid the manifest prescribes for `variant` with these arguments."""
        spec = self.spec(variant)
        return spec.grid_for(self._values(spec, args))

    def launch(self, variant: str, grid, args, *, sync: bool = False) -> None:
        """Queue `variant` on `grid` (None: the manifest's rule) with `args`; see the module docstring.

        Raises
        ------
        BundleError
            No such variant in the bundle.
        TypeError, ValueError
            Wrong argument count or kind, an i32 out of range, a broken alignment promise, a
            grid other than the manifest's for these arguments, a buffer smaller than the bytes
            the kernel reaches through it for these sizes (or a negative row stride into one), or
            M or N below 1 for a tiled GEMM.
        CudaError
            The driver refused the launch.
        """
        ctx = self.ctx
        lk = ctx.bundle.kernels.get(variant)
        if lk is None:
            self.spec(variant)   # raises, naming the bundle
        spec = lk.spec
        values = self._values(spec, args)
        want = spec.grid_for(values)
        if grid is None:
            grid = want
        else:
            grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
            if grid != want:
                raise ValueError(f"{variant}: grid {grid} is not the manifest's {spec.grid!r} grid {want} "
                                 f"for these arguments")
        self._check_reach(spec, args, values)
        with ctx.lock:
            ctx.enter()
            lau = ctx.launchers.get(variant)
            if lau is None:
                lau = ctx.launchers[variant] = Launcher(self.driver, lk)
            ctx.bundle.ensure_scratch(lk, grid[0])
            lau.args.pack(*values)
            lau.launch_grid(grid, self.stream, sync=sync)
        self.launches += 1

    def prepare(self, variant: str, grid, args) -> "PreparedLaunch":
        """Check and pack one launch now; `PreparedLaunch.launch` then repeats it for the cost of the
        driver call alone (a model step, a benchmark loop). Same checks and errors as `launch`.
        """
        spec = self.spec(variant)
        values = self._values(spec, args)
        want = spec.grid_for(values)
        grid = want if grid is None else tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        if grid != want:
            raise ValueError(f"{variant}: grid {grid} is not the manifest's {spec.grid!r} grid {want} "
                             f"for these arguments")
        self._check_reach(spec, args, values)
        lk = self.ctx.bundle.kernels[variant]
        with self.ctx.lock:
            self.ctx.bundle.ensure_scratch(lk, grid[0])
        return PreparedLaunch(self, lk, grid, values, args)

    def _values(self, spec, args) -> list:
        params = spec.contract_params
        if len(args) != len(params):
            raise TypeError(f"{spec.variant}: {len(args)} arguments for {len(params)} parameters "
                            f"({', '.join(p.name for p in params)})")
        values = []
        m16 = (spec.multiple_of_16 or ()) if spec.aligned16 else ()
        for p, a in zip(params, args):
            if p.kind == "ptr":
                ptr = a.ptr if isinstance(a, (DeviceBuffer, MappedBuffer)) else a
                if not isinstance(ptr, (int, np.integer)) or isinstance(ptr, bool) or ptr <= 0:
                    raise TypeError(f"{spec.variant}: parameter {p.name} takes a device buffer, got {a!r}")
                ptr = int(ptr)
                if spec.aligned16 and ptr % 16:
                    raise ValueError(f"{spec.variant}: parameter {p.name}: pointer {ptr:#x} is not 16-byte "
                                     f"aligned (the variant assumes it)")
                values.append(ptr)
            elif p.kind in ("i32", "i64"):
                if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
                    raise TypeError(f"{spec.variant}: parameter {p.name} takes an int, got {a!r}")
                a = int(a)
                if p.kind == "i32" and not _I32[0] <= a < _I32[1]:
                    raise ValueError(f"{spec.variant}: parameter {p.name}: {a} does not fit an int32")
                if p.name in m16 and a % 16:
                    raise ValueError(f"{spec.variant}: parameter {p.name} must be a multiple of 16 for this "
                                     f"aligned variant, got {a}")
                values.append(a)
            else:
                if not isinstance(a, (int, float, np.floating, np.integer)) or isinstance(a, bool):
                    raise TypeError(f"{spec.variant}: parameter {p.name} takes a float, got {a!r}")
                values.append(float(a))
        return values

    def _check_reach(self, spec, args, values) -> None:
        """Buffers hold what the kernel reaches for these sizes; a tiled GEMM's M and N are >= 1."""
        reach = self._reach.get(spec.variant)
        if reach is None:
            reach = self._reach[spec.variant] = compile_reach(spec)
        for i in reach.positive:
            if values[i] < 1:
                raise ValueError(f"{spec.variant}: parameter {spec.params[i].name} must be at least 1, got "
                                 f"{values[i]} (the kernel's tile index divides by the number of tiles it "
                                 f"makes; launch nothing for an empty problem)")
        for i, rows_i, cols_i, stride_i, element, half, cols_to in reach.rules:
            buf = args[i]
            if not isinstance(buf, _SIZED):
                continue   # a raw device address: the caller's promise
            rows = values[rows_i] if rows_i >= 0 else 1
            end = values[cols_i]
            if rows <= 0 or end <= 0:
                continue   # every lane masked off: nothing dereferenced
            if cols_to > 1:
                end = -(-end // cols_to) * cols_to
            if stride_i >= 0 and (rows > 1 or half):
                stride = values[stride_i]
                if stride < 0:
                    raise ValueError(f"{spec.variant}: parameter {spec.params[stride_i].name} is {stride}: a "
                                     f"negative row stride reaches before {spec.params[i].name}'s buffer")
                end += (rows - 1) * stride + (stride // 2 if half else 0)
            if end * element > buf.nbytes:
                raise ValueError(f"{spec.variant}: parameter {spec.params[i].name} needs a buffer of at least "
                                 f"{end * element} bytes, {reach_formula(spec, i, values)}; got {buf.nbytes} "
                                 f"bytes ({buf.dtype} {buf.shape})")

    # ---- warm-up -------------------------------------------------------------------------------
    def warm(self) -> int:
        """Launch every quant variant once on a 1 x 16 x 16 problem (valid buffers, zeros in).

        Lazy module loading makes a kernel's first launch pay for loading its code; this pays it
        now. Returns the number of variants launched.
        """
        zeros = self.upload(np.zeros(1024, np.uint8))
        outs = self.empty((4096,), "uint8")
        count = 0
        for lk in list(self.ctx.bundle.kernels.values()):
            spec = lk.spec
            if spec.family != QUANT_FAMILY:
                continue
            args, out_slot = [], 0
            for p in spec.contract_params:
                if p.kind == "ptr":
                    # Outputs (written) get a region of their own; inputs share the zero block.
                    if p.name in ("xq_ptr", "scale_ptr", "rowsum_ptr", "c_ptr", "y_ptr"):
                        args.append(outs.ptr + 1024 * out_slot)
                        out_slot += 1
                    else:
                        args.append(zeros.ptr)
                elif p.kind == "f32":
                    args.append(1e-5)
                else:
                    args.append(1 if p.name == "M" else 16)
            self.launch(spec.variant, None, args)
            count += 1
        self.synchronize()
        return count


class PreparedLaunch:
    """One launch of a bundle kernel, checked and packed once (`KernelRuntime.prepare`).

    Holds references to the buffers it was given, so they outlive it. ``launch()`` queues it again
    on the runtime's stream; not thread-safe (one argument buffer).
    """

    def __init__(self, runtime: KernelRuntime, kernel, grid, values, keep):
        self.runtime = runtime
        self.grid = grid
        self._keep = list(keep)
        self._launcher = Launcher(runtime.driver, kernel)   # an argument buffer of its own
        self._epoch = -1
        self._values = values
        self._pack()

    def _pack(self) -> None:
        self._launcher.args.pack(*self._values)
        self._epoch = self.runtime.ctx.bundle.scratch_epoch

    @property
    def pdl(self) -> bool:
        """Whether the kernel waits for the one before it itself (programmatic dependent launch)."""
        return self._launcher.kernel.spec.pdl

    def launch(self, *, sync: bool = False, programmatic: bool = False) -> None:
        """Queue the launch (and wait for it with ``sync``); ``programmatic`` only where `pdl`."""
        ctx = self.runtime.ctx
        with ctx.lock:
            ctx.enter()
            if ctx.bundle.scratch_epoch != self._epoch:
                self._pack()   # a scratch block moved since: repack its pointer
            self._launcher.launch_grid(self.grid, self.runtime.stream, sync=sync, programmatic=programmatic)
