"""Quantization schemes: how float weights and activations become integers, exactly.

Everything here is NumPy and defines the semantics that the GPU kernels reproduce. All scales are
float32; every step below names its precision so a kernel can match it bit for bit.

Weights (per output channel ``n`` of a weight matrix of shape (N, K), the layout of
``torch.nn.Linear.weight``: row n holds output channel n, the reduction dimension K is contiguous,
which is the K-major layout that Hopper's wgmma wants for its B operand):

- ``int8`` symmetric: ``a = max(max_k |W[n,k]|, EPS)``, ``s = f32(a / 127)``,
  ``q = clip(rint(W / s), -127, 127)``; ``W ~ s * q``. The code -128 is never produced, so
  ``|q| <= 127`` and negation is exact.
- ``int16`` asymmetric: ``lo = min(min_k W, 0)``, ``hi = max(max_k W, 0)`` (the range always
  holds 0, so 0.0 is exact and the zero point stays inside int16), ``s = f32(max(hi - lo, EPS) / 65534)``,
  ``z = clip(-32768 + rint(-lo / s), -32768, 32767)``, ``q = clip(rint(W / s) + z, -32768, 32767)``;
  ``W ~ s * (q - z)``. The quotients are taken in float64 with the float32 ``s``.
  On the tensor cores it runs as two int8 *limbs*: ``u = q + 32768``, ``hi = (u >> 8) - 128``,
  ``lo = (u & 255) - 128``, so that ``q = 256 * hi + lo + 128`` exactly, with hi, lo in [-128, 127].

Activations (per token, i.e. per row ``m`` of X of shape (M, K)), all float32:

- ``a = max(max_k |x[m,k]|, EPS)``, ``inv = 127 / a``, ``s = a / 127`` (each one correctly rounded
  float32 division), ``xq = clip(rint(x * inv), -127, 127)`` (one float32 multiply, round half to
  even), ``rowsum = sum_k xq`` (int32).
- A row holding NaN or +-inf gets ``xq = 0``, ``rowsum = 0`` and ``s = NaN``: its outputs come out
  NaN (the row is poisoned, not silently quantized); other rows are unaffected. The model API checks
  inputs first and raises by default (see :class:`tickgpu.quant.QuantLinear`).

Activations as int16, two int8 limbs (the ``w16a16`` scheme), per token, all float32:

- the same, with ``127`` replaced by ``ACT16_MAX = 32639`` (``= 127 * 257``): ``inv = 32639 / a``,
  ``s = a / 32639``, ``xq = clip(rint(x * inv), -32639, 32639)`` (int16), ``rowsum = sum_k xq``;
  the same NaN rows. ``32639`` rather than ``32767`` is the largest range whose codes split into
  two int8 limbs without an offset: ``hi = (xq + 128) >> 8`` (arithmetic shift) in [-127, 127],
  ``lo = xq - 256 * hi`` in [-128, 127], ``xq = 256 * hi + lo`` exactly. A code step is 1/32639 of
  the row's absmax, 257 times finer than int8's: this, not the weights, is what bounds W16A8's
  error (see :mod:`tickgpu.quant.gemm`).

``EPS = 2**-100`` (about 7.9e-31) floors every range so that no scale is ever 0, inf or NaN: it is far
below fp16's smallest subnormal (6e-8) and bf16's / fp32's smallest normal (1.2e-38) is far below it,
so ``127 / EPS`` and ``EPS / 127`` are normal float32 numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EPS = np.float32(2.0**-100)
INT8_MAX = 127
ACT16_MAX = 32639   # 127 * 257: int16 activation codes that split into int8 limbs without an offset
# Rows of int16 codes whose int32 row sum cannot wrap
ACT16_K_MAX = (2**31 - 1) // ACT16_MAX   # 65795
INT16_MIN, INT16_MAX = -32768, 32767
# Steps across a channel's range: one fewer than int16 has, so that rint(W / s) + z, two roundings,
# never lands past 32767 (which clipping would turn into an error of a whole step, not half).
INT16_STEPS = 65534

WEIGHT_FORMATS = ("int8", "int16")
F32_MAX = float(np.finfo(np.float32).max)


def check_real(x, name: str) -> np.ndarray:
    """``np.asarray(x)``, refused with TypeError naming ``name`` unless it holds real numbers (a
    float or integer dtype): complex values, bools, strings and objects are not silently cast."""
    x = np.asarray(x)
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"{name}: must be a real float array, got {x.dtype}")
    return x


def _rint(x: np.ndarray) -> np.ndarray:
    # np.rint rounds half to even, as cvt.rni / libdevice rint do on the GPU.
    return np.rint(x)


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight matrix quantized per output channel, stored (N, K) with K contiguous.

    Attributes
    ----------
    format : str
        ``"int8"`` (symmetric) or ``"int16"`` (asymmetric, run as two int8 limbs).
    q : ndarray
        Codes, shape (N, K): int8 for ``"int8"``, int16 for ``"int16"``.
    scale : ndarray
        float32 (N,), the value of one code step of each output channel.
    zero_point : ndarray
        int32 (N,), the code of 0.0 (always 0 for ``"int8"``).
    """

    format: str
    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    _limbs: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape

    def dequantize(self) -> np.ndarray:
        """float64 (N, K): ``scale * (q - zero_point)``."""
        return self.scale.astype(np.float64)[:, None] * (
            self.q.astype(np.float64) - self.zero_point.astype(np.float64)[:, None]
        )

    @property
    def limbs(self) -> tuple[np.ndarray, np.ndarray]:
        """(hi, lo) int8 (N, K) with ``q = 256 * hi + lo + 128`` (``"int16"`` only)."""
        if self.format != "int16":
            raise ValueError(f"limbs: only int16 weights have limbs, this one is {self.format}")
        if not self._limbs:
            hi, lo = split_limbs(self.q)
            self._limbs["hi"], self._limbs["lo"] = hi, lo
        return self._limbs["hi"], self._limbs["lo"]

    @property
    def limb_offset(self) -> np.ndarray:
        """float32 (N,): ``128 - zero_point``, the factor of rowsum(X_q) in the limb epilogue."""
        return (128 - self.zero_point.astype(np.int64)).astype(np.float32)


