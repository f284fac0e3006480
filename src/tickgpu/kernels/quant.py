"""Triton kernels of the quantized linear layers (tickgpu.quant), compiled ahead of time into the bundle.

Five kernels, each reproducing a step of the NumPy reference in :mod:`tickgpu.quant.schemes` and
:mod:`tickgpu.quant.gemm` operation for operation (those modules give the formulas):

1. ``act_quant_kernel``: per-token symmetric int8 quantization of float32 activations, optionally
   after a fused LayerNorm; writes int8 codes, float32 scales and int32 row sums. With ``A16`` the
   codes are int16 (W16A16), written as two int8 limbs, each in its half of a code row. One program per
   row, walking the row in BLOCK_K chunks (a reduction pass for the LayerNorm mean and variance, one
   for the absmax, one to quantize); rows of up to 1,024 elements are read once into registers
   (``SINGLE``): where the row is a step's input in mapped host memory, each pass's read is a PCIe
   round trip.
2. ``quant_gemm_kernel``: ``C = epilogue(A_q @ B_q^T)`` with int8 A (M x K, row-major) and int8 B
   stored K-major (N x K, K contiguous: each output channel's weights are one contiguous row, the
   operand layout Hopper's wgmma reads without a transpose). int32 accumulation through ``tl.dot``
   on int8 tensor cores. With ``LIMBS`` it runs the int16 weights as two int8 limb matrices against
   the same A tile and combines the two accumulators in float32; with ``A16`` also A's two limbs
   (W16A16; a row of A holds the hi limbs in its first half, the lo limbs from ``stride_am / 2``, as
   kernel 1 writes them): four int8 products in three accumulators (the cross terms share one). The epilogue (per-token x
   per-channel scales, zero-point correction through the row sums, bias, optional GELU, output
   dtype) is fused and float32. Its bundle variants assume K and the row strides of A and B are
   multiples of 16 (callers pad K with zero weights; A's padding may hold anything).
3. ``w8a16_gemm_kernel``: weight-only int8: float16 A, int8 B tiles widened to float16 in registers
   (exact), float32 accumulation on the tensor cores, per-channel scale and bias in the epilogue.
   With FAST_CVT (every bundle variant) the widening is three integer operations and two float16x2
   subtractions per four weights (:func:`_int8x4_to_float16`) instead of four int-to-float
   conversions; the interpreter, which runs no PTX, takes the plain conversion (same values).
4. ``layernorm_kernel``: LayerNorm of float32 rows into float16 (the input of a W8A16 model).
5. ``mlp3_fused_kernel``: a whole 3-layer model step (LayerNorm, Linear-GELU, Linear-GELU,
   Linear) for models whose widths all fit one register tile (at most 64), every scheme: the step of kernels
   1-4 in one launch, each program holding 16 tokens' activations in registers from input to
   output. A small model's layer-by-layer step is a chain of 4-6 launches, each a few dependent
   memory round trips long; fused, the input crosses PCIe once and nothing waits between layers.

Kernels 1-4 take a ``PDL`` switch, on in their sm_90 variants (the builder sets it): programmatic
dependent launch. A model step's graph is a chain of these kernels; each lets the next launch
while it runs and waits (``griddepcontrol.wait``) before reading what the previous one wrote, so
the launch latency between two kernels overlaps the first's work. Off (the default, and what the
interpreter runs) it compiles to nothing; on, the instructions exist from sm_90.

Bit-exactness: compile with ``enable_fp_fusion=False`` (every entry of :data:`QUANT_VARIANTS` says
so): the epilogues are then IEEE float32 operations in the reference's order, and A_q, scales, row
sums and the W8A8 / W16A8 outputs equal the reference bit for bit without LayerNorm. With
LayerNorm the mean and variance are tree-reduced (the reference sums in float64), so a code may
differ by one where a value lies within an ulp of a rounding boundary; GELU's erf may differ by an
ulp; W8A16's float32 sum order is the tensor cores'.

Rounding to nearest-even uses ``(v + 1.5 * 2**23) - 1.5 * 2**23``, exact for ``|v| < 2**22`` (here
``|v| <= 127``): it needs no libdevice call, so the same source runs under TRITON_INTERPRET=1.
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# 2**-100: the floor of every quantization range (tickgpu.quant.schemes.EPS).
# (Globals a kernel reads must be tl.constexpr.)
RANGE_FLOOR = tl.constexpr(7.888609052210118e-31)
FLT_MAX = tl.constexpr(3.4028234663852886e38)
RNE_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23
ACT16_MAX = tl.constexpr(32639.0)     # tickgpu.quant.schemes.ACT16_MAX: int16 codes that split into int8 limbs
INV_SQRT2 = tl.constexpr(0.7071067811865476)


@triton.jit
def _round_half_even(v):
    return (v + RNE_MAGIC) - RNE_MAGIC


@triton.jit
def _gelu(y):
    return 0.5 * y * (1.0 + tl.math.erf(y * INV_SQRT2))


@triton.jit
def _int8x4_to_float16(b):
    """int8 -> float16, exactly, four values per 32-bit register (PTX; not for the interpreter).

    ``x ^ 0x80`` is x + 128 as an unsigned byte; written under the float16 exponent byte 0x64 it
    is the float16 1024 + (x + 128) (the 1024..1279 binade has unit spacing), and one float16x2
    subtraction of 1152 leaves x. Two byte permutes place four bytes into two float16 pairs, so a
    weight costs about one instruction instead of an integer-to-float conversion, the bottleneck
    of small-batch W8A16 (measured on an H200, M <= 16, N = K = 4096: 12.8 -> 8.2 us).
    """
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 u, lo, hi, bias;
        xor.b32 u, $2, 0x80808080;
        prmt.b32 lo, u, 0x64646464, 0x4140;
        prmt.b32 hi, u, 0x64646464, 0x4342;
        mov.b32 bias, 0x64806480;
        sub.f16x2 $0, lo, bias;
        sub.f16x2 $1, hi, bias;
        }""",
        constraints="=r,=r,r", args=[b], dtype=tl.float16, is_pure=True, pack=4)


