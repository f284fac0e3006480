import triton, triton.language as tl
import sys; sys.path.insert(0, "src")
from w8a16 import _gelu
from w8a16 import _i8x4_to_f16


@triton.jit
def w8a16_swapped(a_ptr, b_ptr, b_scale_ptr, bias_ptr, c_ptr,
                  M, N, K, stride_am, stride_bn, stride_cm,
                  PREFETCH: tl.constexpr, GELU: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C^T tile [BLOCK_N, BLOCK_M] = W tile [BLOCK_N, BLOCK_K] @ X^T tile [BLOCK_K, BLOCK_M]:
    # the converted weights are wgmma's register operand, the activations its shared one.
    pid_n = tl.program_id(axis=0)
    pid_m = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = b_ptr + offs_n[:, None].to(tl.int64) * stride_bn + offs_k[None, :]
    x_ptrs = a_ptr + offs_m[None, :].to(tl.int64) * stride_am + offs_k[:, None]
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if PREFETCH:
        w = tl.load(w_ptrs, mask=mask_n[:, None] & (offs_k < K)[None, :], other=0)
        for k0 in range(0, K, BLOCK_K):
            w_next = tl.load(w_ptrs + BLOCK_K, mask=mask_n[:, None] & (offs_k < K - k0 - BLOCK_K)[None, :], other=0)
            x = tl.load(x_ptrs, mask=(offs_k < K - k0)[:, None] & mask_m[None, :], other=0.0)
            acc = tl.dot(_i8x4_to_f16(w), x, acc, out_dtype=tl.float32)
            w = w_next
            w_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
    else:
        for k0 in range(0, K, BLOCK_K):
            mask_k = offs_k < K - k0
            w = tl.load(w_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0)
            x = tl.load(x_ptrs, mask=mask_k[:, None] & mask_m[None, :], other=0.0)
            acc = tl.dot(_i8x4_to_f16(w), x, acc, out_dtype=tl.float32)
            w_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
    b_scale = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
    bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
    y = acc * b_scale[:, None] + bias[:, None]
    if GELU:
        y = _gelu(y)
    c_ptrs = c_ptr + offs_m[None, :].to(tl.int64) * stride_cm + offs_n[:, None]
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=mask_n[:, None] & mask_m[None, :])