def _check_weight(weight, name: str) -> np.ndarray:
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"{name}: must be 2-D (out_features, in_features), got shape {w.shape}")
    if w.shape[0] == 0 or w.shape[1] == 0:
        raise ValueError(f"{name}: must not be empty, got shape {w.shape}")
    if not np.issubdtype(w.dtype, np.floating) and not np.issubdtype(w.dtype, np.integer):
        raise TypeError(f"{name}: must be a real float array, got {w.dtype}")
    w = w.astype(np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        n, k = np.argwhere(bad)[0]
        raise ValueError(f"{name}[{n}, {k}]: must be finite, got {w[n, k]!r}")
    # Scales are float32: a weight past float32's max (possible in float64) would give an inf scale.
    big = np.abs(w) > F32_MAX
    if big.any():
        n, k = np.argwhere(big)[0]
        raise ValueError(f"{name}[{n}, {k}]: beyond float32's range (+-{F32_MAX:.4g}), got {float(w[n, k])!r}")
    return w


def quantize_weight(weight, format: str = "int8", *, name: str = "weight") -> QuantizedWeight:
    """Quantize a float weight matrix per output channel.

    Parameters
    ----------
    weight : array_like, shape (N, K)
        Float weights, output channels in rows (``torch.nn.Linear.weight`` layout).
    format : {"int8", "int16"}
        Symmetric int8, or asymmetric int16 (see the module docstring for the formulas).

    Returns
    -------
    QuantizedWeight

    Raises
    ------
    ValueError
        Not 2-D, empty, or an element that is not finite or beyond float32's range (named by its
        index); unknown format.
    """
    if format not in WEIGHT_FORMATS:
        raise ValueError(f"format: must be one of {WEIGHT_FORMATS}, got {format!r}")
    w = _check_weight(weight, name)
    eps = np.float64(EPS)
    if format == "int8":
        a = np.maximum(np.abs(w).max(axis=1), eps)
        scale = (a / INT8_MAX).astype(np.float32)
        q = np.clip(_rint(w / scale.astype(np.float64)[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8)
        zp = np.zeros(w.shape[0], np.int32)
        return QuantizedWeight("int8", np.ascontiguousarray(q), scale, zp)
    lo = np.minimum(w.min(axis=1), 0.0)
    hi = np.maximum(w.max(axis=1), 0.0)
    scale = (np.maximum(hi - lo, eps) / INT16_STEPS).astype(np.float32)
    s64 = scale.astype(np.float64)
    zp = np.clip(INT16_MIN + _rint(-lo / s64), INT16_MIN, INT16_MAX).astype(np.int32)
    q = np.clip(_rint(w / s64[:, None]) + zp[:, None], INT16_MIN, INT16_MAX).astype(np.int16)
    return QuantizedWeight("int16", np.ascontiguousarray(q), scale, zp)


def split_limbs(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split int16 codes into int8 limbs (hi, lo) with ``q = 256*hi + lo + 128`` exactly.

    The offset ``u = q + 32768`` is in [0, 65535]; its high and low bytes, each shifted by -128,
    fit int8. The constant 128 is folded into the zero-point correction of the epilogue.
    """
    q = np.asarray(q)
    if q.dtype != np.int16:
        raise TypeError(f"q: must be int16, got {q.dtype}")
    u = q.astype(np.int32) + 32768
    hi = ((u >> 8) - 128).astype(np.int8)
    lo = ((u & 255) - 128).astype(np.int8)
    return hi, lo


def join_limbs(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Inverse of :func:`split_limbs`: int16 ``256*hi + lo + 128``.

    ``hi`` and ``lo`` are int8 limbs (any integer dtype whose values lie in [-128, 127]) of one
    shape; TypeError for other dtypes, ValueError naming the first limb out of range (it would wrap
    int16) or the shapes.
    """
    limbs = {"hi": np.asarray(hi), "lo": np.asarray(lo)}
    for name, v in limbs.items():
        if not np.issubdtype(v.dtype, np.integer):
            raise TypeError(f"{name}: must be int8 limbs, got dtype {v.dtype}")
        if v.dtype != np.int8 and v.size:
            bad = (v < -128) | (v > 127)
            if bad.any():
                i = tuple(int(a) for a in np.argwhere(bad)[0])
                raise ValueError(f"{name}[{', '.join(map(str, i))}]: must be an int8 limb in [-128, 127], "
                                 f"got {int(v[i])}")
    hi, lo = limbs["hi"], limbs["lo"]
    if hi.shape != lo.shape:
        raise ValueError(f"hi, lo: must have one shape, got {hi.shape} and {lo.shape}")
    return (256 * hi.astype(np.int32) + lo.astype(np.int32) + 128).astype(np.int16)


@dataclass(frozen=True)
class QuantizedActivations:
    """Per-token activations: ``x[m, k] ~ scale[m] * q[m, k]``.

    ``q`` int8 (M, K) (int16 for 16-bit activations), ``scale`` float32 (M,) (NaN for a poisoned
    row), ``rowsum`` int32 (M,).
    """

    q: np.ndarray
    scale: np.ndarray
    rowsum: np.ndarray

    @property
    def limbs(self) -> tuple[np.ndarray, np.ndarray]:
        """(hi, lo) int8 (M, K) with ``q = 256 * hi + lo`` (16-bit activations only)."""
        return split_act_limbs(self.q)


ACT_BITS = (8, 16)


def quantize_activations(x, bits: int = 8) -> QuantizedActivations:
    """Quantize activations per token (row) to symmetric int8 (or int16) with absmax scales and row sums.

    Parameters
    ----------
    x : array_like, shape (M, K)
        float16, bfloat16-as-float32, float32 or float64 activations; converted to float32 first
        (float64 inputs are rounded to float32, as a GPU caller would have to).
    bits : {8, 16}
        8: int8 codes in [-127, 127]; 16: int16 codes in [-ACT16_MAX, ACT16_MAX], which split into
        int8 limbs (:func:`split_act_limbs`).

    Returns
    -------
    QuantizedActivations
        A row with a non-finite element gets codes 0, row sum 0 and scale NaN (see module docstring);
        an all-zero row gets codes 0 and the finite scale ``EPS / 127`` (``EPS / 32639``).

    Raises
    ------
    ValueError
        Not 2-D; bits not 8 or 16; 16-bit rows longer than ACT16_K_MAX (their int32 row sums
        could wrap).
    TypeError
        x not real numbers (complex, bool, strings, objects): nothing is cast silently.
    """
    if type(bits) is bool or not isinstance(bits, (int, np.integer)) or bits not in ACT_BITS:
        raise ValueError(f"bits: must be the integer 8 or 16, got {bits!r}")
    qmax = INT8_MAX if bits == 8 else ACT16_MAX
    x = check_real(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x: must be 2-D (tokens, features), got shape {x.shape}")
    if bits == 16 and x.shape[1] > ACT16_K_MAX:
        raise ValueError(f"x: rows of {x.shape[1]} int16 codes could overflow their int32 row sums "
                         f"(at most {ACT16_K_MAX})")
    with np.errstate(invalid="ignore", over="ignore"):
        # float64 past float32's range becomes inf here: a poisoned row, as documented, not a warning
        x = x.astype(np.float32, copy=False)
        finite = np.isfinite(x).all(axis=1)
        absmax = np.abs(np.where(finite[:, None], x, 0)).max(axis=1, initial=np.float32(0))
        a = np.maximum(absmax, EPS)
        inv = np.float32(qmax) / a
        scale = a / np.float32(qmax)
        q = np.clip(_rint(np.where(finite[:, None], x, 0) * inv[:, None]), -qmax, qmax)
    q = q.astype(np.int8 if bits == 8 else np.int16)
    scale = np.where(finite, scale, np.float32(np.nan)).astype(np.float32)
    rowsum = q.astype(np.int32).sum(axis=1, dtype=np.int32)
    return QuantizedActivations(q, scale, rowsum)


def split_act_limbs(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split int16 activation codes in [-ACT16_MAX, ACT16_MAX] into int8 limbs with ``q = 256*hi + lo``.

    ``hi = (q + 128) >> 8`` (floor) is in [-127, 127] and ``lo = q - 256 * hi`` in [-128, 127].
    """
    q = np.asarray(q)
    if q.dtype != np.int16:
        raise TypeError(f"q: must be int16, got {q.dtype}")
    q32 = q.astype(np.int32)
    if q32.size and np.abs(q32).max() > ACT16_MAX:
        m = np.unravel_index(int(np.argmax(np.abs(q32))), q32.shape)
        where = ", ".join(str(int(i)) for i in m)
        raise ValueError(f"q[{where}]: must be within +-{ACT16_MAX} to split into limbs, got {int(q32[m])}")
    hi = (q32 + 128) >> 8
    lo = q32 - 256 * hi
    return hi.astype(np.int8), lo.astype(np.int8)


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), returned as float32.

    NaN stays NaN; values past bfloat16's largest finite number become +-inf, as on the GPU.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


OUT_DTYPES = ("float32", "float16", "bfloat16")


def cast_output(y: np.ndarray, out_dtype: str) -> np.ndarray:
    """Round a float32 result to the output dtype: float16 as float16, bfloat16 as float32 values."""
    if out_dtype == "float32":
        return y.astype(np.float32, copy=False)
    if out_dtype == "float16":
        with np.errstate(over="ignore"):
            return y.astype(np.float16)
    if out_dtype == "bfloat16":
        return round_to_bfloat16(y)
    raise ValueError(f"out_dtype: must be one of {OUT_DTYPES}, got {out_dtype!r}")
