"""A CUDA driver stand-in that runs the runtime end to end on a CPU.

"Device" memory is host memory, so copies are memmoves and a "kernel" is a NumPy emulation that
reads its arguments the way the GPU would: through the void*[] the runtime passes, at the sizes
the cubin declares. Every pointer a kernel dereferences is checked against the allocations
(bounds and, for 16-byte-aligned variants, alignment), so packing and layout errors fail loudly.

Fake cubins are JSON: {"entries": {entry: {"family", "dtype", "block", "elements_per_block",
"aligned16", "params": [[offset, size], ...]}}}. The emulated kernels compute simple
closed-form functions (`expected_*` below), enough to tell every input and output apart.

Quant kernels (family "quant") also carry their parameter names and kinds, grid rule and alignment
promise; they are emulated by the NumPy reference of tickgpu.quant (schemes, gemm) reading and
writing "device" memory through the arguments exactly as the kernels would (row strides, padded K,
output dtype), and every launch's grid is checked against the manifest's rule.
"""
from __future__ import annotations

import ctypes
import json

import numpy as np

from tickgpu.kernels.manifest import FAMILY_PARAMS, GREEKS_OUTPUTS
from tickgpu.runtime.driver import CudaError

_KIND_DTYPE = {"ptr": np.uint64, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


# ---- what the emulated kernels compute (the tests' independent reference) --------------------------
def expected_greeks(spot, strike, t, rate, vol, div, call):
    c = np.asarray(call, dtype=np.float64)
    return {name: spot + (k + 1) * strike + t * rate + vol - div + 0.5 * (k + 1) * c
            for k, name in enumerate(GREEKS_OUTPUTS)}


def expected_iv(price, spot, strike, t, rate, div, call):
    c = np.asarray(call, dtype=np.float64)
    with np.errstate(all="ignore"):   # warm-up launches read placeholder memory
        vol = price / spot + strike * t + rate - div + c
    status = (np.asarray(strike > spot, dtype=np.int8) + 2 * np.asarray(call, dtype=np.int8)).astype(np.int8)
    return vol, status


def expected_surface(strikes, expiries, vols, mode, strike, t, what):
    return (strikes[0] + strikes[-1] + expiries[-1] + vols.sum() + strike * t + 10 * mode + 100 * what
            + 1000 * len(strikes) + 10000 * len(expiries))


class MockDriver:
    """Records calls, hands out host-backed "device" memory, emulates kernels and graphs."""

    def __init__(self, cc=(9, 0), sm_count=132, devices=1):
        self.cc, self.sm_count, self.devices = cc, sm_count, devices
        self.calls: list[str] = []
        self.counts = {"mem_alloc": 0, "mem_host_alloc": 0, "host_register": 0, "mem_alloc_managed": 0,
                       "mem_alloc_async": 0, "prefetch": 0, "module_load": 0, "graph_instantiate": 0}
        self.pending_events: set[int] = set()    # events event_query reports as not yet reached
        self.registered: dict[int, int] = {}     # host address -> bytes page-locked by mem_host_register
        self.advice: list[tuple] = []            # (address, bytes, advice, device) per mem_advise
        self.prefetches: list[tuple] = []        # (address, bytes, device, stream) per mem_prefetch_async
        self.pools: dict[int, dict] = {}         # stream-ordered pools: handle -> attributes
        self.free_bytes, self.total_bytes = 140 << 30, 141 << 30
        self.fail: dict[str, str] = {}          # op -> CUDA error name to raise
        self.programmatic: list[str] = []        # variants launched by launch_programmatic, in order
        self.blocks: dict[int, object] = {}      # base address -> ctypes buffer
        self.sizes: dict[int, int] = {}
        self.functions: dict[int, dict] = {}
        self.launches: list[dict] = []           # every executed kernel: variant info, grid, n
        self.captures: dict[int, list] = {}      # stream -> ops while capturing
        self.graphs: dict[int, list] = {}
        self.execs: dict[int, list] = {}
        self.nodes: dict[int, tuple] = {}        # node -> (graph, index)
        self._next = 0x1000
        self.has_hot_path = False

    # ---- plumbing ----------------------------------------------------------------------------
    def _handle(self) -> int:
        self._next += 0x10
        return self._next

    def _op(self, name: str, kernel: str | None = None) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise CudaError(name, self.fail[name], 1, kernel)

    def _alloc(self, nbytes: int, align: int) -> int:
        buf = ctypes.create_string_buffer(nbytes + align)
        base = ctypes.addressof(buf)
        addr = (base + align - 1) // align * align
        self.blocks[addr] = buf
        self.sizes[addr] = nbytes
        return addr

    def check_range(self, addr: int, nbytes: int, what: str) -> None:
        for base, size in (*self.sizes.items(), *self.registered.items()):
            if base <= addr and addr + nbytes <= base + size:
                return
        raise AssertionError(f"{what}: [{addr:#x}, +{nbytes}) is outside every allocation")

    def error_name(self, code):
        return f"CUresult {code}"

    # ---- device and context ----------------------------------------------------------------------
    def init(self):
        self._op("cuInit")

    def device_count(self):
        return self.devices

    def device_get(self, ordinal):
        return ordinal

    def device_name(self, device):
        return "Mock H200"

    def device_attribute(self, name, device):
        return {"MULTIPROCESSOR_COUNT": self.sm_count, "COMPUTE_CAPABILITY_MAJOR": self.cc[0],
                "COMPUTE_CAPABILITY_MINOR": self.cc[1], "MANAGED_MEMORY": 1, "CONCURRENT_MANAGED_ACCESS": 1,
                "PAGEABLE_MEMORY_ACCESS": 0, "CAN_MAP_HOST_MEMORY": 1}[name]

    def compute_capability(self, device):
        return self.cc

    def primary_context(self, device):
        self._op("cuDevicePrimaryCtxRetain")
        return 0xC0

    def ctx_set_current(self, ctx):
        self.calls.append("cuCtxSetCurrent")

    def ctx_synchronize(self):
        self.calls.append("cuCtxSynchronize")

    # ---- modules -------------------------------------------------------------------------------
    def module_load_data(self, image, kernel=None):
        self._op("cuModuleLoadData", kernel)
        self.counts["module_load"] += 1
        doc = json.loads(image)
        h = self._handle()
        self.functions[h] = {"module": doc}
        return h

    def module_get_function(self, module, entry, kernel=None):
        self._op("cuModuleGetFunction", kernel)
        doc = self.functions[module]["module"]
        if entry not in doc["entries"]:
            raise CudaError(f"cuModuleGetFunction({entry})", "CUDA_ERROR_NOT_FOUND", 500, kernel)
        h = self._handle()
        self.functions[h] = dict(doc["entries"][entry], entry=entry, variant=kernel)
        return h

    def func_param_info(self, func, kernel=None):
        self._op("cuFuncGetParamInfo", kernel)
        return [tuple(p) for p in self.functions[func]["params"]]

    def func_attribute(self, name, func, kernel=None):
        return 0

    def func_set_attribute(self, name, func, value, kernel=None):
        self._op("cuFuncSetAttribute", kernel)
        self.functions[func].setdefault("attributes", {})[name] = value

    # ---- memory ----------------------------------------------------------------------------------
    def mem_alloc(self, nbytes):
        self._op("cuMemAlloc")
        self.counts["mem_alloc"] += 1
        return self._alloc(nbytes, 256)

    def mem_host_alloc(self, nbytes, flags=3):
        self._op("cuMemHostAlloc")
        self.counts["mem_host_alloc"] += 1
        return self._alloc(nbytes, 4096)

    def mem_free_host(self, p):
        self.calls.append("cuMemFreeHost")
        self.sizes.pop(p)
        self.blocks.pop(p)

    def mem_free(self, p):
        self.calls.append("cuMemFree")
        self.sizes.pop(p)
        self.blocks.pop(p)

    mem_free_host = mem_free

    def host_device_pointer(self, p):
        return p

    def _copy(self, dst, src, nbytes, what):
        self.check_range(dst, nbytes, f"{what} destination")
        ctypes.memmove(dst, src, nbytes)

    def memcpy_htod(self, dst, src, nbytes):
        self._op("cuMemcpyHtoD")
        self._copy(dst, src, nbytes, "cuMemcpyHtoD")

    def memcpy_dtoh(self, dst, src, nbytes):
        self._op("cuMemcpyDtoH")
        self.check_range(src, nbytes, "cuMemcpyDtoH source")
        ctypes.memmove(dst, src, nbytes)

    def memcpy_htod_async(self, dst, src, nbytes, stream):
        self._op("cuMemcpyHtoDAsync")
        if stream in self.captures:
            self.captures[stream].append(["copy", dst, src, nbytes, "htod"])
        else:
            self._copy(dst, src, nbytes, "cuMemcpyHtoDAsync")

    def memcpy_dtoh_async(self, dst, src, nbytes, stream):
        self._op("cuMemcpyDtoHAsync")
        if stream in self.captures:
            self.captures[stream].append(["copy", dst, src, nbytes, "dtoh"])
        else:
            self.check_range(src, nbytes, "cuMemcpyDtoHAsync source")
            ctypes.memmove(dst, src, nbytes)

    def memcpy_dtod_async(self, dst, src, nbytes, stream):
        self._op("cuMemcpyDtoDAsync")
        self.check_range(src, nbytes, "cuMemcpyDtoDAsync source")
        self._copy(dst, src, nbytes, "cuMemcpyDtoDAsync")

    def mem_get_info(self):
        return self.free_bytes, self.total_bytes

    def mem_host_register(self, ptr, nbytes, flags=3):
        self._op("cuMemHostRegister")
        self.counts["host_register"] += 1
        self.registered[ptr] = nbytes

    def mem_host_unregister(self, ptr):
        self._op("cuMemHostUnregister")
        del self.registered[ptr]

    def mem_alloc_managed(self, nbytes):
        self._op("cuMemAllocManaged")
        self.counts["mem_alloc_managed"] += 1
        return self._alloc(nbytes, 4096)

    def mem_advise(self, dptr, nbytes, advice, device):
        self._op("cuMemAdvise")
        self.check_range(dptr, nbytes, "cuMemAdvise")
        self.advice.append((dptr, nbytes, advice, device))

    def mem_prefetch_async(self, dptr, nbytes, device, stream):
        self._op("cuMemPrefetchAsync")
        self.check_range(dptr, nbytes, "cuMemPrefetchAsync")
        self.counts["prefetch"] += 1
        self.prefetches.append((dptr, nbytes, device, stream))

    def mem_pool_create(self, device, release_threshold):
        self._op("cuMemPoolCreate")
        h = self._handle()
        self.pools[h] = {"RELEASE_THRESHOLD": release_threshold, "RESERVED_MEM_CURRENT": 0, "USED_MEM_CURRENT": 0,
                         "RESERVED_MEM_HIGH": 0, "USED_MEM_HIGH": 0, "ptrs": {}}
        return h

    def mem_pool_destroy(self, pool):
        self._op("cuMemPoolDestroy")
        del self.pools[pool]

    def mem_pool_attribute(self, pool, name):
        return self.pools[pool][name]

    def mem_pool_trim_to(self, pool, keep_bytes):
        p = self.pools[pool]
        p["RESERVED_MEM_CURRENT"] = max(p["USED_MEM_CURRENT"], min(p["RESERVED_MEM_CURRENT"], keep_bytes))

    def mem_alloc_from_pool_async(self, nbytes, pool, stream):
        self._op("cuMemAllocFromPoolAsync")
        self.counts["mem_alloc_async"] += 1
        p = self.pools[pool]
        ptr = self._alloc(max(nbytes, 1), 512)
        p["ptrs"][ptr] = nbytes
        p["USED_MEM_CURRENT"] += nbytes
        p["RESERVED_MEM_CURRENT"] = max(p["RESERVED_MEM_CURRENT"], p["USED_MEM_CURRENT"])
        p["USED_MEM_HIGH"] = max(p["USED_MEM_HIGH"], p["USED_MEM_CURRENT"])
        p["RESERVED_MEM_HIGH"] = max(p["RESERVED_MEM_HIGH"], p["RESERVED_MEM_CURRENT"])
        return ptr

    def mem_free_async(self, dptr, stream):
        self._op("cuMemFreeAsync")
        for p in self.pools.values():
            if dptr in p["ptrs"]:
                p["USED_MEM_CURRENT"] -= p["ptrs"].pop(dptr)
                break
        else:
            raise CudaError("cuMemFreeAsync", "CUDA_ERROR_INVALID_VALUE", 1)
        self.sizes.pop(dptr)
        self.blocks.pop(dptr)

    # ---- streams, events ----------------------------------------------------------------------------
    def stream_create(self, flags=1):
        self._op("cuStreamCreate")
        return self._handle()

    def stream_destroy(self, s):
        pass

    def stream_synchronize(self, s):
        self._op("cuStreamSynchronize")

    def event_create(self, flags=2):
        return self._handle()

    def event_record(self, e, s):
        pass

    def event_synchronize(self, e):
        self.pending_events.discard(e)

    def event_destroy(self, e):
        self.pending_events.discard(e)

    def event_elapsed_ms(self, start, end):
        return 0.0

    def stream_wait_event(self, s, e):
        self._op("cuStreamWaitEvent")

    def event_query(self, e):
        return e not in self.pending_events

    # ---- kernels -----------------------------------------------------------------------------------
    def _read_args(self, fn, params_addr) -> tuple:
        layout = fn["params"]
        if "kinds" in fn:
            kinds = fn["kinds"]
        else:
            kinds = [k for _, k in FAMILY_PARAMS[fn["family"]]] + ["ptr"] * (len(layout) - len(FAMILY_PARAMS[fn["family"]]))
        ptrs = (ctypes.c_uint64 * len(layout)).from_address(params_addr)
        vals = []
        for (offset, size), kind, p in zip(layout, kinds, ptrs):
            assert np.dtype(_KIND_DTYPE[kind]).itemsize == size, "param size vs kind"
            vals.append(np.frombuffer(ctypes.string_at(p, size), dtype=_KIND_DTYPE[kind])[0].item())
        return tuple(vals)

    def launch(self, func, grid, block, shared, stream, params, *, sync=False, kernel=None):
        self._op("cuLaunchKernel", kernel)
        self._launch(func, grid, block, shared, stream, params)

    def _launch(self, func, grid, block, shared, stream, params):
        fn = self.functions[func]
        args = self._read_args(fn, params)   # the driver copies the values at launch (and capture)
        if stream in self.captures:
            self.captures[stream].append(["kernel", func, tuple(grid), tuple(block), shared, args])
        else:
            self._run_kernel(func, grid, block, shared, args)

    def launch_programmatic(self, func, grid, block, shared, stream, params, *, kernel=None):
        """cuLaunchKernelEx with programmatic stream serialization: allowed only for a kernel compiled
        to wait for its predecessor (its manifest entry says pdl); recorded, then run as a launch."""
        self._op("cuLaunchKernelEx", kernel)
        fn = self.functions[func]
        assert fn.get("pdl"), f"{fn.get('variant')}: a programmatic launch of a kernel that does not wait for it"
        if stream in self.captures:   # in a graph, a programmatic edge needs a kernel before it
            assert any(op[0] == "kernel" for op in self.captures[stream]), f"{fn.get('variant')}: nothing before it"
        self.programmatic.append(fn.get("variant"))
        self._launch(func, grid, block, shared, stream, params)

    def _array(self, fn, ptr, stride, n, dtype, what):
        count = n if stride else 1
        nbytes = count * np.dtype(dtype).itemsize
        self.check_range(ptr, nbytes, f"{fn['variant']} {what}")
        if fn["aligned16"] and ptr % 16:
            raise AssertionError(f"{fn['variant']} {what}: pointer {ptr:#x} not 16-byte aligned for an aligned variant")
        a = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype)
        return a if stride else np.broadcast_to(a, (n,))

    def _run_kernel(self, func, grid, block, shared, args):
        # Staged ticks run the whole bucket: the tail reads stale staging, as on the GPU.
        with np.errstate(all="ignore"):
            self._run_kernel_checked(func, grid, block, shared, args)

    def _run_kernel_checked(self, func, grid, block, shared, args):
        fn = self.functions[func]
        fam = fn["family"]
        if fam == "quant":
            return self._run_quant(fn, grid, block, shared, args)
        n = args[len(FAMILY_PARAMS[fam]) - 1]
        epb = fn["elements_per_block"]
        assert tuple(block) == tuple(fn["block"]), f"{fn['variant']}: block {block} != {fn['block']}"
        assert grid[0] * epb >= n and (grid[0] - 1) * epb < max(n, 1), f"{fn['variant']}: grid {grid} for n={n}"
        assert 0 <= n < 2**31
        if fn["aligned16"] and n % 16:
            raise AssertionError(f"{fn['variant']}: an aligned16 variant launched with n={n}, not a multiple of 16")
        vdt = np.float64 if fn["dtype"] == "f64" else np.float32
        self.launches.append({"variant": fn["variant"], "grid": tuple(grid), "n": n, "args": args})
        if n == 0 or fam == "noop":
            return
        if fam == "scale":   # y = x * 1.0001f + 1 in float32 (one FMA on the device)
            x = self._array(fn, args[0], 1, n, np.float32, "x").astype(np.float64)
            self._array(fn, args[1], 1, n, np.float32, "y")[:] = (x * np.float64(np.float32(1.0001)) + 1.0).astype(np.float32)
            return
        if fam in ("greeks", "implied_vol"):
            names = [a.removesuffix("_ptr") for a, _ in FAMILY_PARAMS[fam]]
            ins = {}
            for i in range(7):
                name, ptr, stride = names[2 * i], args[2 * i], args[2 * i + 1]
                assert stride in (0, 1), f"{name} stride {stride}"
                ins[name] = self._array(fn, ptr, stride, n, np.uint8 if name == "call" else vdt, name)
            f64 = {k: v.astype(np.float64) for k, v in ins.items()}
            out_ptrs = args[14:14 + (10 if fam == "greeks" else 2)]
            if fam == "greeks":
                res = expected_greeks(**{k: f64[k] for k in ("spot", "strike", "t", "rate", "vol", "div")},
                                      call=ins["call"])
                for name, p in zip(GREEKS_OUTPUTS, out_ptrs):
                    self._array(fn, p, 1, n, vdt, name)[:] = res[name]
            else:
                vol, status = expected_iv(**{k: f64[k] for k in ("price", "spot", "strike", "t", "rate", "div")},
                                          call=ins["call"])
                self._array(fn, out_ptrs[0], 1, n, vdt, "vol_out")[:] = vol
                self._array(fn, out_ptrs[1], 1, n, np.int8, "status_out")[:] = status
        else:
            (gk, ge, gv, nk, nt, mode, pk, sk, pt, st, po, what, _) = args[:13]
            strikes = self._array(fn, gk, 1, nk, np.float64, "strikes")
            expiries = self._array(fn, ge, 1, nt, np.float64, "expiries")
            vols = self._array(fn, gv, 1, nk * nt, np.float64, "vols")
            k = self._array(fn, pk, sk, n, np.float64, "strike")
            t = self._array(fn, pt, st, n, np.float64, "t")
            self._array(fn, po, 1, n, np.float64, "out")[:] = expected_surface(strikes, expiries, vols, mode, k, t, what)

    # ---- quant kernels ---------------------------------------------------------------------------
    def _matrix(self, fn, ptr, rows, cols, stride, dtype, what):
        """A (rows, cols) view of "device" memory with row stride `stride` elements (checked)."""
        dtype = np.dtype(dtype)
        if rows == 0 or cols == 0:
            return np.zeros((rows, cols), dtype)
        assert stride >= cols, f"{fn['variant']} {what}: row stride {stride} < {cols} columns"
        nbytes = ((rows - 1) * stride + cols) * dtype.itemsize
        self.check_range(ptr, nbytes, f"{fn['variant']} {what}")
        flat = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols), (stride * dtype.itemsize, dtype.itemsize),
                                               writeable=True)

    def _run_quant(self, fn, grid, block, shared, args):
        from tickgpu.quant import gemm
        from tickgpu.quant.schemes import cast_output, quantize_activations

        v = fn["variant"]
        vals = dict(zip(fn["names"], args))
        assert tuple(block) == tuple(fn["block"]), f"{v}: block {block} != {fn['block']}"
        assert shared == fn["shared"], f"{v}: launched with {shared} bytes of shared memory, needs {fn['shared']}"
        if shared > 48 * 1024:
            assert fn.get("attributes", {}).get("MAX_DYNAMIC_SHARED_SIZE_BYTES", 0) >= shared, \
                f"{v}: {shared} bytes of dynamic shared memory without the function's opt-in"
        m = vals["M"]
        if fn["grid"] == "rows":
            want = (max(1, m), 1, 1)
        else:
            want = (max(1, -(-m // fn["block_m"]) * -(-vals["N"] // fn["block_n"])), 1, 1)
        assert tuple(grid) == want, f"{v}: grid {tuple(grid)}, the rule {fn['grid']!r} wants {want}"
        if fn["aligned16"]:
            for name, kind in zip(fn["names"], fn["kinds"]):
                if kind == "ptr" and name not in ("global_scratch", "profile_scratch"):
                    assert vals[name] % 16 == 0, f"{v}: {name} {vals[name]:#x} not 16-byte aligned"
            for name in fn["multiple_of_16"]:
                assert vals[name] % 16 == 0, f"{v}: {name}={vals[name]} not a multiple of 16"
        self.launches.append({"variant": v, "grid": tuple(grid), "n": m, "args": args})
        out_np = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[fn["dtype"]]
        out_name = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[fn["dtype"]]

        def vec(name, n, dtype):
            return self._matrix(fn, vals[name], 1, n, n, dtype, name)[0]

        def store(name, rows, cols, stride, y):
            y = cast_output(np.asarray(y, np.float32), out_name)
            if out_name == "bfloat16":
                y = (y.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            self._matrix(fn, vals[name], rows, cols, stride, out_np, name)[:] = y

        if m == 0:
            return
        entry = fn["entry"]
        if entry == "mlp3_fused_kernel":
            self._run_mlp3(fn, vals, vec, m)
            return
        if entry in ("act_quant_kernel", "layernorm_kernel"):
            k = vals["K"]
            x = self._matrix(fn, vals["x_ptr"], m, k, vals["stride_xm"], np.float32, "x_ptr").copy()
            if entry == "layernorm_kernel" or "_ln" in v:
                g, b = vec("gamma_ptr", k, np.float32), vec("beta_ptr", k, np.float32)
                x64 = x.astype(np.float64)
                mean = x64.mean(axis=1, keepdims=True)
                var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
                x = (((x64 - mean) / np.sqrt(var + vals["ln_eps"])) * g + b).astype(np.float32)
            if entry == "layernorm_kernel":
                store("y_ptr", m, k, vals["stride_ym"], x)
                return
            if v.startswith("quant_act16"):
                # int16 codes as two int8 limbs: hi in the first half of a code row, lo in the second
                ref = quantize_activations(x, bits=16)
                hi, lo = ref.limbs
                half = vals["stride_qm"] // 2
                self._matrix(fn, vals["xq_ptr"], m, k, vals["stride_qm"], np.int8, "xq_ptr")[:] = hi
                self._matrix(fn, vals["xq_ptr"] + half, m, k, vals["stride_qm"], np.int8, "xq_ptr")[:] = lo
            else:
                ref = quantize_activations(x)
                self._matrix(fn, vals["xq_ptr"], m, k, vals["stride_qm"], np.int8, "xq_ptr")[:] = ref.q
            vec("scale_ptr", m, np.float32)[:] = ref.scale
            vec("rowsum_ptr", m, np.int32)[:] = ref.rowsum
            return
        n, k = vals["N"], vals["K"]
        gelu = "_gelu" in v
        bias = vec("bias_ptr", n, np.float32)
        if entry in ("w8a16_gemm_kernel", "tg_w8a16_small_kernel"):
            if entry == "tg_w8a16_small_kernel":
                # its 16-byte weight loads read each row to K rounded up to 16 (the padding unused)
                self._matrix(fn, vals["b_ptr"], n, -(-k // 16) * 16, vals["stride_bn"], np.int8, "b_ptr")
            a = self._matrix(fn, vals["a_ptr"], m, k, vals["stride_am"], np.float16, "a_ptr")
            b = self._matrix(fn, vals["b_ptr"], n, k, vals["stride_bn"], np.int8, "b_ptr")
            y = gemm.linear_w8a16(a.astype(np.float32), b, vec("b_scale_ptr", n, np.float32), bias, apply_gelu=gelu)
        else:
            a = self._matrix(fn, vals["a_ptr"], m, k, vals["stride_am"], np.int8, "a_ptr")
            b = self._matrix(fn, vals["b_ptr"], n, k, vals["stride_bn"], np.int8, "b_ptr")
            a_scale, b_scale = vec("a_scale_ptr", m, np.float32), vec("b_scale_ptr", n, np.float32)
            if "w16a16" in v:
                b2 = self._matrix(fn, vals["b2_ptr"], n, k, vals["stride_bn"], np.int8, "b2_ptr")
                # the lo limbs from half a row in, as the activation kernel writes them
                a2 = self._matrix(fn, vals["a_ptr"] + vals["stride_am"] // 2, m, k, vals["stride_am"], np.int8, "a_ptr")
                y = gemm.linear_w16a16(a, a2, a_scale, vec("a_rowsum_ptr", m, np.int32), b, b2, b_scale,
                                       vec("b_offset_ptr", n, np.float32), bias, apply_gelu=gelu)
            elif "w16a8" in v:
                b2 = self._matrix(fn, vals["b2_ptr"], n, k, vals["stride_bn"], np.int8, "b2_ptr")
                y = gemm.linear_w16a8(a, a_scale, vec("a_rowsum_ptr", m, np.int32), b, b2, b_scale,
                                      vec("b_offset_ptr", n, np.float32), bias, apply_gelu=gelu)
            else:
                y = gemm.linear_w8a8(a, a_scale, b, b_scale, bias, apply_gelu=gelu)
        store("c_ptr", m, n, vals["stride_cm"], y)

    def _run_mlp3(self, fn, vals, vec, m):
        """The fused 3-layer step, layer by layer through the NumPy reference (float32 out)."""
        from tickgpu.quant import gemm
        from tickgpu.quant.schemes import cast_output, quantize_activations

        v = fn["variant"]
        k0 = vals["K0"]
        widths = [k0, vals["H1"], vals["H2"], vals["N"]]
        h = self._matrix(fn, vals["x_ptr"], m, k0, vals["stride_xm"], np.float32, "x_ptr").copy()
        if "_ln" in v:
            g, b = vec("gamma_ptr", k0, np.float32), vec("beta_ptr", k0, np.float32)
            x64 = h.astype(np.float64)
            mean = x64.mean(axis=1, keepdims=True)
            var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
            h = (((x64 - mean) / np.sqrt(var + vals["ln_eps"])) * g + b).astype(np.float32)
        for i in (1, 2, 3):
            k, n = widths[i - 1], widths[i]
            w = self._matrix(fn, vals[f"w{i}_ptr"], n, k, vals[f"stride_w{i}"], np.int8, f"w{i}_ptr")
            scale, bias = vec(f"s{i}_ptr", n, np.float32), vec(f"b{i}_ptr", n, np.float32)
            gelu = i < 3
            if "w8a16" in v:
                h = gemm.linear_w8a16(cast_output(h, "float16").astype(np.float32), w, scale, bias,
                                      apply_gelu=gelu)
                continue
            if "w16a16" in v:
                act = quantize_activations(h, bits=16)
                xh, xl = act.limbs
                lo = self._matrix(fn, vals[f"w{i}b_ptr"], n, k, vals[f"stride_w{i}"], np.int8, f"w{i}b_ptr")
                h = gemm.linear_w16a16(xh, xl, act.scale, act.rowsum, w, lo, scale, vec(f"o{i}_ptr", n, np.float32),
                                       bias, apply_gelu=gelu)
                continue
            act = quantize_activations(h)
            if "w16a8" in v:
                lo = self._matrix(fn, vals[f"w{i}b_ptr"], n, k, vals[f"stride_w{i}"], np.int8, f"w{i}b_ptr")
                h = gemm.linear_w16a8(act.q, act.scale, act.rowsum, w, lo, scale, vec(f"o{i}_ptr", n, np.float32),
                                      bias, apply_gelu=gelu)
            else:
                h = gemm.linear_w8a8(act.q, act.scale, w, scale, bias, apply_gelu=gelu)
        self._matrix(fn, vals["y_ptr"], m, widths[3], vals["stride_ym"], np.float32, "y_ptr")[:] = h

    # ---- graphs -----------------------------------------------------------------------------------
    def stream_begin_capture(self, s):
        self._op("cuStreamBeginCapture")
        assert s not in self.captures
        self.captures[s] = []

    def stream_end_capture(self, s):
        self._op("cuStreamEndCapture")
        g = self._handle()
        self.graphs[g] = self.captures.pop(s)
        return g

    def graph_instantiate(self, g):
        self._op("cuGraphInstantiate")
        self.counts["graph_instantiate"] += 1
        e = self._handle()
        self.execs[e] = [list(op) for op in self.graphs[g]]
        return e

    def graph_nodes(self, g):
        out = []
        for i, op in enumerate(self.graphs[g]):
            node = self._handle()
            self.nodes[node] = (g, i)
            out.append((node, "kernel" if op[0] == "kernel" else "memcpy"))
        return out

    def graph_memcpy_node_addresses(self, node):
        g, i = self.nodes[node]
        op = self.graphs[g][i]
        return op[1], op[2]

    def graph_exec_kernel_node_set_params(self, e, node, func, grid, block, shared, params, kernel=None):
        self._op("cuGraphExecKernelNodeSetParams", kernel)
        _, i = self.nodes[node]
        assert self.execs[e][i][0] == "kernel"
        self.execs[e][i] = ["kernel", func, tuple(grid), tuple(block), shared, self._read_args(self.functions[func], params)]

    def graph_exec_memcpy_node_set_params(self, e, node, ctx, dst, src, nbytes):
        self._op("cuGraphExecMemcpyNodeSetParams")
        _, i = self.nodes[node]
        op = self.execs[e][i]
        assert op[0] == "copy" and nbytes > 0
        self.execs[e][i] = ["copy", dst, src, nbytes, op[4]]

    def graph_launch(self, e, s, *, sync=False):
        self._op("cuGraphLaunch")
        for op in self.execs[e]:
            if op[0] == "copy":
                _, dst, src, nbytes, direction = op
                self.check_range(dst if direction == "htod" else src, nbytes, f"graph copy {direction}")
                ctypes.memmove(dst, src, nbytes)
            else:
                _, func, grid, block, shared, args = op
                self._run_kernel(func, grid, block, shared, args)

    def roundtrip(self, cin, n_in, e, s, cout, n_out):
        from tickgpu._native import check, lib

        check(lib.tg_hot_stage(cin, n_in), "stage in")
        self.graph_launch(e, s, sync=True)
        check(lib.tg_hot_stage(cout, n_out), "stage out")

    def graph_destroy(self, g):
        self.graphs.pop(g)   # KeyError on a graph destroyed twice or never made

    def graph_exec_destroy(self, e):
        self.execs.pop(e, None)


# ---- a fake bundle on disk -------------------------------------------------------------------------
def layout(kinds):
    out, cursor = [], 0
    for k in kinds:
        size = np.dtype(_KIND_DTYPE[k]).itemsize
        cursor = -(-cursor // size) * size
        out.append((cursor, size))
        cursor += size
    return out


def kernel_entry(family, dtype, epb, block, aligned16, source="triton", arch="sm_90", scratch=None, variant=None):
    kinds = [k for _, k in FAMILY_PARAMS[family]]
    names = [n for n, _ in FAMILY_PARAMS[family]]
    if source == "triton":
        kinds += ["ptr", "ptr"]
        names += ["global_scratch", "profile_scratch"]
    lay = layout(kinds)
    variant = variant or f"{family}_{dtype}_b{epb}{'_a16' if aligned16 else ''}"
    return {
        "variant": variant, "family": family, "arch": arch, "file": f"{arch}/{variant}.cubin",
        "entry": f"{variant}_kernel", "source": source, "source_hash": "0" * 64,
        "num_warps": block // 32, "block": [block, 1, 1], "shared": 0, "elements_per_block": epb,
        "dtype": dtype, "aligned16": aligned16,
        "params": [{"name": n, "kind": k, "size": s, "offset": o} for n, k, (o, s) in zip(names, kinds, lay)],
        "scratch": scratch or {"global": 0, "global_align": 1, "profile": 0},
    }


def default_entries(arch="sm_90"):
    e = []
    for dt in ("f64", "f32"):
        for a16 in (True, False):
            e.append(kernel_entry("greeks", dt, 256, 128, a16, arch=arch))
            e.append(kernel_entry("greeks", dt, 4096, 256, a16, arch=arch))
            e.append(kernel_entry("implied_vol", dt, 128, 128, a16, source="cuda", arch=arch))
    e.append(kernel_entry("surface", "f64", 1024, 128, True, arch=arch))
    e.append(kernel_entry("surface", "f64", 1024, 128, False, arch=arch))
    e.append(kernel_entry("noop", "f32", 32, 32, False, source="cuda", arch=arch))
    e.append(kernel_entry("scale", "f32", 256, 256, False, source="cuda", arch=arch))
    return e


def quant_entries(arch="sm_90", variants=None):
    """The quant family's entries of the committed bundle's manifest (real names, params, tiles)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "src" / "tickgpu" / "kernels" / "bundle" / "manifest.json"
    out = [k for k in json.loads(path.read_text())["kernels"] if k["family"] == "quant" and k["arch"] == arch]
    if variants is not None:
        out = [k for k in out if k["variant"] in variants]
    return out


def write_bundle(root, entries, cubin_params=None):
    """manifest.json + fake cubins; `cubin_params` {variant: [[offset, size], ...]} overrides what a
    cubin reports (to provoke a mismatch)."""
    cubin_params = cubin_params or {}
    for ent in entries:
        path = root / ent["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        params = cubin_params.get(ent["variant"], [[p["offset"], p["size"]] for p in ent["params"]])
        info = {"family": ent.get("family"), "dtype": ent.get("dtype"), "block": ent.get("block"),
                "elements_per_block": ent.get("elements_per_block"), "aligned16": ent.get("aligned16"),
                "params": params}
        if ent.get("family") == "quant":
            info.update(names=[p["name"] for p in ent["params"]], kinds=[p["kind"] for p in ent["params"]],
                        grid=ent["grid"], block_m=ent.get("block_m"), block_n=ent.get("block_n"),
                        multiple_of_16=ent.get("multiple_of_16", []), shared=ent["shared"],
                        pdl=ent.get("pdl", False))
        path.write_text(json.dumps({"entries": {ent.get("entry", "?"): info}}))
    (root / "manifest.json").write_text(json.dumps({"format": 1, "created": "2026-01-01",
                                                    "compilers": {"triton": "3.6", "nvcc": None, "ptxas": None}, "kernels": entries}))
    return root


class FakeGpuArray:
    """A GPU array as another library would hand it over: CAI v3 only."""

    def __init__(self, mock, host: np.ndarray, stream=None, offset=0, strides=None):
        self.mock = mock
        self.nbytes = host.nbytes
        self.base = mock.mem_alloc(max(host.nbytes + offset, 1))
        self.ptr = self.base + offset
        ctypes.memmove(self.ptr, host.ctypes.data, host.nbytes)
        self.shape, self.dtype, self.stream, self.strides = host.shape, host.dtype, stream, strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": self.strides, "stream": self.stream}
