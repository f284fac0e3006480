"""The CUDA driver, as tickgpu uses it: the only module that touches ``cuda.bindings``.

`Driver` is a thin object with one method per driver call the runtime needs. Handles (modules,
functions, streams, graphs, events) and device pointers cross its boundary as plain ints, so the
rest of the runtime never sees a ``cuda.bindings`` type and a mock with the same methods can stand
in for it in tests. The launch-and-wait calls go through the C hot path (csrc/hot/hot.c) where the
native core found the driver, and through ``cuda.bindings`` otherwise.

Every failure raises `CudaError`, which carries the driver's error name, the operation and, where
one is involved, the kernel.
"""
from __future__ import annotations

from tickgpu.errors import TickGpuError

__all__ = ["CudaError", "Driver", "HOST_ALLOC_PORTABLE", "HOST_ALLOC_DEVICEMAP", "HOST_REGISTER_PORTABLE",
           "HOST_REGISTER_DEVICEMAP"]

HOST_ALLOC_PORTABLE = 0x01    # CU_MEMHOSTALLOC_PORTABLE: pinned for every context
HOST_ALLOC_DEVICEMAP = 0x02   # CU_MEMHOSTALLOC_DEVICEMAP: also mapped into the device's address space
STREAM_NON_BLOCKING = 0x01    # CU_STREAM_NON_BLOCKING: no implicit sync with the legacy default stream
EVENT_DISABLE_TIMING = 0x02   # CU_EVENT_DISABLE_TIMING: cheaper record/sync where no time is read
HOST_REGISTER_PORTABLE = 0x01  # CU_MEMHOSTREGISTER_PORTABLE
HOST_REGISTER_DEVICEMAP = 0x02  # CU_MEMHOSTREGISTER_DEVICEMAP
MEM_ATTACH_GLOBAL = 0x01       # CU_MEM_ATTACH_GLOBAL: managed memory any stream may touch