@triton.jit
def _row_moments(row_ptr, K, BLOCK_K: tl.constexpr):
    """Mean and 1/sqrt(var + eps)-ready variance of one float32 row (two passes, tree sums)."""
    offs_k = tl.arange(0, BLOCK_K)
    total = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(row_ptr + k0 + offs_k, mask=k0 + offs_k < K, other=0.0)
        total += x
    mean = tl.math.div_rn(tl.sum(total, axis=0), K.to(tl.float32))
    sq = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask = k0 + offs_k < K
        x = tl.load(row_ptr + k0 + offs_k, mask=mask, other=0.0)
        d = tl.where(mask, x - mean, 0.0)
        sq += d * d
    var = tl.math.div_rn(tl.sum(sq, axis=0), K.to(tl.float32))
    return mean, var


@triton.jit
def _row_chunk(row_ptr, gamma_ptr, beta_ptr, k0, offs_k, K, mean, rstd, HAS_LN: tl.constexpr):
    """Elements k0 + offs_k of a row read in chunks (zeros past K) and, with HAS_LN, normalized
    ``(x - mean) * rstd * gamma + beta``; also the chunk's mask."""
    mask = k0 + offs_k < K
    v = tl.load(row_ptr + k0 + offs_k, mask=mask, other=0.0)
    if HAS_LN:
        g = tl.load(gamma_ptr + k0 + offs_k, mask=mask, other=0.0)
        b = tl.load(beta_ptr + k0 + offs_k, mask=mask, other=0.0)
        v = (v - mean) * rstd * g + b
    return v, mask


@triton.jit
def _rows_quantized(h, kmask, QMAX: tl.constexpr):
    """act_quant_kernel's per-token quantization of a register tile h [BLOCK_M, BLOCK_H] (columns
    where ~kmask are padding) to codes in [-QMAX, QMAX] (127: int8; ACT16_MAX: int16): int32 codes,
    float32 scales (NaN for a row holding a non-finite value, whose codes are zeros) and int32 row
    sums -- the same operations in the same order."""
    nonfinite = ((h != h) | (tl.abs(h) > FLT_MAX)) & kmask[None, :]
    row_bad = tl.max(nonfinite.to(tl.int32), axis=1) > 0
    amax = tl.max(tl.where(nonfinite | ~kmask[None, :], 0.0, tl.abs(h)), axis=1)
    a = tl.maximum(amax, RANGE_FLOOR)
    inv = tl.math.div_rn(QMAX, a)
    scale = tl.math.div_rn(a, QMAX)
    r = _round_half_even(h * inv[:, None])
    r = tl.minimum(tl.maximum(r, -QMAX), QMAX)
    r = tl.where(row_bad[:, None] | ~kmask[None, :], 0.0, r)
    q = r.to(tl.int32)
    return q, tl.where(row_bad, float("nan"), scale), tl.sum(q, axis=1)


@triton.jit
def _act_limbs(q):
    """int32 activation codes in [-ACT16_MAX, ACT16_MAX] as int8 limbs (hi, lo), ``q = 256 hi + lo``:
    ``hi = (q + 128) >> 8`` (arithmetic: floor) in [-127, 127], ``lo`` in [-128, 127]."""
    hi = (q + 128) >> 8
    lo = q - hi * 256
    return hi.to(tl.int8), lo.to(tl.int8)


@triton.jit
def _layernorm_rows(x, mask, K, ln_eps, gamma_ptr, beta_ptr, offs):
    """LayerNorm of register rows x [R, BLOCK] read whole (columns where ~mask are padding, loaded
    as zeros): tree sums for the mean and variance, ``(x - mean) * rstd * gamma + beta``, padding 0."""
    kf = K.to(tl.float32)
    mean = tl.math.div_rn(tl.sum(x, axis=1), kf)
    d = tl.where(mask[None, :], x - mean[:, None], 0.0)
    var = tl.math.div_rn(tl.sum(d * d, axis=1), kf)
    rstd = tl.math.div_rn(1.0, tl.math.sqrt_rn(var + ln_eps))
    g = tl.load(gamma_ptr + offs, mask=mask, other=0.0)
    b = tl.load(beta_ptr + offs, mask=mask, other=0.0)
    return tl.where(mask[None, :], (x - mean[:, None]) * rstd[:, None] * g[None, :] + b[None, :], 0.0)


@triton.jit
def _int8_epilogue(acc, acc2, acc3, a_scale, rowsum, b_scale, b_offset, bias, LIMBS: tl.constexpr,
                   A16: tl.constexpr, GELU: tl.constexpr):
    """The float32 epilogue of the int8 GEMMs, in the reference's order (tickgpu.quant.gemm): limbs
    combined and the zero point corrected through the row sums (LIMBS; with A16, the activations'
    limbs too: acc, acc2, acc3 = hh, mid, ll), per-token x per-channel scale, bias, GELU. a_scale,
    rowsum: per row; b_scale, b_offset, bias: per column."""
    if A16:
        t = acc.to(tl.float32) * 65536.0 + acc2.to(tl.float32) * 256.0
        t = t + acc3.to(tl.float32)
        t = t + b_offset[None, :] * rowsum.to(tl.float32)[:, None]
    elif LIMBS:
        t = acc.to(tl.float32) * 256.0 + acc2.to(tl.float32)
        t = t + b_offset[None, :] * rowsum.to(tl.float32)[:, None]
    else:
        t = acc.to(tl.float32)
    scale = a_scale[:, None] * b_scale[None, :]
    y = t * scale
    y = y + bias[None, :]
    if GELU:
        y = _gelu(y)
    return y


