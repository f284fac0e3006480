"""The GPU path of QuantLinear / QuantMLP: weights uploaded once, then one launch per step.

Kernels come from the bundle (variants of :data:`tickgpu.kernels.quant.QUANT_VARIANTS`, by name) and
are launched through a *kernel runtime*: an object with

- ``upload(array) -> buffer``: a device copy of a C-contiguous NumPy array;
- ``empty(shape, dtype) -> buffer``: dtype one of "int8", "int32", "float16", "bfloat16", "float32";
- ``write(buffer, array)``: copy a host array into a buffer of the same shape and dtype;
- ``download(buffer) -> ndarray``: a host copy (bfloat16 buffers come back as uint16 bit patterns);
- ``launch(variant, grid, args)``: launch a bundle variant on a 3-tuple grid with ``args`` in the
  order of the kernel's non-constexpr parameters: buffers for pointers, ints for i32, floats for fp32;
- optionally ``prepare(variant, grid, args)``: the same launch checked and packed once, returning an
  object whose ``launch()`` repeats it (used for every launch of a step when offered);
- optionally ``has(variant) -> bool``: whether the bundle holds a variant (without it, only the
  Triton variants every bundle holds are named);
- optionally ``mapped(shape, dtype)`` (pinned host memory the kernels address directly, with a
  NumPy view ``.host``) and ``capture(prepared) -> graph`` (the prepared launches as one CUDA
  graph whose ``replay()`` launches it and waits): where both are offered, a step of up to
  :data:`GRAPH_MAX_ROWS` rows is one graph replay reading its input from, and writing its output
  to, mapped host memory -- no copy, one launch, one wait.

A model of three layers whose widths all fit 64 runs a step of up to :data:`GRAPH_MAX_ROWS` rows
as one fused kernel (``quant_mlp3_*``, :meth:`GpuPlan.fused_variant`) instead of 4-6 launches: the
same operations, float32 out (rounded to the model's out_dtype on the host, as a kernel's store
rounds).

:func:`tickgpu.runtime.kernel_runtime` provides it on a GPU; tests provide one that runs the Triton
sources under the interpreter. Nothing here imports torch or triton.

Layout on the device: int8 weight rows and int8 activation rows are padded to a multiple of 16
elements (16-byte aligned rows for vectorized loads), float16 rows to a multiple of 8; outputs are
dense (M, N). The int8 GEMMs run over the padded K: the weights' padding is zero, so whatever the
activations' padding holds adds nothing to the integer sums (their variants are compiled assuming K
and both row strides are multiples of 16; W16A16's activation rows hold the int16 codes' hi limbs in
their first k_pad bytes and the lo limbs in the next k_pad). W8A16 runs over the true K: up to 32 rows on the CUDA C
small-batch kernel (csrc/cuda/w8a16.cu, variants "_m8", "_m16" and "_m32") where the bundle has it, else
on the Triton tile kernel, whose aligned variant ("_a16") serves K and activation row strides that
are multiples of 16.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from tickgpu.errors import BackendUnavailable
from tickgpu.quant.schemes import F32_MAX as _F32_MAX
from tickgpu.quant.schemes import cast_output

# At or below: a step is one replayed graph on mapped host memory. A signal model's step is a few
# microseconds of GPU work behind ~6 launches, a host-to-device and a device-to-host copy; as a
# graph over memory the kernels read and write across PCIe it is one launch and one wait, and the
# few kilobytes crossing the link cost less than the copies' fixed costs.
GRAPH_MAX_ROWS = 64
# (BLOCK_M, BLOCK_N) of each scheme's tiles, as tickgpu.kernels.quant.GEMM_TILES compiles them (the
# grid of a launch; a test holds the two equal, and the runtime checks every grid against the manifest).
_TILE_M_N = {("w8a8", "s"): (16, 32), ("w8a8", "m"): (64, 64), ("w8a8", "w"): (64, 128), ("w8a8", "l"): (128, 128),
             ("w16a8", "s"): (16, 32), ("w16a8", "m"): (64, 64), ("w16a8", "l"): (128, 128),
             ("w16a16", "s"): (16, 32), ("w16a16", "m"): (64, 64), ("w16a16", "w"): (64, 128),
             ("w8a16", "s"): (16, 32), ("w8a16", "m"): (64, 64), ("w8a16", "w"): (64, 128),
             ("w8a16", "l"): (128, 256)}
# Which tile serves an m x n GEMM (gemm_tile): per scheme, the larger tiles from the largest down,
# each with the fewest programs, as a multiple of the SM count, at which it beat the smaller ones.
# Measured with scripts/quant-sweep on an H200 (132 SMs; M = 32-4,096, N = K = 256-4,096,
# benchmarks/results/h200-2026-11-30-j/quant-sweep-mid.json): a larger tile does less work a
# weight byte but runs fewer programs, and wins once it has about two waves of them (W8A8 "l",
# "w"; W8A16 "w"), or one (the 8-warp large tiles of W16A8 and W8A16, one program an SM; the 64 x 64
# tiles "m", which have K-deep work even at a few programs an SM: half of one for the int8 schemes).
# Over the sweep's 16 shapes the rule's tile was within 1.10x of the fastest candidate for W8A8,
# 1.06x for W16A8 and 1.29x for W8A16, where the former rule ("s" to 64 rows, one large tile above)
# was up to 3.5x, 2.5x and 4.7x off. A tile also needs more than half its rows used (m > BLOCK_M / 2).
GEMM_LADDER = {"w8a8": (("l", 1.9), ("w", 1.9), ("m", 0.45)),
               "w16a8": (("l", 0.9), ("m", 0.45)),
               # (h200-2026-11-30-l/quant-sweep-w16a16.json: "w" from two waves, e.g. 51.6 against
               # "m"'s 58.8 us at 512 x 4096^2; "m" 23.0 against "s"'s 43.8 us at 128 rows)
               "w16a16": (("w", 1.9), ("m", 0.45)),
               "w8a16": (("l", 0.9), ("w", 1.9), ("m", 0.9))}


def gemm_tile(scheme: str, m: int, n: int, sm_count: int) -> str:
    """The tile ("s", "m", "w" or "l") of scheme's GEMM kernel for m rows and n output channels on a
    GPU of `sm_count` SMs (GEMM_LADDER says why)."""
    for tile, waves in GEMM_LADDER[scheme]:
        bm, bn = _TILE_M_N[(scheme, tile)]
        if 2 * m > bm and -(-m // bm) * -(-n // bn) >= waves * sm_count:
            return tile
    return "s"


_OUT_TAG = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# The CUDA C W8A16 kernel for small batches (csrc/cuda/w8a16.cu): (BLOCK_M, BLOCK_N) of its variants
# by the most rows each serves, as tickgpu.kernels.quant.W8A16_SMALL builds them (which says what
# they measured; benchmarks/results/h200-2026-11-30-f/README.md has the same-run comparisons).
W8A16_SMALL_TILES = {8: ("m8", 8, 16), 16: ("m16", 16, 16), 32: ("m32", 32, 16)}
# The fused 3-layer step (tickgpu.kernels.quant.mlp3_fused_kernel): tokens a program, the widths its
# variants are compiled for (BLOCK_H), and the schemes (with their LayerNorm options) it serves.
MLP3_BLOCK_M = 16
MLP3_WIDTHS = (32, 64)
MLP3_SCHEMES = {"w8a8": (False, True), "w16a8": (False, True), "w8a16": (True,), "w16a16": (False, True)}


def mlp3_variant_name(scheme: str, layernorm: bool, width: int) -> str:
    """The fused step's variant name, as tickgpu.kernels.quant names it (a test holds the two equal;
    that module imports Triton, which the run-time path never does)."""
    return f"quant_mlp3_{scheme}{'_ln' if layernorm else ''}_h{width}"


def w8a16_launch(m: int, n: int, k: int, stride_a: int, stride_b: int, gelu: bool, out_tag: str, sm_count: int,
                 has=None):
    """Variant and grid of a W8A16 GEMM of m x n x k (activation row stride `stride_a`, weight rows
    `stride_b` bytes, a multiple of 16) on a GPU of `sm_count` SMs; `has(variant)` says what the
    bundle holds (None: the Triton variants only). One rule for the model plans and the benchmarks."""
    g = "_gelu" if gelu else ""
    if has is not None and stride_b % 16 == 0:
        for rows, (tag, bm, bn) in W8A16_SMALL_TILES.items():   # the smallest tile the bundle has
            name = f"quant_w8a16{g}_{out_tag}_{tag}"
            if m <= rows and has(name):
                return name, (-(-m // bm) * -(-n // bn), 1, 1)
    tile = gemm_tile("w8a16", m, n, sm_count)
    bm, bn = _TILE_M_N[("w8a16", tile)]
    aligned = "_a16" if k % 16 == 0 and stride_a % 16 == 0 else ""
    return f"quant_w8a16{g}_{out_tag}_{tile}{aligned}", (-(-m // bm) * -(-n // bn), 1, 1)


def bf16_bits_to_f32(y: np.ndarray) -> np.ndarray:
    """bfloat16 outputs (uint16 bit patterns, as the buffers hold them) as float32 values."""
    return (y.astype(np.uint32) << 16).view(np.float32)


_NATIVE: tuple = ()


def _native() -> tuple:
    """(ffi, lib) of the native core, imported once (an import statement costs ~1 us a step)."""
    global _NATIVE
    if not _NATIVE:
        from tickgpu._native import ffi, lib

        _NATIVE = (ffi, lib)
    return _NATIVE


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_rows(a: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((a.shape[0], width), a.dtype)
    out[:, : a.shape[1]] = a
    return out


def _row_block(k: int) -> int:
    """BLOCK_K of the row kernels' variant for rows of k elements (tickgpu.kernels.quant.ROW_BLOCKS):
    up to 1,024 a row is read once, longer ones a chunk of 512 at a time."""
    return 64 if k <= 64 else 1024 if k <= 1024 else 512


def kernel_runtime():
    """The process's kernel runtime, or BackendUnavailable naming why there is none."""
    try:
        from tickgpu.runtime import kernel_runtime as make
    except ImportError as e:
        raise BackendUnavailable(f"quant: the GPU runtime offers no kernel_runtime() ({e})") from None
    return make()