class CudaError(TickGpuError):
    """A CUDA driver call failed.

    Attributes
    ----------
    name : str
        The driver's error name, e.g. ``"CUDA_ERROR_NO_BINARY_FOR_GPU"``.
    code : int or None
        The ``CUresult`` value (None where the driver library itself could not be loaded).
    op : str
        The driver call, e.g. ``"cuModuleLoadData"``.
    kernel : str or None
        The kernel variant involved, if any.
    """

    def __init__(self, op: str, name: str, code: int | None = None, kernel: str | None = None,
                 detail: str | None = None):
        self.op, self.name, self.code, self.kernel = op, name, code, kernel
        msg = f"{op} failed: {name}"
        if kernel:
            msg += f" (kernel {kernel})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class Driver:
    """The CUDA driver API through ``cuda.bindings``, with ints for handles.

    Constructing one imports ``cuda.bindings`` but makes no driver call; `init` does.

    Raises
    ------
    CudaError
        From every method, when the driver refuses; ``name`` is the CUresult's name.
    ImportError
        At construction, where ``cuda-bindings`` is not installed.
    """

    def __init__(self):
        from cuda.bindings import driver as cu   # the one import of cuda.bindings in tickgpu

        self._cu = cu
        self._hot = None          # the native hot path, once init found the driver there
        self._ffi = None
        self._result = None       # one reusable int* for the hot path's CUresult
        self._memcpy_params = {}  # copy node -> its CUDA_MEMCPY3D as captured (updated in place)
        # Every driver call that allocates, so a test can assert a hot path makes none.
        self.counts = {"mem_alloc": 0, "mem_host_alloc": 0, "host_register": 0, "mem_alloc_managed": 0,
                       "mem_alloc_async": 0, "prefetch": 0, "module_load": 0, "graph_instantiate": 0}

    # ---- errors ------------------------------------------------------------------------------
    def error_name(self, code: int) -> str:
        """The CUresult's name, e.g. ``CUDA_ERROR_INVALID_VALUE``, never raising."""
        try:
            return self._cu.CUresult(int(code)).name
        except (ValueError, TypeError):
            return f"CUresult {int(code)}"

    def _check(self, result, op: str, kernel: str | None = None):
        """Unwrap a cuda.bindings (err, *values) tuple, raising CudaError on failure."""
        err, values = result[0], result[1:]
        if err != self._cu.CUresult.CUDA_SUCCESS:
            raise CudaError(op, self.error_name(int(err)), int(err), kernel)
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def _hot_check(self, status: int, op: str, kernel: str | None = None) -> None:
        if status == 0:
            return
        code = int(self._result[0])
        if code:
            raise CudaError(op, self.error_name(code), code, kernel)
        name = self._ffi.string(self._hot.tg_status_name(status)).decode()
        raise CudaError(op, name, None, kernel, "rejected by the native hot path")

    # ---- initialisation, device, context ----------------------------------------------------
    def init(self) -> None:
        """cuInit, and the native hot path where the native core can reach the driver.

        Raises CudaError ``CUDA_DRIVER_NOT_FOUND`` where libcuda cannot be loaded at all.
        """
        try:
            self._check(self._cu.cuInit(0), "cuInit")
        except CudaError:
            raise
        except Exception as e:   # cuda.pathfinder raises its own error where libcuda is absent
            raise CudaError("cuInit", "CUDA_DRIVER_NOT_FOUND", None, None, str(e)) from None
        try:
            from tickgpu._native import ffi, lib

            if lib.tg_hot_init() == lib.TG_OK:
                self._hot, self._ffi, self._result = lib, ffi, ffi.new("int *")
        except ImportError:
            pass

    @property
    def has_hot_path(self) -> bool:
        return self._hot is not None

    def device_count(self) -> int:
        return int(self._check(self._cu.cuDeviceGetCount(), "cuDeviceGetCount"))

    def device_get(self, ordinal: int) -> int:
        return int(self._check(self._cu.cuDeviceGet(ordinal), "cuDeviceGet"))

    def device_name(self, device: int) -> str:
        raw = self._check(self._cu.cuDeviceGetName(256, self._cu.CUdevice(device)), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode(errors="replace")

    def device_attribute(self, name: str, device: int) -> int:
        """cuDeviceGetAttribute; `name` without its prefix, e.g. ``"MULTIPROCESSOR_COUNT"``."""
        attr = getattr(self._cu.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
        return int(self._check(self._cu.cuDeviceGetAttribute(attr, self._cu.CUdevice(device)),
                               f"cuDeviceGetAttribute({name})"))

    def compute_capability(self, device: int) -> tuple[int, int]:
        return (self.device_attribute("COMPUTE_CAPABILITY_MAJOR", device),
                self.device_attribute("COMPUTE_CAPABILITY_MINOR", device))

    def primary_context(self, device: int) -> int:
        """cuDevicePrimaryCtxRetain: the context CuPy and PyTorch share, so pointers interoperate."""
        ctx = self._check(self._cu.cuDevicePrimaryCtxRetain(self._cu.CUdevice(device)),
                          "cuDevicePrimaryCtxRetain")
        return int(ctx)

    def ctx_set_current(self, ctx: int) -> None:
        if self._hot is not None:
            return self._hot_check(self._hot.tg_hot_ctx_set_current(ctx, self._result), "cuCtxSetCurrent")
        self._check(self._cu.cuCtxSetCurrent(self._cu.CUcontext(ctx)), "cuCtxSetCurrent")

    def ctx_synchronize(self) -> None:
        self._check(self._cu.cuCtxSynchronize(), "cuCtxSynchronize")

    # ---- modules and functions ----------------------------------------------------------------
    def module_load_data(self, image: bytes, kernel: str | None = None) -> int:
        self.counts["module_load"] += 1
        return int(self._check(self._cu.cuModuleLoadData(image), "cuModuleLoadData", kernel))

    def module_get_function(self, module: int, entry: str, kernel: str | None = None) -> int:
        fn = self._check(self._cu.cuModuleGetFunction(self._cu.CUmodule(module), entry.encode()),
                         f"cuModuleGetFunction({entry})", kernel)
        return int(fn)

    def func_param_info(self, func: int, kernel: str | None = None) -> list[tuple[int, int]]:
        """(offset, size) of each parameter, from cuFuncGetParamInfo (driver 12.4+)."""
        out = []
        f = self._cu.CUfunction(func)
        while True:
            err, offset, size = self._cu.cuFuncGetParamInfo(f, len(out))
            if err == self._cu.CUresult.CUDA_ERROR_INVALID_VALUE and out:
                return out   # one past the last parameter
            if err != self._cu.CUresult.CUDA_SUCCESS:
                raise CudaError("cuFuncGetParamInfo", self.error_name(int(err)), int(err), kernel)
            out.append((int(offset), int(size)))

    def func_attribute(self, name: str, func: int, kernel: str | None = None) -> int:
        """cuFuncGetAttribute; `name` without its prefix, e.g. ``"MAX_THREADS_PER_BLOCK"``."""
        attr = getattr(self._cu.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + name)
        return int(self._check(self._cu.cuFuncGetAttribute(attr, self._cu.CUfunction(func)),
                               f"cuFuncGetAttribute({name})", kernel))

    def func_set_attribute(self, name: str, func: int, value: int, kernel: str | None = None) -> None:
        """cuFuncSetAttribute; `name` without its prefix, e.g. ``"MAX_DYNAMIC_SHARED_SIZE_BYTES"``."""
        attr = getattr(self._cu.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_" + name)
        self._check(self._cu.cuFuncSetAttribute(self._cu.CUfunction(func), attr, int(value)),
                    f"cuFuncSetAttribute({name}={value})", kernel)

    # ---- memory -------------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int) -> int:
        self.counts["mem_alloc"] += 1
        return int(self._check(self._cu.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes} bytes)"))

    def mem_free(self, dptr: int) -> None:
        self._check(self._cu.cuMemFree(self._cu.CUdeviceptr(dptr)), "cuMemFree")

    def mem_host_alloc(self, nbytes: int, flags: int = HOST_ALLOC_PORTABLE | HOST_ALLOC_DEVICEMAP) -> int:
        """Pinned (page-locked) host memory; returns its host address."""
        self.counts["mem_host_alloc"] += 1
        return int(self._check(self._cu.cuMemHostAlloc(nbytes, flags), f"cuMemHostAlloc({nbytes} bytes)"))

    def mem_free_host(self, ptr: int) -> None:
        self._check(self._cu.cuMemFreeHost(ptr), "cuMemFreeHost")

    def host_device_pointer(self, ptr: int) -> int:
        """The device address of mapped pinned host memory (cuMemHostGetDevicePointer)."""
        return int(self._check(self._cu.cuMemHostGetDevicePointer(ptr, 0), "cuMemHostGetDevicePointer"))

    def memcpy_htod(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self._cu.cuMemcpyHtoD(self._cu.CUdeviceptr(dst), src, nbytes), "cuMemcpyHtoD")

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self._cu.cuMemcpyDtoH(dst, self._cu.CUdeviceptr(src), nbytes), "cuMemcpyDtoH")

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if self._hot is not None:
            st = self._hot.tg_hot_copy_htod_async(dst, self._ffi.cast("void *", src), nbytes, stream, self._result)
            return self._hot_check(st, "cuMemcpyHtoDAsync")
        self._check(self._cu.cuMemcpyHtoDAsync(self._cu.CUdeviceptr(dst), src, nbytes, self._cu.CUstream(stream)),
                    "cuMemcpyHtoDAsync")

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if self._hot is not None:
            st = self._hot.tg_hot_copy_dtoh_async(self._ffi.cast("void *", dst), src, nbytes, stream, self._result)
            return self._hot_check(st, "cuMemcpyDtoHAsync")
        self._check(self._cu.cuMemcpyDtoHAsync(dst, self._cu.CUdeviceptr(src), nbytes, self._cu.CUstream(stream)),
                    "cuMemcpyDtoHAsync")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check(self._cu.cuMemcpyDtoDAsync(self._cu.CUdeviceptr(dst), self._cu.CUdeviceptr(src), nbytes,
                                               self._cu.CUstream(stream)), "cuMemcpyDtoDAsync")

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current context's device (cuMemGetInfo)."""
        free, total = self._check(self._cu.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    # ---- host registration, managed memory, stream-ordered pools ------------------------------
    def mem_host_register(self, ptr: int, nbytes: int,
                          flags: int = HOST_REGISTER_PORTABLE | HOST_REGISTER_DEVICEMAP) -> None:
        """Page-lock existing host memory (cuMemHostRegister), e.g. a huge-page mapping."""
        self.counts["host_register"] += 1
        self._check(self._cu.cuMemHostRegister(ptr, nbytes, flags), f"cuMemHostRegister({nbytes} bytes)")

    def mem_host_unregister(self, ptr: int) -> None:
        self._check(self._cu.cuMemHostUnregister(ptr), "cuMemHostUnregister")

    def mem_alloc_managed(self, nbytes: int) -> int:
        """Managed (unified) memory reachable from every device and the host (CU_MEM_ATTACH_GLOBAL)."""
        self.counts["mem_alloc_managed"] += 1
        return int(self._check(self._cu.cuMemAllocManaged(nbytes, MEM_ATTACH_GLOBAL),
                               f"cuMemAllocManaged({nbytes} bytes)"))

    def _location(self, device: int | None):
        loc = self._cu.CUmemLocation()
        if device is None:
            loc.type = self._cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
            loc.id = 0
        else:
            loc.type = self._cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            loc.id = int(device)
        return loc

    def mem_advise(self, dptr: int, nbytes: int, advice: str, device: int | None) -> None:
        """cuMemAdvise; `advice` without its prefix (``"SET_READ_MOSTLY"``, ``"SET_PREFERRED_LOCATION"``,
        ``"SET_ACCESSED_BY"``...); `device` None means the host."""
        adv = getattr(self._cu.CUmem_advise, "CU_MEM_ADVISE_" + advice)
        self._check(self._cu.cuMemAdvise(self._cu.CUdeviceptr(dptr), nbytes, adv, self._location(device)),
                    f"cuMemAdvise({advice})")

    def mem_prefetch_async(self, dptr: int, nbytes: int, device: int | None, stream: int) -> None:
        """cuMemPrefetchAsync of a managed range to `device` (None: the host), ordered on `stream`."""
        self.counts["prefetch"] += 1
        self._check(self._cu.cuMemPrefetchAsync(self._cu.CUdeviceptr(dptr), nbytes, self._location(device), 0,
                                                self._cu.CUstream(stream)), "cuMemPrefetchAsync")

    def mem_pool_create(self, device: int, release_threshold: int) -> int:
        """A stream-ordered device pool (cuMemPoolCreate) that keeps `release_threshold` bytes
        reserved across synchronisations instead of returning them to the OS."""
        props = self._cu.CUmemPoolProps()
        props.allocType = self._cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = self._cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location = self._location(device)
        pool = self._check(self._cu.cuMemPoolCreate(props), "cuMemPoolCreate")
        attr = self._cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        self._check(self._cu.cuMemPoolSetAttribute(pool, attr, self._cu.cuuint64_t(int(release_threshold))),
                    "cuMemPoolSetAttribute(RELEASE_THRESHOLD)")
        return int(pool)

    def mem_pool_destroy(self, pool: int) -> None:
        self._check(self._cu.cuMemPoolDestroy(self._cu.CUmemoryPool(pool)), "cuMemPoolDestroy")

    def mem_pool_attribute(self, pool: int, name: str) -> int:
        """cuMemPoolGetAttribute; `name` without its prefix (``"RESERVED_MEM_CURRENT"``, ``"USED_MEM_HIGH"``...)."""
        attr = getattr(self._cu.CUmemPool_attribute, "CU_MEMPOOL_ATTR_" + name)
        return int(self._check(self._cu.cuMemPoolGetAttribute(self._cu.CUmemoryPool(pool), attr),
                               f"cuMemPoolGetAttribute({name})"))

    def mem_pool_trim_to(self, pool: int, keep_bytes: int) -> None:
        self._check(self._cu.cuMemPoolTrimTo(self._cu.CUmemoryPool(pool), keep_bytes), "cuMemPoolTrimTo")

    def mem_alloc_from_pool_async(self, nbytes: int, pool: int, stream: int) -> int:
        self.counts["mem_alloc_async"] += 1
        return int(self._check(self._cu.cuMemAllocFromPoolAsync(nbytes, self._cu.CUmemoryPool(pool),
                                                                 self._cu.CUstream(stream)),
                               f"cuMemAllocFromPoolAsync({nbytes} bytes)"))

    def mem_free_async(self, dptr: int, stream: int) -> None:
        self._check(self._cu.cuMemFreeAsync(self._cu.CUdeviceptr(dptr), self._cu.CUstream(stream)), "cuMemFreeAsync")

    # ---- streams and events -------------------------------------------------------------------
    def stream_create(self, flags: int = STREAM_NON_BLOCKING) -> int:
        return int(self._check(self._cu.cuStreamCreate(flags), "cuStreamCreate"))

    def stream_destroy(self, stream: int) -> None:
        self._check(self._cu.cuStreamDestroy(self._cu.CUstream(stream)), "cuStreamDestroy")

    def stream_synchronize(self, stream: int) -> None:
        if self._hot is not None:
            return self._hot_check(self._hot.tg_hot_stream_sync(stream, self._result), "cuStreamSynchronize")
        self._check(self._cu.cuStreamSynchronize(self._cu.CUstream(stream)), "cuStreamSynchronize")

    def event_create(self, flags: int = EVENT_DISABLE_TIMING) -> int:
        return int(self._check(self._cu.cuEventCreate(flags), "cuEventCreate"))

    def event_destroy(self, event: int) -> None:
        self._check(self._cu.cuEventDestroy(self._cu.CUevent(event)), "cuEventDestroy")

    def event_record(self, event: int, stream: int) -> None:
        if self._hot is not None:
            return self._hot_check(self._hot.tg_hot_event_record(event, stream, self._result), "cuEventRecord")
        self._check(self._cu.cuEventRecord(self._cu.CUevent(event), self._cu.CUstream(stream)), "cuEventRecord")

    def event_synchronize(self, event: int) -> None:
        if self._hot is not None:
            return self._hot_check(self._hot.tg_hot_event_sync(event, self._result), "cuEventSynchronize")
        self._check(self._cu.cuEventSynchronize(self._cu.CUevent(event)), "cuEventSynchronize")

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Work queued on `stream` after this waits for `event` (cuStreamWaitEvent); the host does not."""
        self._check(self._cu.cuStreamWaitEvent(self._cu.CUstream(stream), self._cu.CUevent(event), 0),
                    "cuStreamWaitEvent")

    def event_query(self, event: int) -> bool:
        """True once the work before the event's record has finished, False while it is pending."""
        err = self._cu.cuEventQuery(self._cu.CUevent(event))[0]
        if err == self._cu.CUresult.CUDA_SUCCESS:
            return True
        if err == self._cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        raise CudaError("cuEventQuery", self.error_name(int(err)), int(err))

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return float(self._check(self._cu.cuEventElapsedTime(self._cu.CUevent(start), self._cu.CUevent(end)),
                                 "cuEventElapsedTime"))

    # ---- launches -----------------------------------------------------------------------------
    def launch(self, func: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
               stream: int, params: int, *, sync: bool = False, kernel: str | None = None) -> None:
        """cuLaunchKernel with `params` the address of a void*[] (and cuStreamSynchronize if `sync`)."""
        if self._hot is not None:
            call = self._hot.tg_hot_launch_sync if sync else self._hot.tg_hot_launch
            st = call(func, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream,
                      self._ffi.cast("void **", params), self._result)
            return self._hot_check(st, "cuLaunchKernel", kernel)
        self._check(self._cu.cuLaunchKernel(self._cu.CUfunction(func), *grid, *block, shared,
                                            self._cu.CUstream(stream), params, 0), "cuLaunchKernel", kernel)
        if sync:
            self._check(self._cu.cuStreamSynchronize(self._cu.CUstream(stream)), "cuStreamSynchronize", kernel)

    def launch_programmatic(self, func: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
                            stream: int, params: int, *, kernel: str | None = None) -> None:
        """cuLaunchKernelEx with programmatic stream serialization: the kernel may launch before the
        work ahead of it on `stream` has finished (it waits itself, griddepcontrol). Captured into a
        graph it makes a programmatic edge. Not on the hot path: graphs are captured once."""
        cu = self._cu
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared
        cfg.hStream = cu.CUstream(stream)
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        self._check(cu.cuLaunchKernelEx(cfg, cu.CUfunction(func), params, 0), "cuLaunchKernelEx", kernel)

    # ---- graphs -------------------------------------------------------------------------------
    def stream_begin_capture(self, stream: int) -> None:
        # Thread-local mode: other threads (and other libraries) keep working while this captures.
        mode = self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._check(self._cu.cuStreamBeginCapture(self._cu.CUstream(stream), mode), "cuStreamBeginCapture")

    def stream_end_capture(self, stream: int) -> int:
        return int(self._check(self._cu.cuStreamEndCapture(self._cu.CUstream(stream)), "cuStreamEndCapture"))

    def graph_instantiate(self, graph: int) -> int:
        self.counts["graph_instantiate"] += 1
        return int(self._check(self._cu.cuGraphInstantiate(self._cu.CUgraph(graph), 0), "cuGraphInstantiate"))

    def graph_nodes(self, graph: int) -> list[tuple[int, str]]:
        """The graph's nodes as (handle, kind), kind "kernel", "memcpy" or another lower-case name."""
        g = self._cu.CUgraph(graph)
        _, count = self._check(self._cu.cuGraphGetNodes(g, 0), "cuGraphGetNodes")
        nodes, _ = self._check(self._cu.cuGraphGetNodes(g, count), "cuGraphGetNodes")
        out = []
        for node in nodes:
            kind = self._check(self._cu.cuGraphNodeGetType(node), "cuGraphNodeGetType")
            out.append((int(node), kind.name.replace("CU_GRAPH_NODE_TYPE_", "").lower()))
        return out

    def graph_memcpy_node_addresses(self, graph_node: int) -> tuple[int, int]:
        """(destination, source) addresses of a copy node, whatever memory kinds it records."""
        p = self._check(self._cu.cuGraphMemcpyNodeGetParams(self._cu.CUgraphNode(graph_node)),
                        "cuGraphMemcpyNodeGetParams")
        host = self._cu.CUmemorytype.CU_MEMORYTYPE_HOST
        dst = int(p.dstHost) if p.dstMemoryType == host else int(p.dstDevice)
        src = int(p.srcHost) if p.srcMemoryType == host else int(p.srcDevice)
        return dst + int(p.dstXInBytes), src + int(p.srcXInBytes)

    def graph_exec_kernel_node_set_params(self, graph_exec: int, node: int, func: int,
                                          grid: tuple[int, int, int], block: tuple[int, int, int],
                                          shared: int, params: int, kernel: str | None = None) -> None:
        """Point an instantiated kernel node at a (new) function, grid and argument values.

        The values behind `params` are copied by the driver during this call.
        """
        if self._hot is not None:
            st = self._hot.tg_hot_graph_set_kernel(graph_exec, node, func, grid[0], grid[1], grid[2], block[0],
                                                   block[1], block[2], shared, self._ffi.cast("void **", params),
                                                   self._result)
            if st != self._hot.TG_ENODRIVER:
                return self._hot_check(st, "cuGraphExecKernelNodeSetParams", kernel)
        p = self._cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = self._cu.CUfunction(func)
        p.gridDimX, p.gridDimY, p.gridDimZ = grid
        p.blockDimX, p.blockDimY, p.blockDimZ = block
        p.sharedMemBytes = shared
        p.kernelParams = params
        p.extra = 0
        self._check(self._cu.cuGraphExecKernelNodeSetParams(self._cu.CUgraphExec(graph_exec),
                                                            self._cu.CUgraphNode(node), p),
                    "cuGraphExecKernelNodeSetParams", kernel)

    def graph_exec_memcpy_node_set_params(self, graph_exec: int, graph_node: int, ctx: int,
                                          dst: int, src: int, nbytes: int) -> None:
        """Re-aim a captured 1-D copy node at (dst, src, nbytes), same direction and memory kinds.

        The node's own parameters are read back once and kept, so an update only changes the
        addresses and the width of what the capture recorded.
        """
        p = self._memcpy_params.get(graph_node)
        if p is None:
            p = self._check(self._cu.cuGraphMemcpyNodeGetParams(self._cu.CUgraphNode(graph_node)),
                            "cuGraphMemcpyNodeGetParams")
            self._memcpy_params[graph_node] = p
        host = self._cu.CUmemorytype.CU_MEMORYTYPE_HOST
        if p.srcMemoryType == host:
            p.srcHost = src
        else:
            p.srcDevice = src
        if p.dstMemoryType == host:
            p.dstHost = dst
        else:
            p.dstDevice = dst
        p.srcXInBytes = p.dstXInBytes = 0
        p.WidthInBytes = nbytes
        if self._hot is not None:
            st = self._hot.tg_hot_graph_set_copy(graph_exec, graph_node, self._ffi.cast("void *", p.getPtr()), ctx,
                                                 self._result)
            if st != self._hot.TG_ENODRIVER:
                return self._hot_check(st, "cuGraphExecMemcpyNodeSetParams")
        self._check(self._cu.cuGraphExecMemcpyNodeSetParams(self._cu.CUgraphExec(graph_exec),
                                                            self._cu.CUgraphNode(graph_node), p,
                                                            self._cu.CUcontext(ctx)),
                    "cuGraphExecMemcpyNodeSetParams")

    def graph_launch(self, graph_exec: int, stream: int, *, sync: bool = False) -> None:
        if self._hot is not None:
            call = self._hot.tg_hot_graph_replay if sync else self._hot.tg_hot_graph_launch
            return self._hot_check(call(graph_exec, stream, self._result), "cuGraphLaunch")
        self._check(self._cu.cuGraphLaunch(self._cu.CUgraphExec(graph_exec), self._cu.CUstream(stream)),
                    "cuGraphLaunch")
        if sync:
            self._check(self._cu.cuStreamSynchronize(self._cu.CUstream(stream)), "cuStreamSynchronize")

    def roundtrip(self, copies_in, n_in: int, graph_exec: int, stream: int, copies_out, n_out: int) -> None:
        """Stage inputs, replay the graph, wait, stage outputs: one native call, GIL released.

        `copies_in`/`copies_out` are ``tg_hot_copy[]`` arrays from the native core's ffi.
        """
        if self._hot is not None:
            st = self._hot.tg_hot_roundtrip(copies_in, n_in, graph_exec, stream, copies_out, n_out, self._result)
            return self._hot_check(st, "tick round trip (cuGraphLaunch)")
        from tickgpu._native import check, lib

        check(lib.tg_hot_stage(copies_in, n_in), "staging inputs")
        self.graph_launch(graph_exec, stream, sync=True)
        check(lib.tg_hot_stage(copies_out, n_out), "staging outputs")

    def graph_destroy(self, graph: int) -> None:
        self._memcpy_params.clear()   # node handles die with their graph
        self._check(self._cu.cuGraphDestroy(self._cu.CUgraph(graph)), "cuGraphDestroy")

    def graph_exec_destroy(self, graph_exec: int) -> None:
        self._check(self._cu.cuGraphExecDestroy(self._cu.CUgraphExec(graph_exec)), "cuGraphExecDestroy")