@triton.jit
def _dependent_launch(PDL: tl.constexpr):
    """With PDL (the sm_90 variants): programmatic dependent launch. The next kernel of a model
    step's graph may launch now, while this one runs; this one reads nothing before the kernel
    it follows has finished and its writes are visible (``griddepcontrol``). Launched without the
    attribute, or first in its graph, both are no-ops."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


@triton.jit
def act_quant_kernel(
    x_ptr, gamma_ptr, beta_ptr,          # float32 input rows; LayerNorm weight and bias (K,)
    xq_ptr, scale_ptr, rowsum_ptr,       # outputs: int8 codes, float32 scale per row, int32 row sums
    M, K,
    stride_xm, stride_qm,                # row strides in elements (columns are contiguous)
    ln_eps,                              # LayerNorm epsilon (float32), unused without HAS_LN
    HAS_LN: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SINGLE: tl.constexpr,                # K <= BLOCK_K: the row is read once, into registers
    PDL: tl.constexpr = 0,
    A16: tl.constexpr = 0,               # int16 codes as two int8 limbs: hi in the first half of a
                                         # code row (stride_qm), lo in the second
):
    """One program per token (row): optional LayerNorm, absmax, int8 codes (A16: int16 codes as
    two int8 limbs), scale and row sum."""
    _dependent_launch(PDL)
    pid_m = tl.program_id(axis=0)
    if pid_m >= M:
        return
    row_ptr = x_ptr + pid_m.to(tl.int64) * stride_xm
    q_row_ptr = xq_ptr + pid_m.to(tl.int64) * stride_qm
    lo_row_ptr = q_row_ptr + stride_qm // 2
    offs_k = tl.arange(0, BLOCK_K)
    qmax: tl.constexpr = ACT16_MAX if A16 else 127.0

    if SINGLE:
        # Each pass of the chunked form (below) reads the row again; where the row is the step's
        # input in mapped host memory each read is a PCIe round trip. One read, the same operations
        # on registers.
        mask = offs_k < K
        x = tl.load(row_ptr + offs_k[None, :], mask=mask[None, :], other=0.0)
        if HAS_LN:
            x = _layernorm_rows(x, mask, K, ln_eps, gamma_ptr, beta_ptr, offs_k)
        q, scale, rowsum = _rows_quantized(x, mask, qmax)
        if A16:
            hi, lo = _act_limbs(q)
            tl.store(q_row_ptr + offs_k[None, :], hi, mask=mask[None, :])
            tl.store(lo_row_ptr + offs_k[None, :], lo, mask=mask[None, :])
        else:
            tl.store(q_row_ptr + offs_k[None, :], q.to(tl.int8), mask=mask[None, :])
        tl.store(scale_ptr + pid_m + tl.arange(0, 1), scale)
        tl.store(rowsum_ptr + pid_m + tl.arange(0, 1), rowsum)
    else:
        if HAS_LN:
            mean, var = _row_moments(row_ptr, K, BLOCK_K)
            rstd = tl.math.div_rn(1.0, tl.math.sqrt_rn(var + ln_eps))
        else:
            mean = 0.0
            rstd = 1.0

        # Pass 1: absmax over the finite values; any NaN or +-inf poisons the row.
        amax = tl.zeros([BLOCK_K], dtype=tl.float32)
        bad = tl.zeros([BLOCK_K], dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            v, mask = _row_chunk(row_ptr, gamma_ptr, beta_ptr, k0, offs_k, K, mean, rstd, HAS_LN)
            nonfinite = ((v != v) | (tl.abs(v) > FLT_MAX)) & mask
            bad = tl.maximum(bad, nonfinite.to(tl.int32))
            amax = tl.maximum(amax, tl.where(nonfinite | ~mask, 0.0, tl.abs(v)))
        row_bad = tl.max(bad, axis=0) > 0
        a = tl.maximum(tl.max(amax, axis=0), RANGE_FLOOR)
        inv = tl.math.div_rn(qmax, a)
        scale = tl.math.div_rn(a, qmax)

        # Pass 2: codes and their sum (a poisoned row is written as zeros).
        acc = tl.zeros([BLOCK_K], dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            v, mask = _row_chunk(row_ptr, gamma_ptr, beta_ptr, k0, offs_k, K, mean, rstd, HAS_LN)
            r = _round_half_even(v * inv)
            r = tl.minimum(tl.maximum(r, -qmax), qmax)
            r = tl.where(row_bad | ~mask, 0.0, r)
            q = r.to(tl.int32)
            acc += q
            if A16:
                hi, lo = _act_limbs(q)
                tl.store(q_row_ptr + k0 + offs_k, hi, mask=mask)
                tl.store(lo_row_ptr + k0 + offs_k, lo, mask=mask)
            else:
                tl.store(q_row_ptr + k0 + offs_k, q.to(tl.int8), mask=mask)
        tl.store(scale_ptr + pid_m, tl.where(row_bad, float("nan"), scale))
        tl.store(rowsum_ptr + pid_m, tl.sum(acc, axis=0))


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped ordering (Triton matmul tutorial): consecutive programs share B column tiles in L2.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def quant_gemm_kernel(
    a_ptr, a_scale_ptr, a_rowsum_ptr,    # int8 A (M x K), float32 scale (M,), int32 row sums (M,)
    b_ptr, b2_ptr,                       # int8 B (N x K, K contiguous); LIMBS: b = hi limb, b2 = lo limb
    b_scale_ptr, b_offset_ptr,           # float32 (N,): per-channel scale; LIMBS: 128 - zero_point
    bias_ptr,                            # float32 (N,)
    c_ptr,                               # output (M x N), float32 / float16 / bfloat16
    M, N, K,
    stride_am, stride_bn, stride_cm,     # row strides in elements; unit stride along K and N
    LIMBS: tl.constexpr,
    GELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PDL: tl.constexpr = 0,
    A16: tl.constexpr = 0,               # with LIMBS: A's rows hold int16 activations as two int8
                                         # limbs, hi in a row's first half, lo in its second (W16A16)
):
    """int8 x int8 -> int32 GEMM with the fused float32 epilogue of W8A8 (or W16A8 with LIMBS, or
    W16A16 with LIMBS and A16: four limb products in three accumulators)."""
    _dependent_launch(PDL)
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # A tile [BLOCK_M, BLOCK_K] from row-major A; B tile [BLOCK_K, BLOCK_N] read from K-major
    # storage, so each of its columns is a contiguous run of one output channel's weights.
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    b2_ptrs = b2_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        if LIMBS:
            b2 = tl.load(b2_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
            acc2 = tl.dot(a, b2, acc2, out_dtype=tl.int32)
            if A16:
                a2 = tl.load(a_ptrs + stride_am // 2, mask=mask_m[:, None] & mask_k[None, :], other=0)
                acc2 = tl.dot(a2, b, acc2, out_dtype=tl.int32)
                acc3 = tl.dot(a2, b2, acc3, out_dtype=tl.int32)
            b2_ptrs += BLOCK_K
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    a_scale = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
    b_scale = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
    if LIMBS:
        rowsum = tl.load(a_rowsum_ptr + offs_m, mask=mask_m, other=0)
        b_offset = tl.load(b_offset_ptr + offs_n, mask=mask_n, other=0.0)
    else:
        rowsum = 0
        b_offset = 0.0
    y = _int8_epilogue(acc, acc2, acc3, a_scale, rowsum, b_scale, b_offset, bias, LIMBS, A16, GELU)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def w8a16_gemm_kernel(
    a_ptr,                               # float16 A (M x K), row-major
    b_ptr, b_scale_ptr,                  # int8 B (N x K, K contiguous), float32 scale (N,)
    bias_ptr,                            # float32 (N,)
    c_ptr,                               # output (M x N), float32 / float16 / bfloat16
    M, N, K,
    stride_am, stride_bn, stride_cm,
    GELU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FAST_CVT: tl.constexpr,
    PDL: tl.constexpr = 0,
):
    """Weight-only int8 GEMM: B tiles are widened to float16 in registers (exact for |q| <= 127)."""
    _dependent_launch(PDL)
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        if FAST_CVT:
            bf = _int8x4_to_float16(b)
        else:
            bf = b.to(tl.float16)
        acc = tl.dot(a, bf, acc, out_dtype=tl.float32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    # The per-channel scale factors out of the K sum: apply it once, here.
    b_scale = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
    y = acc * b_scale[None, :]
    y = y + bias[None, :]
    if GELU:
        y = _gelu(y)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def layernorm_kernel(
    x_ptr, gamma_ptr, beta_ptr,          # float32 rows; weight and bias (K,)
    y_ptr,                               # output rows (float16 or float32)
    M, K,
    stride_xm, stride_ym,
    ln_eps,
    BLOCK_K: tl.constexpr,
    SINGLE: tl.constexpr,                # K <= BLOCK_K: the row is read once, into registers
    PDL: tl.constexpr = 0,
):
    """One program per row: ``(x - mean) / sqrt(var + eps) * gamma + beta``."""
    _dependent_launch(PDL)
    pid_m = tl.program_id(axis=0)
    if pid_m >= M:
        return
    row_ptr = x_ptr + pid_m.to(tl.int64) * stride_xm
    out_ptr = y_ptr + pid_m.to(tl.int64) * stride_ym
    offs_k = tl.arange(0, BLOCK_K)
    if SINGLE:
        mask = offs_k < K
        x = tl.load(row_ptr + offs_k[None, :], mask=mask[None, :], other=0.0)
        y = _layernorm_rows(x, mask, K, ln_eps, gamma_ptr, beta_ptr, offs_k)
        tl.store(out_ptr + offs_k[None, :], y.to(y_ptr.dtype.element_ty), mask=mask[None, :])
    else:
        mean, var = _row_moments(row_ptr, K, BLOCK_K)
        rstd = tl.math.div_rn(1.0, tl.math.sqrt_rn(var + ln_eps))
        for k0 in range(0, K, BLOCK_K):
            y, mask = _row_chunk(row_ptr, gamma_ptr, beta_ptr, k0, offs_k, K, mean, rstd, True)
            tl.store(out_ptr + k0 + offs_k, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fused_weights(w_ptr, w2_ptr, s_ptr, o_ptr, b_ptr, N, K, stride_w,
                   SCHEME: tl.constexpr, BLOCK_H: tl.constexpr):
    """Load one layer of a fused model step: the whole weight matrix as one [BLOCK_H, BLOCK_H]
    tile (K-major storage, zero beyond K and N; W16A8, W16A16: both limbs), scales, limb offsets, bias and
    the output column mask. Issued before the step computes anything, so that every layer's loads
    are in flight together with the input's."""
    offs_k = tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_H)
    nmask = offs_n < N
    wmask = (offs_k[:, None] < K) & nmask[None, :]
    w_off = offs_n[None, :].to(tl.int64) * stride_w + offs_k[:, None]
    w = tl.load(w_ptr + w_off, mask=wmask, other=0)
    if SCHEME == 1 or SCHEME == 3:
        w2 = tl.load(w2_ptr + w_off, mask=wmask, other=0)
        b_offset = tl.load(o_ptr + offs_n, mask=nmask, other=0.0)
    else:
        w2 = w
        b_offset = tl.zeros([BLOCK_H], dtype=tl.float32)
    b_scale = tl.load(s_ptr + offs_n, mask=nmask, other=0.0)
    bias = tl.load(b_ptr + offs_n, mask=nmask, other=0.0)
    return w, w2, b_scale, b_offset, bias, nmask