class _Layer:
    def __init__(self, lin, rt):
        self.n, self.k = lin.out_features, lin.in_features
        self.k_pad = _round_up(self.k, 16)
        wq = lin.weight_q
        self.scale = rt.upload(np.ascontiguousarray(wq.scale, np.float32))
        self.bias = rt.upload(np.ascontiguousarray(lin.bias, np.float32))
        if wq.format == "int16":
            hi, lo = wq.limbs
            self.b = rt.upload(_pad_rows(hi, self.k_pad))
            self.b2 = rt.upload(_pad_rows(lo, self.k_pad))
            self.offset = rt.upload(np.ascontiguousarray(wq.limb_offset, np.float32))
        else:
            self.b = rt.upload(_pad_rows(wq.q, self.k_pad))
            self.b2 = self.b        # unused by the kernel; pointers are never NULL
            self.offset = self.scale
        self.gelu = lin.gelu


class _Program:
    """One model step for a given number of rows: its buffers and launches, made once and reused.

    ``out_cast``: the model's output dtype where the step writes float32 in its place (the fused
    step), rounded on the host as a kernel's store rounds (to nearest even); else None."""

    def __init__(self, x, in_dtype, launches, out, out_cast=None):
        self.x, self.in_dtype, self.launches, self.out = x, in_dtype, launches, out
        self.out_cast = out_cast
        self.prepared = None
        self.x_ptr = self.bad = None   # run_staged's native view of a mapped x, and its answer slots
        self.graph = None      # the step as one graph (x and out then live in mapped host memory)


