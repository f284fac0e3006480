"""The NumPy integer reference for quantized linear layers: the semantics the GPU kernels reproduce.

Integer products are accumulated exactly (int64 here, int32 on the GPU: the K limit below guarantees
the two agree). The epilogue is float32, one IEEE operation at a time in the order written, with no
fused multiply-add (the GPU kernels are compiled with floating-point fusion off), so the GPU result
equals this one bit for bit, except where GELU's ``erf`` differs by an ulp or two between libdevice and
the host library, and for W8A16, whose float32 sum order on the tensor cores is not specified.

Epilogues (m = token, n = output channel; ``f32()`` rounds to nearest float32):

- W8A8:  ``acc = sum_k xq[m,k] * wq[n,k]``;
  ``y = f32(acc) * (s_x[m] * s_w[n]) + b[n]``
- W16A8 (limbs): ``acc_hi = sum_k xq*hi``, ``acc_lo = sum_k xq*lo``;
  ``t = f32(acc_hi) * 256 + f32(acc_lo)``; ``t = t + f32(128 - z_w[n]) * f32(rowsum[m])``;
  ``y = t * (s_x[m] * s_w[n]) + b[n]``. This is ``s_x s_w sum_k xq (q - z_w)`` because
  ``q = 256 hi + lo + 128``: the weight zero point and the limb offset fold into one row-sum term.
- W16A16 (limbs on both sides): activations ``xq = 256 xh + xl`` (int16 per token, see
  :mod:`tickgpu.quant.schemes`), weights as in W16A8; three int32 accumulators
  ``acc_hh = sum_k xh*hi``, ``acc_mid = sum_k (xh*lo + xl*hi)``, ``acc_ll = sum_k xl*lo``;
  ``t = f32(acc_hh) * 65536 + f32(acc_mid) * 256``; ``t = t + f32(acc_ll)``;
  ``t = t + f32(128 - z_w[n]) * f32(rowsum[m])``; ``y = t * (s_x[m] * s_w[n]) + b[n]``: again
  ``s_x s_w sum_k xq (q - z_w)``, with activation codes 257 times finer than W16A8's.
- W8A16: ``acc = sum_k f32(f16(x[m,k])) * wq[n,k]`` (each product exact in float32; the sum here
  in float64, then rounded); ``y = f32(acc) * s_w[n] + b[n]``.
- then optionally ``gelu(y) = 0.5 * y * (1 + erf(y * f32(1/sqrt(2))))``, then the output dtype.

int32 accumulation limit: ``|xq| <= 127`` and ``|wq|, |hi|, |lo| <= 128`` bound each product by
``127 * 128 = 16256``, so a K-long sum stays within int32 for ``K <= K_MAX = 132104``
(``floor((2**31 - 1) / 16256)``). Layers with larger K are refused at construction. W16A16's middle
accumulator adds two products a step, ``127 * 128 + 128 * 128 = 32640`` at most (a bound: the
codes reach 32512), its low one ``128 * 128``, and its row sums hold int16 codes (``32639 * K``):
``K <= K_MAX_A16 = 65793``. Two schemes that
look simpler would overflow far sooner, which is why they are not used: int8 x int16 products in
one int32 accumulator (``127 * 32768 * K`` overflows past K = 516), and folding the zero point into
the weights (``|q - z| <= 65535``: past K = 258).
"""
from __future__ import annotations

import math

import numpy as np

from tickgpu.quant.schemes import cast_output

INT32_MAX = 2**31 - 1
MAX_PRODUCT = 127 * 128
K_MAX = INT32_MAX // MAX_PRODUCT  # 132104
# W16A16: the middle accumulator's step xh*lo + xl*hi (127 * 128 + 128 * 128)
MAX_MID_PRODUCT = 127 * 128 + 128 * 128
K_MAX_A16 = INT32_MAX // MAX_MID_PRODUCT  # 65793

_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))


# -- argument checks of the public entry points: array-likes taken, shapes named -----------------------

def _real(v, name: str) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"{name}: must hold real numbers, got dtype {v.dtype}")
    return v


def _codes(a, name: str) -> np.ndarray:
    """An int8 code matrix, 2-D."""
    a = np.asarray(a)
    if a.dtype != np.int8:
        raise TypeError(f"{name}: must be int8 codes, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{name}: must be 2-D, got shape {a.shape}")
    return a