@triton.jit
def _fused_layer(h, kmask, w, w2, b_scale, b_offset, bias, nmask,
                 SCHEME: tl.constexpr, GELU: tl.constexpr, FAST_CVT: tl.constexpr):
    """One Linear (+ GELU) of a fused model step on a register tile: float32 h [BLOCK_M, BLOCK_H]
    for the int8 schemes (quantized here), float16 h for W8A16, with the layer's loaded weights
    (:func:`_fused_weights`). Returns float32 outputs, zero in the padding columns."""
    if SCHEME == 2:
        if FAST_CVT:
            wf = _int8x4_to_float16(w)
        else:
            wf = w.to(tl.float16)
        acc = tl.dot(h, wf, out_dtype=tl.float32)
        y = acc * b_scale[None, :]
        y = y + bias[None, :]
        if GELU:
            y = _gelu(y)
    elif SCHEME == 3:
        q, a_scale, rowsum = _rows_quantized(h, kmask, ACT16_MAX)
        hi, lo = _act_limbs(q)
        acc = tl.dot(hi, w, out_dtype=tl.int32)
        acc2 = tl.dot(hi, w2, out_dtype=tl.int32)
        acc2 = tl.dot(lo, w, acc2, out_dtype=tl.int32)
        acc3 = tl.dot(lo, w2, out_dtype=tl.int32)
        y = _int8_epilogue(acc, acc2, acc3, a_scale, rowsum, b_scale, b_offset, bias, True, True, GELU)
    else:
        q, a_scale, rowsum = _rows_quantized(h, kmask, 127.0)
        q = q.to(tl.int8)
        acc = tl.dot(q, w, out_dtype=tl.int32)
        if SCHEME == 1:
            acc2 = tl.dot(q, w2, out_dtype=tl.int32)
        else:
            acc2 = acc
        y = _int8_epilogue(acc, acc2, acc2, a_scale, rowsum, b_scale, b_offset, bias, SCHEME == 1, False, GELU)
    return tl.where(nmask[None, :], y, 0.0)