class GpuPlan:
    """A model's weights on the device and the launches that run it.

    The buffers and launches of a step depend only on the number of rows, so they are built once
    per row count (the last :data:`MAX_PROGRAMS` kept) and a step is: write the input, queue the
    launches (packed once where the runtime offers ``prepare``), read the output.
    """

    MAX_PROGRAMS = 16

    def __init__(self, model, rt):
        from tickgpu.quant.models import QuantLinear

        self.rt = rt
        self.scheme = model.scheme
        lins = [model] if isinstance(model, QuantLinear) else model.layers
        self.layers = [_Layer(lin, rt) for lin in lins]
        self.out_dtype = lins[-1].out_dtype
        self.ln = getattr(model, "layernorm", None)
        if self.ln is not None:
            g, b, eps = self.ln
            self.gamma, self.beta, self.ln_eps = rt.upload(g), rt.upload(b), float(eps)
        else:
            self.gamma = self.beta = self.layers[0].bias  # unused
            self.ln_eps = 0.0
        self.programs: dict[int, _Program] = {}
        self._lock = threading.Lock()   # a program's buffers serve one step at a time

    def _gemm(self, layer, a, m, out_dtype, launches, a_scale=None, a_rowsum=None, stride_a=0, out=None):
        if out is None:
            out = self.rt.empty((m, layer.n), out_dtype)
        gelu = "_gelu" if layer.gelu else ""
        tag = _OUT_TAG[out_dtype]
        if self.scheme == "w8a16":
            variant, grid = w8a16_launch(m, layer.n, layer.k, stride_a, layer.k_pad, layer.gelu, tag,
                                         self.rt.sm_count, getattr(self.rt, "has", None))
            launches.append((variant, grid, [a, layer.b, layer.scale, layer.bias, out,
                                             m, layer.n, layer.k, stride_a, layer.k_pad, layer.n]))
        else:
            tile = gemm_tile(self.scheme, m, layer.n, self.rt.sm_count)
            bm, bn = _TILE_M_N[(self.scheme, tile)]
            grid = (-(-m // bm) * -(-layer.n // bn), 1, 1)
            launches.append((f"quant_gemm_{self.scheme}{gelu}_{tag}_{tile}", grid,
                             [a, a_scale, a_rowsum, layer.b, layer.b2, layer.scale, layer.offset,
                              layer.bias, out, m, layer.n, layer.k_pad, stride_a, layer.k_pad, layer.n]))
        return out

    def fused_variant(self, m: int) -> str | None:
        """The fused 3-layer step's variant for m rows, or None where the step runs layer by layer:
        a model of three layers whose widths all fit 64 (the narrowest variant that holds them),
        of a scheme the kernel serves, m <= GRAPH_MAX_ROWS, and a bundle that has the variant."""
        if len(self.layers) != 3 or not 0 < m <= GRAPH_MAX_ROWS:
            return None
        ln = self.ln is not None
        if ln not in MLP3_SCHEMES.get(self.scheme, ()):
            return None
        widest = max(self.layers[0].k, *(layer.n for layer in self.layers))
        width = next((w for w in MLP3_WIDTHS if widest <= w), None)
        if width is None:
            return None
        name = mlp3_variant_name(self.scheme, ln, width)
        has = getattr(self.rt, "has", None)
        return name if has is None or has(name) else None

    def _build_fused(self, m: int, variant: str, graph: bool) -> _Program:
        rt = self.rt
        alloc_io = rt.mapped if graph else rt.empty
        l1, l2, l3 = self.layers
        x = alloc_io((m, l1.k), "float32")
        y = alloc_io((m, l3.n), "float32")
        args = [x, self.gamma, self.beta]
        for layer in self.layers:
            args += [layer.b, layer.b2, layer.scale, layer.offset, layer.bias]
        args += [y, m, l1.k, l1.n, l2.n, l3.n, l1.k, l1.k_pad, l2.k_pad, l3.k_pad, l3.n, self.ln_eps]
        launches = [(variant, (-(-m // MLP3_BLOCK_M), 1, 1), args)]
        return _Program(x, np.float32, launches, y,
                        out_cast=None if self.out_dtype == "float32" else self.out_dtype)

    def _build(self, m: int) -> _Program:
        rt = self.rt
        last = len(self.layers) - 1
        launches: list = []
        k0 = self.layers[0].k
        graph = m <= GRAPH_MAX_ROWS and hasattr(rt, "capture") and hasattr(rt, "mapped") and hasattr(rt, "prepare")
        fused = self.fused_variant(m)
        if fused is not None:
            return self._finish(self._build_fused(m, fused, graph), graph)
        # In graph mode the step's input and output are mapped host memory the kernels address.
        alloc_io = rt.mapped if graph else rt.empty
        y = alloc_io((m, self.layers[-1].n), self.out_dtype)
        if self.scheme == "w8a16":
            if self.ln is not None:
                x = alloc_io((m, k0), "float32")
                in_dtype = np.float32
                h = rt.empty((m, _round_up(k0, 8)), "float16")
                launches.append((f"quant_layernorm_f16_k{_row_block(k0)}", (m, 1, 1),
                                 [x, self.gamma, self.beta, h, m, k0, k0, _round_up(k0, 8), self.ln_eps]))
                stride = _round_up(k0, 8)
            else:
                h = x = alloc_io((m, k0), "float16")
                in_dtype = np.float16
                stride = k0
            for i, layer in enumerate(self.layers):
                h = self._gemm(layer, h, m, self.out_dtype if i == last else "float16", launches, stride_a=stride,
                               out=y if i == last else None)
                stride = layer.n
        else:
            h = x = alloc_io((m, k0), "float32")
            in_dtype = np.float32
            stride = k0
            # W16A16: a code row holds the int16 activations' hi limbs, then their lo limbs (k_pad each)
            a16 = self.scheme == "w16a16"
            for i, layer in enumerate(self.layers):
                row = 2 * layer.k_pad if a16 else layer.k_pad
                xq = rt.empty((m, row), "int8")
                scale = rt.empty((m,), "float32")
                rowsum = rt.empty((m,), "int32")
                has_ln = i == 0 and self.ln is not None
                launches.append((f"quant_act{'16' if a16 else ''}{'_ln' if has_ln else ''}_k{_row_block(layer.k)}",
                                 (m, 1, 1), [h, self.gamma, self.beta, xq, scale, rowsum,
                                             m, layer.k, stride, row, self.ln_eps]))
                h = self._gemm(layer, xq, m, self.out_dtype if i == last else "float32", launches,
                               a_scale=scale, a_rowsum=rowsum, stride_a=row, out=y if i == last else None)
                stride = layer.n
        return self._finish(_Program(x, in_dtype, launches, h), graph)

    def _finish(self, prog: _Program, graph: bool) -> _Program:
        rt = self.rt
        if hasattr(rt, "prepare"):
            prog.prepared = [rt.prepare(v, g, a) for v, g, a in prog.launches]
        if graph:
            prog.graph = rt.capture(prog.prepared)
        return prog

    def _host_out(self, prog: _Program, y: np.ndarray) -> np.ndarray:
        """A step's output as the model's out_dtype (bfloat16: float32 arrays of bfloat16 values)."""
        if prog.out_cast is not None:
            return cast_output(y, prog.out_cast)
        return bf16_bits_to_f32(y) if self.out_dtype == "bfloat16" else y

    def _program(self, m: int) -> _Program:
        prog = self.programs.get(m)
        if prog is None:
            if len(self.programs) >= self.MAX_PROGRAMS:
                self.programs.pop(next(iter(self.programs)))
            prog = self.programs[m] = self._build(m)
        return prog

    def run_staged(self, x: np.ndarray, check: bool, not_finite, safe: float = math.inf, overflowed=None):
        """A C-contiguous float32 / float64 (M, K) host batch, converted, checked and written into
        the step's mapped input in one native pass, then the step: host outputs in the model's
        out_dtype. None where the step is not a graph over float32 mapped input (the caller then
        takes `run`). With `check`, the first element that is not finite (row-major) is handed to
        ``not_finite(i, j, value)``, which raises, before anything is launched; and where an
        element's magnitude exceeds `safe` (the model's overflow bound) and the output is not
        finite, ``overflowed()`` is called (it raises, or returns where that is no error)."""
        m = x.shape[0]
        with self._lock:
            prog = self._program(m)
            if prog.graph is None or prog.in_dtype is not np.float32:
                return None
            y = _staged_step(prog, _native()[0].from_buffer(x), x.dtype.itemsize == 8, m, x.shape[1],
                             1 if check else 0, not_finite, safe, overflowed)
        return self._host_out(prog, y)

    def run(self, x: np.ndarray) -> np.ndarray:
        """float32 (M, K) host activations -> host outputs in the model's out_dtype."""
        rt = self.rt
        m = x.shape[0]
        with self._lock:
            prog = self._program(m)
            if prog.graph is not None:
                np.copyto(prog.x.host, x, casting="same_kind")
                prog.graph.replay()
                return self._host_out(prog, prog.out.host.copy())
            rt.write(prog.x, np.ascontiguousarray(x, prog.in_dtype))
            if prog.prepared is not None:
                for p in prog.prepared:
                    p.launch()
            else:
                for variant, grid, args in prog.launches:
                    rt.launch(variant, grid, args)
            y = rt.download(prog.out)
        return self._host_out(prog, y)


def finite(y: np.ndarray) -> bool:
    """True where every element of y is finite: one float64 sum (NaN or inf where any is not)."""
    return math.isfinite(float(np.add.reduce(y, None, np.float64)))


def _staged_step(prog: _Program, src, wide: bool, m: int, k: int, check: int, not_finite,
                 safe: float = math.inf, overflowed=None) -> np.ndarray:
    """One step of a graph program on a host batch (its plan's lock held): `src`, a native view of a
    C-contiguous (m, k) float32 (float64 where `wide`) array, converted, checked and written into
    the mapped input in one native pass, the graph replayed, the raw output copied out. With
    `check`, the first element that is not finite (row-major) goes to ``not_finite(i, j, value)``,
    which raises, before anything is launched; where none is but one's magnitude exceeds `safe`,
    a raw output that is not finite calls ``overflowed()`` (the same pass finds both)."""
    ffi, lib = _native()
    if prog.x_ptr is None:
        prog.x_ptr = ffi.cast("float *", prog.x.host.ctypes.data)
        prog.bad = (ffi.new("int64_t *"), ffi.new("int *"))
    bad, kind = prog.bad
    st = lib.tg_stage_rows_f32(src, wide, m, k, k, prog.x_ptr, check, safe if safe < _F32_MAX else math.inf,
                               bad, kind)
    if st:
        raise RuntimeError(f"tg_stage_rows_f32: {ffi.string(lib.tg_status_name(st)).decode()}")
    if kind[0] == 1:
        i, j = divmod(int(bad[0]), k)
        not_finite(i, j, prog.x.host[i, j])
    prog.graph.replay()
    y = prog.out.host.copy()
    if kind[0] == 2 and overflowed is not None and not finite(y):
        overflowed()
    return y


class BoundStep:
    """A model's GPU step bound to one host array: checked once, then run on its current contents.

    Made by ``QuantLinear.bind`` / ``QuantMLP.bind`` (which document it). A call is the step's
    one-pass native staging of the array into the step's mapped input, the step's graph, and the
    output copied out: what ``model(x)`` does for this array, without re-checking the array's type,
    shape and layout, the dispatch and the plan lookup every tick. Results are ``model(x)``'s to the
    bit; a non-finite input raises the same error (``check=True``) or gives the same NaN rows.
    """

    def __init__(self, model, x, check: bool, not_finite, safe: float = math.inf, overflowed=None):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x: must be a NumPy array (bound once, read on every call), got {type(x).__name__}")
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"x: must be float32 or float64, got {x.dtype}")
        if not x.flags.c_contiguous:
            raise ValueError("x: must be C-contiguous (its memory is read in place on every call)")
        k = model.in_features
        self.single = x.ndim == 1
        if x.shape[-1:] != (k,) or x.ndim not in (1, 2):
            raise ValueError(f"x: must have shape (tokens, {k}) or ({k},), got {x.shape}")
        m = 1 if self.single else x.shape[0]
        if not 0 < m <= GRAPH_MAX_ROWS:
            raise ValueError(f"x: a bound step takes 1 to {GRAPH_MAX_ROWS} rows (one graph), got {m}")
        self.plan = plan_for(model)
        with self.plan._lock:
            prog = self.plan._program(m)
        if prog.graph is None or prog.in_dtype is not np.float32:
            raise RuntimeError("bind: this kernel runtime offers no graph over mapped memory for the step")
        self.x, self.m, self.k, self.prog = x, m, k, prog
        self._src = _native()[0].from_buffer(x)      # holds x: its buffer cannot be freed or resized
        self._wide = x.dtype.itemsize == 8
        self._check = 1 if check else 0
        self._not_finite = not_finite
        self._safe, self._overflowed = safe, overflowed

    def __call__(self) -> np.ndarray:
        """The model's output for the bound array's current contents (a new array)."""
        prog, plan = self.prog, self.plan
        with plan._lock:
            y = _staged_step(prog, self._src, self._wide, self.m, self.k, self._check, self._not_finite,
                             self._safe, self._overflowed)
        y = plan._host_out(prog, y)
        return y[0] if self.single else y


def plan_for(model, rt=None) -> GpuPlan:
    """The model's cached plan (built, and weights uploaded, on first use)."""
    plan = getattr(model, "_gpu_plan", None)
    if plan is None or (rt is not None and plan.rt is not rt):
        plan = GpuPlan(model, rt if rt is not None else kernel_runtime())
        model._gpu_plan = plan
    return plan