def _operands(lhs: dict, rhs: dict) -> tuple[int, int]:
    """(M, N) of 2-D operands lhs (M, K) and rhs (N, K), each side's matrices of one shape and K
    agreeing; ValueError naming the arguments and their shapes otherwise."""
    (a_name, a), *more_a = lhs.items()
    (b_name, b), *more_b = rhs.items()
    for name, other in more_a:
        if other.shape != a.shape:
            raise ValueError(f"{a_name}, {name}: must have one shape, got {a.shape} and {other.shape}")
    for name, other in more_b:
        if other.shape != b.shape:
            raise ValueError(f"{b_name}, {name}: must have one shape, got {b.shape} and {other.shape}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{a_name}, {b_name}: the reduction dimension K differs: shapes {a.shape} (M, K) "
                         f"and {b.shape} (N, K)")
    return a.shape[0], b.shape[0]


def _vector(v, name: str, n: int, per: str) -> np.ndarray:
    """A real vector of shape (n,), one value per token or output channel (never broadcast)."""
    v = _real(v, name)
    if v.shape != (n,):
        raise ValueError(f"{name}: must have shape ({n},), one value per {per}, got shape {v.shape}")
    return v


def _accumulators(accs: dict) -> tuple[int, int]:
    """(M, N) of 2-D accumulators of one shape."""
    (name0, a0), *rest = accs.items()
    if a0.ndim != 2:
        raise ValueError(f"{name0}: must be 2-D (M, N), got shape {a0.shape}")
    for name, a in rest:
        if a.shape != a0.shape:
            raise ValueError(f"{name0}, {name}: must have one shape, got {a0.shape} and {a.shape}")
    return a0.shape


def check_k(k: int, what: str = "in_features", *, act16: bool = False) -> None:
    """Raise ValueError if a reduction of length k could overflow an int32 accumulator (`act16`:
    W16A16's, whose limit is K_MAX_A16)."""
    if act16 and k > K_MAX_A16:
        raise ValueError(
            f"{what}: {k} exceeds K_MAX_A16 = {K_MAX_A16}, past which W16A16's middle limb sums can "
            f"overflow int32 ((127 * 128 + 128 * 128) * K > 2**31 - 1); split the layer along K"
        )
    if k > K_MAX:
        raise ValueError(
            f"{what}: {k} exceeds K_MAX = {K_MAX}, past which int8 x int8 sums can overflow int32 "
            f"(127 * 128 * K > 2**31 - 1); split the layer along K"
        )


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is a test dependency, not a runtime one
        return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float32)
    return erf(x).astype(np.float32)