@triton.jit
def mlp3_fused_kernel(
    x_ptr, gamma_ptr, beta_ptr,          # float32 input rows (M x K0); LayerNorm weight and bias (K0,)
    w1_ptr, w1b_ptr, s1_ptr, o1_ptr, b1_ptr,   # per layer: int8 weights (N x K, K contiguous; W16A8,
    w2_ptr, w2b_ptr, s2_ptr, o2_ptr, b2_ptr,   # W16A16: hi and lo limbs), float32 scale, limb offset, bias
    w3_ptr, w3b_ptr, s3_ptr, o3_ptr, b3_ptr,
    y_ptr,                               # float32 outputs (M x N)
    M, K0, H1, H2, N,
    stride_xm, stride_w1, stride_w2, stride_w3, stride_ym,
    ln_eps,
    SCHEME: tl.constexpr,                # 0: W8A8, 1: W16A8 (limbs), 2: W8A16, 3: W16A16 (limbs x limbs)
    HAS_LN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
    FAST_CVT: tl.constexpr,
):
    """A whole 3-layer model step, ``[LayerNorm] -> Linear -> GELU -> Linear -> GELU -> Linear``, for
    BLOCK_M tokens a program, every width at most BLOCK_H: the input is read once, activations stay
    in registers, the output is written once. The kernels of the layer-by-layer step, operation for
    operation (act_quant_kernel / layernorm_kernel, then quant_gemm_kernel or w8a16_gemm_kernel per
    layer); only the LayerNorm's tree sums run in another order. Outputs are float32 (the caller
    rounds to float16 / bfloat16 as a kernel's store would: to nearest even)."""
    pid = tl.program_id(axis=0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_h = tl.arange(0, BLOCK_H)
    mmask = offs_m < M
    kmask = offs_h < K0
    w1, w1b, s1, o1, b1, n1 = _fused_weights(w1_ptr, w1b_ptr, s1_ptr, o1_ptr, b1_ptr, H1, K0, stride_w1,
                                             SCHEME, BLOCK_H)
    w2, w2b, s2, o2, b2, n2 = _fused_weights(w2_ptr, w2b_ptr, s2_ptr, o2_ptr, b2_ptr, H2, H1, stride_w2,
                                             SCHEME, BLOCK_H)
    w3, w3b, s3, o3, b3, n3 = _fused_weights(w3_ptr, w3b_ptr, s3_ptr, o3_ptr, b3_ptr, N, H2, stride_w3,
                                             SCHEME, BLOCK_H)
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_h[None, :],
                mask=mmask[:, None] & kmask[None, :], other=0.0)
    if HAS_LN:
        x = _layernorm_rows(x, kmask, K0, ln_eps, gamma_ptr, beta_ptr, offs_h)
    if SCHEME == 2:
        h = x.to(tl.float16)
    else:
        h = x
    h = _fused_layer(h, kmask, w1, w1b, s1, o1, b1, n1, SCHEME, True, FAST_CVT)
    if SCHEME == 2:
        h = h.to(tl.float16)
    h = _fused_layer(h, n1, w2, w2b, s2, o2, b2, n2, SCHEME, True, FAST_CVT)
    if SCHEME == 2:
        h = h.to(tl.float16)
    y = _fused_layer(h, n2, w3, w3b, s3, o3, b3, n3, SCHEME, False, FAST_CVT)
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_h[None, :], y,
             mask=mmask[:, None] & n3[None, :])