def gelu(y: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU in float32: ``0.5 * y * (1 + erf(y / sqrt(2)))``."""
    y = y.astype(np.float32, copy=False)
    return np.float32(0.5) * y * (np.float32(1.0) + _erf(y * _INV_SQRT2))


def int_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact ``a @ b.T`` of int8 matrices a (M, K) and b (N, K), as int32 (M, N).

    The sum is formed in int64; the K limit (:func:`check_k`) and the operands' own peaks (a sum
    that could pass int32 is refused) make the int32 result equal what an int32 accumulator
    computes, in any order.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"int_gemm: operands must be int8, got {a.dtype} and {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"int_gemm: shapes {a.shape} and {b.shape} do not match as (M, K), (N, K)")
    k = a.shape[1]
    check_k(k)
    # K_MAX assumes one side within +-127; two -128 operands (W16A16's lo x lo) make 128 * 128 a
    # step, which only K past INT32_MAX // 16384 = 131071 can overflow: look at the peaks there only
    if k > INT32_MAX // (128 * 128):
        peak = int(np.abs(a.astype(np.int16)).max(initial=0)) * int(np.abs(b.astype(np.int16)).max(initial=0))
        if peak * k > INT32_MAX:
            raise ValueError(f"int_gemm: K = {k} with products up to {peak} could overflow int32; "
                             f"split the layer along K")
    acc = a.astype(np.int64) @ b.astype(np.int64).T
    return acc.astype(np.int32)


def _finish(y: np.ndarray, bias, apply_gelu: bool, out_dtype: str) -> np.ndarray:
    """Bias (None, or shape (N,) for y of shape (M, N)), GELU, cast."""
    if not isinstance(apply_gelu, (bool, np.bool_)):
        raise TypeError(f"apply_gelu: must be a bool, got {apply_gelu!r}")   # the string 'no' is true
    if bias is not None:
        y = y + _vector(bias, "bias", y.shape[1], "output channel").astype(np.float32)[None, :]
    if apply_gelu:
        y = gelu(y)
    return cast_output(y, out_dtype)


def epilogue_w8a8(acc, x_scale, w_scale, bias=None, *, apply_gelu=False, out_dtype="float32"):
    """Float32 epilogue of W8A8: ``f32(acc) * (s_x[m] * s_w[n]) + b[n]``, GELU, cast.

    ``acc`` (M, N), ``x_scale`` (M,), ``w_scale`` and ``bias`` (N,) (bias may be None); array-likes
    are taken. Raises ValueError naming the argument whose shape does not fit (nothing is
    broadcast), TypeError for values that are not real numbers."""
    acc = _real(acc, "acc")
    m, n = _accumulators({"acc": acc})
    x_scale = _vector(x_scale, "x_scale", m, "token")
    w_scale = _vector(w_scale, "w_scale", n, "output channel")
    with np.errstate(invalid="ignore", over="ignore"):
        scale = x_scale.astype(np.float32)[:, None] * w_scale.astype(np.float32)[None, :]
        y = acc.astype(np.float32) * scale
        return _finish(y, bias, apply_gelu, out_dtype)


def epilogue_w16a8(acc_hi, acc_lo, rowsum, x_scale, w_scale, limb_offset, bias=None, *,
                   apply_gelu=False, out_dtype="float32"):
    """Float32 epilogue of the limb GEMM (see the module docstring for the exact order).

    ``acc_hi``, ``acc_lo`` (M, N); ``rowsum``, ``x_scale`` (M,); ``w_scale``, ``limb_offset`` and
    ``bias`` (N,) (bias may be None); array-likes are taken. Raises ValueError naming the argument
    whose shape does not fit (nothing is broadcast), TypeError for values that are not real numbers.

    Two limits of the float32 epilogue, which the GPU kernels share (the arithmetic is the
    contract, so they are documented rather than changed):

    - The combined scale ``s_x[m] * s_w[n]`` is formed in float32, so it underflows to 0 when
      both are tiny: inputs and weights both around 1e-20 have scales near 1e-22 each, whose
      product (1e-44) is below float32's smallest subnormal, and outputs around 1e-37 come out 0
      (W8A8 multiplies the same way but reaches further, as its codes' scales are 257 and 65534
      times larger).
    - The float32 terms are large where a weight row has one sign: its zero point sits at the end
      of the int16 grid, every weight's code is far from 128, and at large K the limb sums and
      the row-sum term reach about 1e13 and cancel, so float32's rounding of them adds error
      beyond the scheme's quantization error. Example: K = 16384, one nonzero weight in the row
      (all others 0, so codes -32768), activations 0.01 then all 1: W16A16 is 2% off, where
      float64 of the same integers is 0.12% off. Rows with weights of both signs keep the terms
      near the result and the epilogue's error near 1e-7 relative.
    """
    acc_hi, acc_lo = _real(acc_hi, "acc_hi"), _real(acc_lo, "acc_lo")
    m, n = _accumulators({"acc_hi": acc_hi, "acc_lo": acc_lo})
    rowsum = _vector(rowsum, "rowsum", m, "token")
    x_scale = _vector(x_scale, "x_scale", m, "token")
    w_scale = _vector(w_scale, "w_scale", n, "output channel")
    limb_offset = _vector(limb_offset, "limb_offset", n, "output channel")
    with np.errstate(invalid="ignore", over="ignore"):
        t = acc_hi.astype(np.float32) * np.float32(256.0) + acc_lo.astype(np.float32)
        t = t + limb_offset.astype(np.float32)[None, :] * rowsum.astype(np.float32)[:, None]
        scale = x_scale.astype(np.float32)[:, None] * w_scale.astype(np.float32)[None, :]
        y = t * scale
        return _finish(y, bias, apply_gelu, out_dtype)


def epilogue_w16a16(acc_hh, acc_mid, acc_ll, rowsum, x_scale, w_scale, limb_offset, bias=None, *,
                    apply_gelu=False, out_dtype="float32"):
    """Float32 epilogue of the limb x limb GEMM (see the module docstring for the exact order).

    ``acc_hh``, ``acc_mid``, ``acc_ll`` (M, N); ``rowsum``, ``x_scale`` (M,); ``w_scale``,
    ``limb_offset`` and ``bias`` (N,) (bias may be None); array-likes are taken. Raises ValueError
    naming the argument whose shape does not fit (nothing is broadcast), TypeError for values that
    are not real numbers. The limits of :func:`epilogue_w16a8`'s float32 arithmetic apply here too
    (the example given there is W16A16's).
    """
    acc_hh, acc_mid, acc_ll = _real(acc_hh, "acc_hh"), _real(acc_mid, "acc_mid"), _real(acc_ll, "acc_ll")
    m, n = _accumulators({"acc_hh": acc_hh, "acc_mid": acc_mid, "acc_ll": acc_ll})
    rowsum = _vector(rowsum, "rowsum", m, "token")
    x_scale = _vector(x_scale, "x_scale", m, "token")
    w_scale = _vector(w_scale, "w_scale", n, "output channel")
    limb_offset = _vector(limb_offset, "limb_offset", n, "output channel")
    with np.errstate(invalid="ignore", over="ignore"):
        t = acc_hh.astype(np.float32) * np.float32(65536.0) + acc_mid.astype(np.float32) * np.float32(256.0)
        t = t + acc_ll.astype(np.float32)
        t = t + limb_offset.astype(np.float32)[None, :] * rowsum.astype(np.float32)[:, None]
        scale = x_scale.astype(np.float32)[:, None] * w_scale.astype(np.float32)[None, :]
        y = t * scale
        return _finish(y, bias, apply_gelu, out_dtype)


def limb_accumulators(x_hi, x_lo, w_hi, w_lo):
    """W16A16's three int32 accumulators ``(acc_hh, acc_mid, acc_ll)`` of int8 limb matrices (M, K),
    (N, K), exact (the K_MAX_A16 limit makes int32 hold them in any order). Activation hi limbs
    are those of :func:`~tickgpu.quant.schemes.split_act_limbs`, within +-127: limbs whose middle
    sums could pass int32 at this K (-128 there, past K = 65535) raise ValueError."""
    x_hi, x_lo = _codes(x_hi, "x_hi"), _codes(x_lo, "x_lo")
    w_hi, w_lo = _codes(w_hi, "w_hi"), _codes(w_lo, "w_lo")
    _operands({"x_hi": x_hi, "x_lo": x_lo}, {"w_hi": w_hi, "w_lo": w_lo})
    k = x_hi.shape[1]
    check_k(k, act16=True)
    # K_MAX_A16 assumes activation hi limbs within +-127 (split_act_limbs never makes -128): a
    # -128 there makes the middle step 2 * 128 * 128, which K past INT32_MAX // 32768 = 65535 can
    # overflow, so look at the peaks there only
    if k > INT32_MAX // (2 * 128 * 128):
        peaks = [int(np.abs(v.astype(np.int16)).max(initial=0)) for v in (x_hi, x_lo, w_hi, w_lo)]
        step = peaks[0] * peaks[3] + peaks[1] * peaks[2]
        if step * k > INT32_MAX:
            raise ValueError(f"limb_accumulators: K = {k} with middle-limb steps up to {step} (x_hi up to "
                             f"{peaks[0]}, past split_act_limbs' 127) could overflow int32; split the "
                             "layer along K")
    hh = int_gemm(x_hi, w_hi)
    mid = int_gemm(x_hi, w_lo).astype(np.int64) + int_gemm(x_lo, w_hi)
    return hh, mid.astype(np.int32), int_gemm(x_lo, w_lo)


def linear_w16a16(x_hi, x_lo, x_scale, rowsum, w_hi, w_lo, w_scale, limb_offset, bias=None, *,
                  apply_gelu=False, out_dtype="float32"):
    """W16A16 linear layer on limbs: int16 activations and weights as int8 limbs, four int8 GEMMs
    in three accumulators, combined in float32 (see :func:`epilogue_w16a8` for its limits).

    ``x_hi``, ``x_lo`` int8 (M, K); ``w_hi``, ``w_lo`` int8 (N, K); ``x_scale``, ``rowsum`` (M,);
    ``w_scale``, ``limb_offset``, ``bias`` (N,). Raises ValueError naming the argument whose shape
    does not fit (nothing is broadcast), TypeError for codes that are not int8.
    """
    hh, mid, ll = limb_accumulators(x_hi, x_lo, w_hi, w_lo)
    return epilogue_w16a16(hh, mid, ll, rowsum, x_scale, w_scale, limb_offset, bias,
                           apply_gelu=apply_gelu, out_dtype=out_dtype)


def linear_w8a8(xq, x_scale, wq, w_scale, bias=None, *, apply_gelu=False, out_dtype="float32"):
    """W8A8 linear layer: int8 activations (M, K) x int8 weights (N, K) -> (M, N).

    ``x_scale`` (M,), ``w_scale`` and ``bias`` (N,) (bias may be None); array-likes are taken.
    Raises ValueError naming the argument whose shape does not fit (nothing is broadcast),
    TypeError for codes that are not int8.
    """
    xq, wq = _codes(xq, "xq"), _codes(wq, "wq")
    _operands({"xq": xq}, {"wq": wq})
    return epilogue_w8a8(int_gemm(xq, wq), x_scale, w_scale, bias,
                         apply_gelu=apply_gelu, out_dtype=out_dtype)


def linear_w16a8(xq, x_scale, rowsum, w_hi, w_lo, w_scale, limb_offset, bias=None, *,
                 apply_gelu=False, out_dtype="float32"):
    """W16A8 linear layer on limbs: two int8 GEMMs sharing the activations, combined in float32
    (see :func:`epilogue_w16a8` for its limits).

    ``xq`` int8 (M, K); ``w_hi``, ``w_lo`` int8 (N, K); ``x_scale``, ``rowsum`` (M,); ``w_scale``,
    ``limb_offset``, ``bias`` (N,). Raises ValueError naming the argument whose shape does not fit
    (nothing is broadcast), TypeError for codes that are not int8.
    """
    xq, w_hi, w_lo = _codes(xq, "xq"), _codes(w_hi, "w_hi"), _codes(w_lo, "w_lo")
    _operands({"xq": xq}, {"w_hi": w_hi, "w_lo": w_lo})
    acc_hi = int_gemm(xq, w_hi)
    acc_lo = int_gemm(xq, w_lo)
    return epilogue_w16a8(acc_hi, acc_lo, rowsum, x_scale, w_scale, limb_offset, bias,
                          apply_gelu=apply_gelu, out_dtype=out_dtype)


def linear_w8a16(x, wq, w_scale, bias=None, *, apply_gelu=False, out_dtype="float32"):
    """Weight-only W8A16: fp16 activations (M, K) x int8 weights (N, K), float32 accumulation.

    ``x`` is rounded to float16 first (values past 65504 become inf, as on the GPU). Products of a
    float16 and an int8 value are exact in float32; the sum is taken in float64 and rounded once.
    ``w_scale`` and ``bias`` have shape (N,) (bias may be None); array-likes are taken. Raises
    ValueError naming the argument whose shape does not fit (nothing is broadcast), TypeError for
    weights that are not int8 or activations that are not real numbers.
    """
    x = _real(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x: must be 2-D (M, K), got shape {x.shape}")
    wq = _codes(wq, "wq")
    _, n = _operands({"x": x}, {"wq": wq})
    w_scale = _vector(w_scale, "w_scale", n, "output channel")
    check_k(wq.shape[1])
    with np.errstate(invalid="ignore", over="ignore"):
        x16 = x.astype(np.float32).astype(np.float16)
        acc = (x16.astype(np.float64) @ wq.astype(np.float64).T).astype(np.float32)
        y = acc * w_scale.astype(np.float32)[None, :]
        return _finish(y, bias, apply_gelu, out_dtype)


def linear_float(x, weight, bias=None, *, dtype="float32", apply_gelu=False, out_dtype="float32"):
    """Float baseline: float32, or float16 operands with float32 accumulation (as tensor cores do).

    ``x`` (M, K), ``weight`` (N, K), ``bias`` (N,) or None; ValueError naming the argument whose
    shape does not fit."""
    x, weight = _real(x, "x"), _real(weight, "weight")
    if x.ndim != 2 or weight.ndim != 2:
        raise ValueError(f"x, weight: must be 2-D (M, K) and (N, K), got shapes {x.shape} and {weight.shape}")
    _operands({"x": x}, {"weight": weight})
    with np.errstate(invalid="ignore", over="ignore"):
        x = x.astype(np.float32)
        w = weight.astype(np.float32)
        if dtype == "float16":
            x = x.astype(np.float16).astype(np.float32)
            w = w.astype(np.float16).astype(np.float32)
            y = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)
        elif dtype == "float32":
            y = x @ w.T
        else:
            raise ValueError(f"dtype: must be 'float32' or 'float16', got {dtype!r}")
        if bias is not None and dtype == "float16":
            bias = np.asarray(bias, np.float32).astype(np.float16).astype(np.float32)
        return _finish(y, bias, apply_gelu, out_dtype)