# ---------------------------------------------------------------------------------------------------
# Ahead-of-time variants for the bundle builder.
# ---------------------------------------------------------------------------------------------------

_OUT_TYPES = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16"}

# Per scheme, (name, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), smallest first. Which tile
# serves an m x n launch is tickgpu.quant._gpu.gemm_tile's rule (the grid it makes against the SM
# count). Chosen by scripts/quant-sweep on an H200, device time of graph-replayed launches:
# - "s", the per-tick tile (benchmarks/results/h200-2026-11-30-d/quant-sweep.json): narrow
#   32-channel tiles with a deep K step spread M <= 16 over 4x more programs, so the int8 weight
#   bytes stream at full bandwidth (W8A8 1.45-1.6x fp16 at N = K = 4096). W8A16 with the fast
#   widening (FAST_CVT), 16 x 32 x 256, 4 stages: at M = 1 / 16, N = K = 4096, 8.2 / 8.6 us against
#   cuBLAS fp16's 9.5 / 10.1 with both weight sets in L2 (split-K, more stages, and weights as the
#   MMA's register operand were no faster, h200-2026-11-30-e/w8a16-probe.json).
# - "m", "w", "l" for batches beyond a tick (h200-2026-11-30-j/quant-sweep-mid.json, M = 32-4,096
#   at N = K = 256-4,096, every candidate against every shape). With one large tile above M = 64,
#   as before, M = 65-512 left most SMs idle (128 x 256 tiles at M = 128, N = 4096: 16 programs,
#   W8A8 32.3 us against the 64 x 64 tile's 9.3 and cuBLAS fp16's 13.2). Per scheme the kept tiles
#   are the ones that were fastest somewhere; 128 x 128 x 64 with 4 warps beat the former W8A8 large
#   tile (128 x 256 x 128, 8 warps) at every shape, 4096^3 included (122 against 133 us). W8A16
#   keeps its large tile (128 x 256 x 64): 64 x 256 x 64 was faster as the sweep compiled it (81
#   against 85 us at M = 1,024, N = K = 4096) but not as this bundle does (121 us in the quant suite,
#   h200-2026-11-30-j/quant-*-154803.json), where the other new tiles ran as the sweep had them.
GEMM_TILES = {
    "w8a8": (("s", 16, 32, 256, 4, 3), ("m", 64, 64, 128, 4, 4), ("w", 64, 128, 128, 4, 3),
             ("l", 128, 128, 64, 4, 4)),
    "w16a8": (("s", 16, 32, 256, 4, 3), ("m", 64, 64, 128, 4, 4), ("l", 128, 128, 128, 8, 3)),
    # W16A16 holds three accumulators a tile. Swept on an H200 (h200-2026-11-30-l/quant-sweep-w16a16.json,
    # 14 candidates at M = 1-4,096): 64 x 128 x 64 on 4 warps won from two waves of programs (417 us
    # at 4096^3, 31 us at 4096 x 1024^2); on 8 warps the same tile took 4x as long (1,770 us).
    "w16a16": (("s", 16, 32, 256, 4, 3), ("m", 64, 64, 128, 4, 3), ("w", 64, 128, 64, 4, 3)),
    "w8a16": (("s", 16, 32, 256, 4, 4), ("m", 64, 64, 128, 4, 3), ("w", 64, 128, 64, 4, 3),
              ("l", 128, 256, 64, 8, 3)),
}
# BLOCK_K of the row kernels, and whether the row is read once (SINGLE, for K <= BLOCK_K): rows up
# to 64 and up to 1,024 elements in one read, longer ones in chunks of 512 (a read a pass).
ROW_BLOCKS = ((64, 1), (1024, 1), (512, 0))

# What an aligned GEMM variant assumes besides 16-byte aligned pointers: these int parameters are
# multiples of 16, so every row of A and B starts 16-byte aligned and the K mask is uniform over
# groups of 16 (vector loads, cp.async / TMA-friendly tiles). Without them Triton must load bytes.
GEMM_MULTIPLE_OF_16 = ("K", "stride_am", "stride_bn")


def _variant(name, kernel, signature, constexprs, num_warps, num_stages, dtype, grid, launch,
             aligned16=False):
    block_m = constexprs.get("BLOCK_M") if grid == "tiles" else None
    block_n = constexprs.get("BLOCK_N") if grid == "tiles" else None
    return {
        "variant": name,
        "family": "quant",
        "kernel": kernel,
        "signature": dict(signature),
        "constexprs": dict(constexprs),
        "num_warps": num_warps,
        "num_stages": num_stages,
        # the epilogue must stay one IEEE operation at a time to match the NumPy reference
        "options": {"enable_fp_fusion": False},
        "dtype": dtype,
        # "rows": grid (M, 1, 1); "tiles": (cdiv(M, block_m) * cdiv(N, block_n), 1, 1)
        "grid": grid,
        "block_m": block_m,
        "block_n": block_n,
        "aligned16": aligned16,
        "multiple_of_16": GEMM_MULTIPLE_OF_16 if aligned16 else (),
        "launch": launch,
    }


def divisibility_attrs(v: dict) -> dict:
    """Triton ``ASTSource`` attrs of variant ``v``: ``tt.divisibility`` 16 on what it assumes aligned."""
    if not v["aligned16"]:
        return {}
    params = list(v["signature"])
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(params)
            if v["signature"][name].startswith("*") or name in v["multiple_of_16"]}


def _act_quant_variants():
    sig = {
        "x_ptr": "*fp32", "gamma_ptr": "*fp32", "beta_ptr": "*fp32",
        "xq_ptr": "*i8", "scale_ptr": "*fp32", "rowsum_ptr": "*i32",
        "M": "i32", "K": "i32", "stride_xm": "i32", "stride_qm": "i32", "ln_eps": "fp32",
        "HAS_LN": "constexpr", "BLOCK_K": "constexpr", "SINGLE": "constexpr", "PDL": "constexpr",
    }
    sig["A16"] = "constexpr"
    for a16 in (0, 1):
        for has_ln in (0, 1):
            for bk, single in ROW_BLOCKS:
                yield _variant(f"quant_act{'16' if a16 else ''}{'_ln' if has_ln else ''}_k{bk}", act_quant_kernel,
                               sig, {"HAS_LN": has_ln, "BLOCK_K": bk, "SINGLE": single, "PDL": 0, "A16": a16},
                               4 if bk > 64 else 1, 1, "f32", "rows",
                               "one program per row; BLOCK_K = 64 if K <= 64, 1024 if K <= 1024, else 512; "
                               "act16: int16 codes as two int8 limbs (W16A16)")


def _gemm_variants():
    # Always aligned: the caller pads K (and the row strides of A and B) to a multiple of 16 with
    # zero weights, which adds nothing to the integer sums whatever the padding of A holds.
    for scheme, limbs, a16 in (("w8a8", 0, 0), ("w16a8", 1, 0), ("w16a16", 1, 1)):
        for gelu in (0, 1):
            for out, ptr in _OUT_TYPES.items():
                for tile, bm, bn, bk, warps, stages in GEMM_TILES[scheme]:
                    sig = {
                        "a_ptr": "*i8", "a_scale_ptr": "*fp32", "a_rowsum_ptr": "*i32",
                        "b_ptr": "*i8", "b2_ptr": "*i8", "b_scale_ptr": "*fp32", "b_offset_ptr": "*fp32",
                        "bias_ptr": "*fp32", "c_ptr": ptr,
                        "M": "i32", "N": "i32", "K": "i32",
                        "stride_am": "i32", "stride_bn": "i32", "stride_cm": "i32",
                        "LIMBS": "constexpr", "GELU": "constexpr", "BLOCK_M": "constexpr",
                        "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr",
                        "PDL": "constexpr", "A16": "constexpr",
                    }
                    name = f"quant_gemm_{scheme}{'_gelu' if gelu else ''}_{out}_{tile}"
                    yield _variant(name, quant_gemm_kernel, sig,
                                   {"LIMBS": limbs, "GELU": gelu, "BLOCK_M": bm, "BLOCK_N": bn,
                                    "BLOCK_K": bk, "GROUP_M": 8, "PDL": 0, "A16": a16}, warps, stages, out, "tiles",
                                   "tile by tickgpu.quant._gpu.gemm_tile; K padded to a multiple of 16",
                                   aligned16=True)


def _w8a16_variants():
    for gelu in (0, 1):
        for out, ptr in _OUT_TYPES.items():
            for tile, bm, bn, bk, warps, stages in GEMM_TILES["w8a16"]:
                for aligned in (True, False):
                    sig = {
                        "a_ptr": "*fp16", "b_ptr": "*i8", "b_scale_ptr": "*fp32", "bias_ptr": "*fp32",
                        "c_ptr": ptr, "M": "i32", "N": "i32", "K": "i32",
                        "stride_am": "i32", "stride_bn": "i32", "stride_cm": "i32",
                        "GELU": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                        "BLOCK_K": "constexpr", "GROUP_M": "constexpr", "FAST_CVT": "constexpr",
                        "PDL": "constexpr",
                    }
                    name = f"quant_w8a16{'_gelu' if gelu else ''}_{out}_{tile}{'_a16' if aligned else ''}"
                    yield _variant(name, w8a16_gemm_kernel, sig,
                                   {"GELU": gelu, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                                    "FAST_CVT": 1, "PDL": 0},
                                   warps, stages, out, "tiles",
                                   "tile by tickgpu.quant._gpu.gemm_tile; '_a16' where K and the row strides "
                                   "of A and B are multiples of 16", aligned16=aligned)


def _layernorm_variants():
    for out in ("f16", "f32"):
        for bk, single in ROW_BLOCKS:
            sig = {
                "x_ptr": "*fp32", "gamma_ptr": "*fp32", "beta_ptr": "*fp32", "y_ptr": _OUT_TYPES[out],
                "M": "i32", "K": "i32", "stride_xm": "i32", "stride_ym": "i32", "ln_eps": "fp32",
                "BLOCK_K": "constexpr", "SINGLE": "constexpr", "PDL": "constexpr",
            }
            yield _variant(f"quant_layernorm_{out}_k{bk}", layernorm_kernel, sig,
                           {"BLOCK_K": bk, "SINGLE": single, "PDL": 0},
                           4 if bk > 64 else 1, 1, out, "rows", "one program per row")


# The fused 3-layer model step (mlp3_fused_kernel): (scheme name, SCHEME code, LayerNorm options);
# W8A16 models without a LayerNorm read float16 input, which this kernel does not take.
MLP3_SCHEMES = (("w8a8", 0, (0, 1)), ("w16a8", 1, (0, 1)), ("w8a16", 2, (1,)), ("w16a16", 3, (0, 1)))
MLP3_BLOCK_M = 16
# BLOCK_H: the widest of a model's in, hidden and out features. Measured on an H200 against the
# layer-by-layer graph, same process (benchmarks/results/h200-2026-11-30-h/fused-ab-*.json): a graph
# replay 4.1-7.4 us shorter at width 32 and 0.1-4.1 us at 64; at 128 it was 3 us longer for W8A16
# at one row and 1.1-4.1 us for W16A8, and at 256 (each program streaming the 64 KB weight tiles
# through one SM) twice as long.
MLP3_WIDTHS = (32, 64)
MLP3_MULTIPLE_OF_16 = ("stride_w1", "stride_w2", "stride_w3")


def mlp3_variant_name(scheme: str, layernorm: bool, width: int) -> str:
    return f"quant_mlp3_{scheme}{'_ln' if layernorm else ''}_h{width}"


def _mlp3_variants():
    sig = {"x_ptr": "*fp32", "gamma_ptr": "*fp32", "beta_ptr": "*fp32"}
    for i in (1, 2, 3):
        sig.update({f"w{i}_ptr": "*i8", f"w{i}b_ptr": "*i8", f"s{i}_ptr": "*fp32", f"o{i}_ptr": "*fp32",
                    f"b{i}_ptr": "*fp32"})
    sig.update({"y_ptr": "*fp32", "M": "i32", "K0": "i32", "H1": "i32", "H2": "i32", "N": "i32",
                "stride_xm": "i32", "stride_w1": "i32", "stride_w2": "i32", "stride_w3": "i32",
                "stride_ym": "i32", "ln_eps": "fp32",
                "SCHEME": "constexpr", "HAS_LN": "constexpr", "BLOCK_M": "constexpr", "BLOCK_H": "constexpr",
                "FAST_CVT": "constexpr"})
    for scheme, code, lns in MLP3_SCHEMES:
        for ln in lns:
            for width in MLP3_WIDTHS:
                v = _variant(mlp3_variant_name(scheme, bool(ln), width), mlp3_fused_kernel, sig,
                             {"SCHEME": code, "HAS_LN": ln, "BLOCK_M": MLP3_BLOCK_M, "BLOCK_H": width,
                              "FAST_CVT": 1}, 4, 1, "f32", "tiles",
                             "a 3-layer model step of up to 64 tokens (a graph step) whose widths are all "
                             "at most BLOCK_H: the narrowest that fits", aligned16=True)
                # one program per 16 tokens: N <= BLOCK_H makes the tile rule's column count 1
                v["block_n"] = width
                v["multiple_of_16"] = MLP3_MULTIPLE_OF_16
                yield v


# The CUDA C W8A16 kernel for M <= 32 (csrc/cuda/w8a16.cu), built by nvcc: (tile name, most rows,
# MMA token tiles MT, warps, chunks loaded per warp before use). Each block owns 16 output channels
# and 8 * MT tokens; its warps split K. Chosen on an H200 (benchmarks/results/h200-2026-11-30-f/
# w8a16cu-probe.json: of 54 configurations of MT x channels per warp x warps x group, 51 built):
# at N = K = 4096, M = 1 / 8 / 16, 5.1 / 5.5 / 6.9 us with the weights in L2 and 6.9 / 7.0 / 8.1 us streamed from
# memory, against cuBLAS fp16's 9.3-9.6 / 13.5-13.7 us and this file's tile kernel's 8.1-8.3 /
# 9.2-9.3 us. "m32" (h200-2026-11-30-j/w8a16-mt.json, 7 configurations of 4-8 token tiles): at
# M = 17 / 24 / 32, N = K = 4096, 8.9 / 8.9 / 9.9 us in L2, against the tile kernel's 11.3-11.5 and
# cuBLAS fp16's 10.0-10.6 (1.07-1.16x; the tile kernel was slower than fp16 there); at N = K = 1024
# and 256, 2.4-3.7 us against fp16's 2.7-3.8. Six and eight token tiles were slower than fp16.
# tickgpu.quant._gpu.W8A16_SMALL_TILES holds the same tiles (a test says so).
W8A16_SMALL = (("m8", 8, 1, 16, 2), ("m16", 16, 2, 16, 1), ("m32", 32, 4, 8, 1))
W8A16_SMALL_SOURCE = "csrc/cuda/w8a16.cu"
# (A form of it reading a model's float32 input through the LayerNorm, one launch fewer a step,
# was slower: the input lives in mapped host memory and every block read it across PCIe three
# times; benchmarks/results/h200-2026-11-30-f/w8a16-ln-ab.json.)
W8A16_SMALL_ENTRY = "tg_w8a16_small_kernel"


def w8a16_small_variants():
    """The CUDA C small-batch W8A16 variants: name, entry, nvcc -D macros, tile, warps, output type."""
    for gelu in (0, 1):
        for out_code, out in enumerate(_OUT_TYPES):
            for tile, rows, mt, warps, group in W8A16_SMALL:
                yield {
                    "variant": f"quant_w8a16{'_gelu' if gelu else ''}_{out}_{tile}",
                    "entry": W8A16_SMALL_ENTRY,
                    "defines": {"TG_W8A16_MT": mt, "TG_W8A16_OUT": out_code, "TG_W8A16_GELU": gelu,
                                "TG_W8A16_WARPS": warps, "TG_W8A16_GROUP": group, "TG_W8A16_NT": 1},
                    "num_warps": warps, "dtype": out, "block_m": rows, "block_n": 16,
                    # b 16-byte aligned with rows a multiple of 16 bytes apart (the kernel's 16-byte
                    # weight loads); the activations need neither (checked at run time, element
                    # loads otherwise), but every pointer the plans pass is 16-byte aligned.
                    "multiple_of_16": ("stride_bn",),
                }


QUANT_VARIANTS: list[dict] = [*_act_quant_variants(), *_gemm_variants(), *_w8a16_variants(),
                              *_layernorm_variants(), *_mlp3_variants()]
"""Every specialization the bundle holds: variant name, kernel, Triton signature (argument name ->
type, constexprs marked "constexpr"), constexpr values, num_warps, num_stages, compile options, the
manifest's dtype (output element type; float32 input for the activation kernel), the grid rule
("rows" or "tiles" with block_m x block_n output tiles), the alignment promise (``aligned16``: every
pointer 16-byte aligned and the ``multiple_of_16`` parameters multiples of 16; see
:func:`divisibility_attrs`), and when the launcher picks it."""
