"""QuantLinear and QuantMLP: small quantized models for per-tick inference, on the CPU or the GPU.

Both are built from float weights (NumPy arrays, or the state dict of a PyTorch ``nn.Sequential`` of
``LayerNorm``, ``Linear`` and ``GELU`` modules: only its arrays are read, torch is never imported).
On the CPU they run the NumPy integer reference (:mod:`tickgpu.quant.gemm`), which defines the
results; on the GPU they run the kernels of :mod:`tickgpu.kernels.quant` from the prebuilt bundle
through :mod:`tickgpu.runtime`.

Schemes (weights x activations):

============  =========================================  ======================================
``w8a8``      int8 symmetric per channel                 int8 symmetric per token (absmax)
``w16a8``     int16 asymmetric per channel, as 2 limbs   int8 symmetric per token
``w16a16``    int16 asymmetric per channel, as 2 limbs   int16 symmetric per token, as 2 limbs
``w8a16``     int8 symmetric per channel                 float16 (weight-only: small batches)
``fp16``      float16                                    float16 (float32 accumulation)
``fp32``      float32                                    float32
============  =========================================  ======================================

``fp16`` and ``fp32`` are the float baselines; they run on the CPU only. ``w16a16`` is the accurate
one: its activation codes are 257 times finer than int8's (W16A8's error is the activations'), at
four int8 tensor-core products a weight where W16A8 has two.
"""
from __future__ import annotations

import math

import numpy as np

from tickgpu import dispatch
from tickgpu.quant import _gpu

from tickgpu.quant import gemm
from tickgpu.quant.schemes import (
    F32_MAX,
    OUT_DTYPES,
    QuantizedWeight,
    cast_output,
    check_real,
    quantize_activations,
    quantize_weight,
)

SCHEMES = ("w8a8", "w16a8", "w16a16", "w8a16", "fp16", "fp32")
GPU_SCHEMES = ("w8a8", "w16a8", "w16a16", "w8a16")
# Schemes whose activations are quantized to integers (on the GPU by a kernel, from float32)
_INT_ACT = ("w8a8", "w16a8", "w16a16")
_BACKENDS = ("auto", "cpu", "gpu")


def _check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: must be one of {SCHEMES}, got {scheme!r}")
    return scheme


def _check_out_dtype(out_dtype: str) -> str:
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype: must be one of {OUT_DTYPES}, got {out_dtype!r}")
    return out_dtype


def _check_input(x, k: int, check: bool, scheme: str) -> tuple[np.ndarray, bool, float]:
    """x as float32 (M, K), whether it was a single token (K,), and with `check` its largest
    magnitude (0.0 without)."""
    arr = np.asarray(x)
    dt = arr.dtype
    # float32 / float64 answered by identity; np.issubdtype costs more than the rest of the check.
    if dt is not _F32 and dt is not _F64 and not (np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer)):
        raise TypeError(f"x: must be a real float array, got {arr.dtype}")
    single = arr.ndim == 1
    if single:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != k:
        raise ValueError(f"x: must have shape (tokens, {k}) or ({k},), got {np.shape(x)}")
    arr = arr.astype(np.float32)
    peak = 0.0
    if check and arr.size:
        # One pass first: the largest magnitude is NaN or infinite exactly where some element is
        # (max of |x| propagates NaN and raises no floating-point warning); the element-wise
        # search for the first bad one runs only then.
        peak = float(_max(np.abs(arr), None))
        if not math.isfinite(peak):
            bad = ~np.isfinite(arr)
            m, j = np.argwhere(bad)[0]
            _not_finite(m, j, arr[m, j], np.asarray(x).reshape(arr.shape))
        if scheme in _F16_ACT and peak > 65504:
            big = np.abs(arr) > 65504
            if big.any():
                m, j = np.argwhere(big)[0]
                raise ValueError(f"x[{m}, {j}]: exceeds float16's range (65504) for scheme "
                                 f"{scheme!r}, got {arr[m, j]!r}")
    return arr, single, peak


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_max = np.maximum.reduce
F16_MAX = 65504.0
# Schemes whose activations are float16 (hidden ones too, between layers)
_F16_ACT = ("w8a16", "fp16")


def _not_finite(m, j, value, src=None):
    """Raise the error of x[m, j] not finite as float32; ``src`` (the caller's array, 2-D) tells a
    finite float64 value past float32's range, which the cast turned into inf, from a real inf."""
    if src is not None:
        orig = src[m, j]
        if np.isfinite(orig):
            raise ValueError(f"x[{m}, {j}]: beyond float32's range (+-{F32_MAX:.4g}), got {float(orig)!r} "
                             "(check=False gives NaN for that row)")
    raise ValueError(f"x[{m}, {j}]: must be finite, got {value!r} (check=False gives NaN for that row)")


def safe_input(layers, layernorm=None, f16_hidden: bool = False) -> float:
    """The largest input magnitude for which no value of the model's step can leave its range: float32
    for every layer's result, float16 (65504) for the LayerNorm's output and the hidden activations
    where `f16_hidden` (schemes w8a16 and fp16). inf where no input can make one leave it (a
    LayerNorm bounds what the first layer sees), 0.0 where some input might whatever its magnitude.

    A bound, with room: a layer's results are at most ``in_features * max|w| * H + max|b|`` for
    inputs of magnitude H (GELU shrinks them), allowed 5% for quantization and float rounding
    and held to half the range. Calls with ``check=True`` whose input stays within it skip the
    look at the output that inputs beyond it get (see QuantMLP); only there can an overflow raise."""
    ceil32, ceil16 = 0.5 * F32_MAX, 0.5 * F16_MAX
    if layernorm is not None:
        g, b, _ = layernorm
        # a normalized row's elements are within sqrt(K - 1) of 0
        a, c = 0.0, float(np.max(np.abs(g), initial=0.0)) * math.sqrt(g.size) + float(np.max(np.abs(b), initial=0.0))
        if f16_hidden and not c <= ceil16:
            return 0.0
    else:
        a, c = 1.0, 0.0     # the layer's input magnitude as a * X + c for inputs of magnitude X
    limit = math.inf
    last = len(layers) - 1
    for i, lin in enumerate(layers):
        gain = 1.05 * lin.in_features * lin.weight_peak
        a = gain * a if a else 0.0
        c = (gain * c if c else 0.0) + lin.bias_peak
        ceil = ceil16 if f16_hidden and i < last else ceil32
        if not c < ceil:
            return 0.0
        if a:
            limit = min(limit, (ceil - c) / a)
    return limit


def _explain_overflow(model, x) -> None:
    """With check=True, an input beyond the model's safe bound whose output came out not finite:
    raise the reference's error naming the layer, token and feature where a value left its range;
    return quietly where none did (an output past float16's range with out_dtype "float16" is inf
    and no error)."""
    x32 = np.asarray(x).reshape(-1, model.in_features).astype(np.float32)
    model.forward_cpu(x32, check=True)


def _float_param(values, name: str, shape: tuple, limit: float = F32_MAX, why: str = "") -> np.ndarray:
    """A float parameter (bias, gamma, beta, float weight) as float32, checked: shape, finite, and
    within +-limit (float32's max; float16's where the scheme rounds it to float16), which a
    float64 value can exceed and then turn into inf."""
    v = check_real(values, name).astype(np.float64)
    if v.shape != shape:
        raise ValueError(f"{name}: must have shape {shape}, got {v.shape}")
    bad = ~np.isfinite(v)
    if bad.any():
        i = tuple(int(a) for a in np.argwhere(bad)[0])
        raise ValueError(f"{name}[{', '.join(map(str, i))}]: must be finite, got {float(v[i])!r}")
    big = np.abs(v) > limit
    if big.any():
        i = tuple(int(a) for a in np.argwhere(big)[0])
        rng = f"float32's range (+-{F32_MAX:.4g})" if limit == F32_MAX else f"float16's range (+-{limit:g}){why}"
        raise ValueError(f"{name}[{', '.join(map(str, i))}]: beyond {rng}, got {float(v[i])!r}")
    return v.astype(np.float32)


def _gpu_step(model, x, check: bool):
    """The GPU step of a C-contiguous float32 / float64 host batch staged in one native pass
    (`GpuPlan.run_staged`), or None where that path does not apply (the caller's general path
    then runs: same results, same errors). It applies to models whose GPU step reads float32
    (`model._stages_f32`: all but W8A16 without a LayerNorm, whose step reads float16)."""
    if not model._stages_f32 or model.backend == "cpu" or type(x) is not np.ndarray:
        return None
    dt = x.dtype
    if (dt is not _F32 and dt is not _F64) or not x.flags.c_contiguous:
        return None
    k = model.in_features
    single = x.ndim == 1
    if single:
        if x.shape[0] != k:
            return None
        x = x[None, :]
    elif x.ndim != 2 or x.shape[1] != k or not 0 < x.shape[0] <= _gpu.GRAPH_MAX_ROWS:
        return None             # (more rows: not a graph step, so the general path)
    if _choose_backend(model.op_name, model.backend, model.scheme, x.shape[0]) != "gpu":
        return None
    y = _gpu.plan_for(model).run_staged(x, check, lambda i, j, v: _not_finite(i, j, v, x), model._safe_x,
                                        lambda: _explain_overflow(model, x))
    if y is None:
        return None
    return y[0] if single else y


def _general_call(model, x32: np.ndarray, single: bool, risky: bool) -> np.ndarray:
    """A checked float32 batch on the backend chosen (the path of calls `_gpu_step` does not take).
    `risky`: check=True and an input beyond the model's safe bound, so an overflow is looked for."""
    # No rows: nothing to launch (an empty grid); the reference gives the empty result.
    if _choose_backend(model.op_name, model.backend, model.scheme, x32.shape[0]) == "gpu" and x32.shape[0]:
        y = _gpu.plan_for(model).run(x32)
        if risky and not _gpu.finite(y):
            _explain_overflow(model, x32)
    else:
        y = model.forward_cpu(x32, check=risky)
    return y[0] if single else y


def _bind(model, x, check: bool) -> "_gpu.BoundStep":
    """The model's GPU step bound to x (QuantMLP.bind documents it), after the model's own checks."""
    if model.backend == "cpu":
        raise ValueError("bind: the model's backend is 'cpu'; a bound step runs on the GPU")
    if model.scheme not in GPU_SCHEMES:
        raise ValueError(f"bind: scheme {model.scheme!r} runs on the CPU only; a bound step runs on the GPU")
    if not model._stages_f32:
        raise ValueError(f"bind: scheme {model.scheme!r} without a LayerNorm reads float16 input; "
                         "call the model instead")
    src = x.reshape(-1, model.in_features) if isinstance(x, np.ndarray) and x.ndim == 1 else x
    not_finite = lambda i, j, v: _not_finite(i, j, v, src)  # noqa: E731
    return _gpu.BoundStep(model, x, check, not_finite, model._safe_x, lambda: _explain_overflow(model, x))


def _host_array(value, key: str) -> np.ndarray:
    """A state-dict value as a NumPy array: torch tensors through ``.detach().cpu()`` (bfloat16,
    which NumPy lacks, through ``.float()``, exact), without importing torch."""
    if hasattr(value, "detach"):
        try:
            value = value.detach().cpu()
            if str(getattr(value, "dtype", "")) == "torch.bfloat16":
                value = value.float()
            value = value.numpy()
        except (RuntimeError, TypeError, NotImplementedError) as e:
            # a meta, sparse or quantized tensor: say which entry, not only torch's reason
            raise TypeError(f"state_dict: {key!r} cannot be read as a dense array of real numbers "
                            f"({type(e).__name__}: {e})") from None
    arr = np.asarray(value)
    if arr.dtype.name == "bfloat16":   # ml_dtypes' NumPy bfloat16
        arr = arr.astype(np.float32)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"state_dict: {key!r} must hold real numbers, got dtype {arr.dtype}")
    return arr


def _choose_backend(op: str, backend: str, scheme: str, m: int) -> str:
    chosen = dispatch.choose(op, m, backend)
    if chosen == "gpu" and scheme not in GPU_SCHEMES:
        if backend == "gpu":
            raise ValueError(f"scheme {scheme!r} runs on the CPU only; GPU schemes: {GPU_SCHEMES}")
        return "cpu"
    return chosen


class QuantLinear:
    """A linear layer ``y = x W^T + b`` (optionally followed by GELU) with quantized weights.

    Parameters
    ----------
    weight : array_like, shape (out_features, in_features)
        Float weights (``torch.nn.Linear.weight`` layout). Must be finite and within float32's
        range (float16's, 65504, for ``fp16``, which rounds them to float16).
    bias : array_like, shape (out_features,), optional
        Within the same range.
    scheme : str
        One of :data:`SCHEMES` (see the module docstring).
    gelu : bool
        Apply exact (erf) GELU in the float32 epilogue.
    out_dtype : {"float32", "float16", "bfloat16"}
        Output precision. bfloat16 results come back as float32 arrays holding bfloat16 values.
    backend : {"cpu", "gpu", "auto"}
        "auto" asks :func:`tickgpu.dispatch.choose` (op "quant_linear").

    Raises
    ------
    ValueError
        Bad shapes, an empty weight (every scheme), a weight or bias that is not finite or out of
        range (named by its index), or in_features > :data:`tickgpu.quant.gemm.K_MAX`
        (:data:`~tickgpu.quant.gemm.K_MAX_A16` for ``w16a16``): int32 accumulation could overflow.
    TypeError
        A weight or bias that does not hold real numbers (complex, bool, strings); ``gelu`` not a
        bool.
    """

    op_name = "quant_linear"

    def __init__(self, weight, bias=None, *, scheme: str = "w8a8", gelu: bool = False,
                 out_dtype: str = "float32", backend: str = "cpu"):
        self.scheme = _check_scheme(scheme)
        self.out_dtype = _check_out_dtype(out_dtype)
        if backend not in _BACKENDS:
            raise ValueError(f"backend: must be one of {_BACKENDS}, got {backend!r}")
        self.backend = backend
        if not isinstance(gelu, (bool, np.bool_)):
            raise TypeError(f"gelu: must be a bool, got {gelu!r}")
        self.gelu = bool(gelu)
        # Its GPU step reads float32 input (W8A16 reads float16): see _gpu_step.
        self._stages_f32 = self.scheme in _INT_ACT
        self._f16_hidden = False   # one layer: no hidden activations (see QuantMLP)
        w = np.asarray(weight)
        if w.ndim != 2:
            raise ValueError(f"weight: must be 2-D (out_features, in_features), got shape {w.shape}")
        if 0 in w.shape:
            raise ValueError(f"weight: must not be empty, got shape {w.shape}")
        self.out_features, self.in_features = w.shape
        gemm.check_k(self.in_features, act16=self.scheme == "w16a16")
        # fp16 rounds its weights and bias to float16: past 65504 they would be inf.
        limit, why = (F16_MAX, " for scheme 'fp16'") if self.scheme == "fp16" else (F32_MAX, "")
        if bias is None:
            self.bias = np.zeros(self.out_features, np.float32)
        else:
            self.bias = _float_param(bias, "bias", (self.out_features,), limit, why)
        self.weight_q: QuantizedWeight | None = None
        self.weight_float: np.ndarray | None = None
        if scheme in ("w8a8", "w8a16"):
            self.weight_q = quantize_weight(w, "int8")
        elif scheme in ("w16a8", "w16a16"):
            self.weight_q = quantize_weight(w, "int16")
        else:
            self.weight_float = _float_param(w, "weight", w.shape, limit, why)
        # Magnitudes for the overflow bound (safe_input); the weight checked finite by now.
        self.weight_peak = float(np.max(np.abs(w.astype(np.float64)), initial=0.0))
        self.bias_peak = float(np.max(np.abs(self.bias), initial=0.0))
        self._safe_x = safe_input([self])

    def forward_cpu(self, x: np.ndarray, *, gelu: bool | None = None, out_dtype: str | None = None,
                    check: bool = False, name: str = "output"):
        """The reference result for float32 (M, K) activations (no input checks).

        With ``check``, a float32 result that is not finite (for finite x: the products overflowed)
        raises ValueError naming `name`, the token and the feature."""
        out_dtype = self.out_dtype if out_dtype is None else out_dtype
        y = self._forward_f32(x, self.gelu if gelu is None else gelu)
        if check:
            bad = ~np.isfinite(y)
            if bad.any():
                m, j = (int(a) for a in np.argwhere(bad)[0])
                raise ValueError(f"{name}[{m}, {j}]: not finite in float32 for finite input, got {float(y[m, j])!r} "
                                 "(the input's magnitudes times the weights' exceed float32's range; "
                                 "check=False gives inf or NaN there)")
        return y if out_dtype == "float32" else cast_output(y, out_dtype)

    def _forward_f32(self, x: np.ndarray, gelu: bool) -> np.ndarray:
        out_dtype = "float32"
        s = self.scheme
        if s in ("fp32", "fp16"):
            return gemm.linear_float(x, self.weight_float, self.bias, dtype="float32" if s == "fp32" else "float16",
                                     apply_gelu=gelu, out_dtype=out_dtype)
        wq = self.weight_q
        if s == "w8a16":
            return gemm.linear_w8a16(x, wq.q, wq.scale, self.bias, apply_gelu=gelu, out_dtype=out_dtype)
        if s == "w16a16":
            act = quantize_activations(x, bits=16)
            xh, xl = act.limbs
            hi, lo = wq.limbs
            return gemm.linear_w16a16(xh, xl, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset,
                                      self.bias, apply_gelu=gelu, out_dtype=out_dtype)
        act = quantize_activations(x)
        if s == "w8a8":
            return gemm.linear_w8a8(act.q, act.scale, wq.q, wq.scale, self.bias,
                                    apply_gelu=gelu, out_dtype=out_dtype)
        hi, lo = wq.limbs
        return gemm.linear_w16a8(act.q, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset,
                                 self.bias, apply_gelu=gelu, out_dtype=out_dtype)

    def __call__(self, x, *, check: bool = True) -> np.ndarray:
        """Apply the layer to activations x of shape (M, in_features) or (in_features,).

        With ``check=True`` (default) a non-finite input raises ValueError naming its index, and so
        does a result that overflows float32 (inputs and weights whose products leave its range),
        naming the token and feature; with ``check=False`` the rows holding a non-finite input come
        out NaN, and overflowed results inf or NaN. Returns (M, out_features) (or
        (out_features,) for a single token) in ``out_dtype``.
        """
        y = _gpu_step(self, x, check)
        if y is not None:
            return y
        x32, single, peak = _check_input(x, self.in_features, check, self.scheme)
        return _general_call(self, x32, single, peak > self._safe_x)

    def bind(self, x, *, check: bool = True) -> "_gpu.BoundStep":
        """The GPU step bound to the array x; see :meth:`QuantMLP.bind`."""
        return _bind(self, x, check)


class QuantMLP:
    """``[LayerNorm] -> Linear -> GELU -> ... -> Linear``, every Linear quantized with one scheme.

    Parameters
    ----------
    layers : list of (weight, bias)
        Float weights (out, in) and biases (or None) of the Linear layers, input first; GELU sits
        between consecutive layers (not after the last). Any iterable of pairs (a tuple, a
        generator) is taken as its list; an array or a mapping raises TypeError.
    layernorm : (gamma, beta) or (gamma, beta, eps), optional
        A LayerNorm over the input features, computed in float32 precision (float64 internally,
        rounded once) before the first layer; eps defaults to 1e-5 as in PyTorch. gamma and beta
        must be real numbers (TypeError for complex, bool or strings), finite and within float32's
        range, eps finite and > 0.
    scheme, out_dtype, backend
        As for :class:`QuantLinear`; ``out_dtype`` applies to the final output (hidden activations
        are float32, float16 for ``w8a16`` and ``fp16``).

    With ``w8a16`` and ``fp16`` the LayerNorm's output and the hidden activations travel as float16:
    one past 65504 would become inf and the output NaN. The integer schemes carry hidden activations
    in float32, where inputs and weights of huge magnitudes can overflow too. Calls with
    ``check=True`` (the default) raise ValueError naming the layer, token and feature instead; with
    ``check=False`` the rows concerned come out NaN (or inf). What that costs: where the input's
    largest magnitude is within a bound computed from the weights at construction
    (:func:`safe_input`; with a LayerNorm, any input), nothing, as no overflow is possible; beyond
    it, one look at the output, and the reference rerun where that is not finite.
    """

    op_name = "quant_mlp"

    def __init__(self, layers, *, layernorm=None, scheme: str = "w8a8", out_dtype: str = "float32",
                 backend: str = "cpu"):
        # A generator is taken as its list; an array (whose truth value NumPy refuses) is not a list of pairs.
        if isinstance(layers, (np.ndarray, str, bytes, dict)) or not hasattr(layers, "__iter__"):
            raise TypeError(f"layers: must be a list of (weight, bias) pairs, got {type(layers).__name__}")
        layers = list(layers)
        if not layers:
            raise ValueError("layers: must hold at least one (weight, bias) pair")
        self.scheme = _check_scheme(scheme)
        self.out_dtype = _check_out_dtype(out_dtype)
        if backend not in _BACKENDS:
            raise ValueError(f"backend: must be one of {_BACKENDS}, got {backend!r}")
        self.backend = backend
        self.layers: list[QuantLinear] = []
        for i, layer in enumerate(layers):
            if not isinstance(layer, (tuple, list)) or len(layer) != 2:
                raise TypeError(f"layers[{i}]: must be a (weight, bias) pair (bias may be None), "
                                f"got {type(layer).__name__}" + (f" of {len(layer)}" if isinstance(layer, (tuple, list)) else ""))
            last = i == len(layers) - 1
            try:
                lin = QuantLinear(*layer, scheme=scheme, gelu=not last,
                                  out_dtype=out_dtype if last else "float32", backend="cpu")
            except (ValueError, TypeError) as e:
                raise type(e)(f"layers[{i}]: {e}") from None
            if self.layers and lin.in_features != self.layers[-1].out_features:
                raise ValueError(f"layers[{i}]: in_features {lin.in_features} does not match the previous "
                                 f"layer's out_features {self.layers[-1].out_features}")
            self.layers.append(lin)
        self.in_features = self.layers[0].in_features
        self.out_features = self.layers[-1].out_features
        self.layernorm = None
        if layernorm is not None:
            if not isinstance(layernorm, (tuple, list)) or len(layernorm) not in (2, 3):
                raise TypeError("layernorm: must be (gamma, beta) or (gamma, beta, eps), got "
                                + (f"{len(layernorm)} items" if isinstance(layernorm, (tuple, list))
                                   else type(layernorm).__name__))
            gamma, beta, *rest = layernorm
            try:
                eps = float(rest[0]) if rest else 1e-5
            except (TypeError, ValueError):
                raise TypeError(f"layernorm: eps must be a number, got {rest[0]!r}") from None
            g = check_real(gamma, "layernorm: gamma")
            bt = check_real(beta, "layernorm: beta")
            if g.shape != (self.in_features,) or bt.shape != (self.in_features,):
                raise ValueError(f"layernorm: gamma and beta must have shape ({self.in_features},), "
                                 f"got {g.shape} and {bt.shape}")
            if not (math.isfinite(eps) and eps > 0):
                raise ValueError(f"layernorm: eps must be finite and > 0, got {eps!r}")
            self.layernorm = (_float_param(g, "layernorm: gamma", g.shape),
                              _float_param(bt, "layernorm: beta", bt.shape), eps)
        # Its GPU step reads float32 input, but for W8A16 without a LayerNorm (float16): see _gpu_step.
        self._stages_f32 = self.scheme in _INT_ACT or (self.scheme == "w8a16" and self.layernorm is not None)
        # float16 between stages (see the class docstring): what check=True must watch
        self._f16_hidden = self.scheme in _F16_ACT and (len(self.layers) > 1 or self.layernorm is not None)
        self._safe_x = safe_input(self.layers, self.layernorm, self.scheme in _F16_ACT)

    @classmethod
    def from_state_dict(cls, state_dict, *, layernorm_eps: float = 1e-5, **kwargs) -> "QuantMLP":
        """Build from the state dict of ``nn.Sequential(LayerNorm?, Linear, GELU, ..., Linear)``.

        Keys are ``"<i>.weight"`` and ``"<i>.bias"``, ``i`` the module's index in the Sequential
        (a common prefix before it, as in ``"net.0.weight"``, is allowed). Modules are taken in the
        order of their index, whatever the order of the keys (a sorted dict puts "10." before "2.").
        A module with a 2-D weight (and optionally a bias) is a Linear; a 1-D weight *and* bias at
        index 0 is the LayerNorm. The Linear layers must then sit at every other index (GELU, which
        has no parameters, between them): at 0, 2, 4, ... without a LayerNorm, 1, 3, 5, ... after it.
        Values may be NumPy arrays or torch tensors (``.detach().cpu()``; bfloat16 through
        ``.float()``); torch is never imported.

        Raises
        ------
        TypeError
            state_dict not a mapping; a value that is not a dense array of real numbers (complex,
            bool, a meta, sparse or quantized tensor), naming its key.
        ValueError
            Naming the key or module: an unknown leaf (a BatchNorm's ``running_mean``, a quantized
            module's ``weight_scale``, ...), a key without a module index, a module that is neither
            a Linear nor the leading LayerNorm, or a gap in the indices. A gap at index 0 before a
            Linear at 1 is a module without parameters there, such as
            ``LayerNorm(elementwise_affine=False)``: it is rejected, not dropped (build it with
            ``QuantMLP(layers, layernorm=(np.ones(n), np.zeros(n)))``); so is a 1-D weight
            without a bias (``LayerNorm(bias=False)`` and ``RMSNorm`` cannot be told apart).
            Modules without parameters after the last Linear cannot be seen in a state dict at all.
            Two keys that spell one module index differently (``"0.weight"`` and ``"00.weight"``)
            are refused, naming both, rather than one of them being dropped.
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"state_dict: must be a mapping of keys to arrays (a module's state_dict()), "
                            f"got {type(state_dict).__name__}")
        groups: dict[int, dict[str, np.ndarray]] = {}
        spelled: dict[tuple, str] = {}   # (prefix, index) -> the first key naming it ("0", "00": one index)
        prefixes = set()
        for key, value in state_dict.items():
            path, _, leaf = str(key).rpartition(".")
            head, _, index = path.rpartition(".")
            # ASCII digits only: str.isdigit() also takes '²', which int() refuses
            if not (index.isascii() and index.isdigit()):
                raise ValueError(f"state_dict: key {key!r} has no module index (expected '<i>.weight' or "
                                 "'<i>.bias' of an nn.Sequential)")
            if leaf not in ("weight", "bias"):
                raise ValueError(f"state_dict: key {key!r}: unsupported entry {leaf!r} (only the weight and "
                                 "bias of LayerNorm and Linear modules are read; a BatchNorm, a quantized or "
                                 "other module is not supported)")
            prefixes.add(head)
            i, key = int(index), str(key)
            first = spelled.setdefault((head, i), key)
            if first is not key and (first.rpartition(".")[0] != path or leaf in groups[i]):
                raise ValueError(f"state_dict: keys {first!r} and {key!r} both name module {i}: one "
                                 "of them would be dropped")
            groups.setdefault(i, {})[leaf] = _host_array(value, key)
        if not groups:
            raise ValueError("state_dict: is empty")
        if len(prefixes) > 1:
            raise ValueError(f"state_dict: keys of more than one module container {sorted(prefixes)}")
        head = next(iter(prefixes))
        name = (lambda i: f"{head}.{i}") if head else str
        layers, layernorm = [], None
        for index in sorted(groups):
            g = groups[index]
            if "weight" not in g:
                raise ValueError(f"state_dict: module {name(index)!r} has no weight (keys {sorted(g)})")
            w = g["weight"]
            if w.ndim == 2:
                first = 0 if layernorm is None else 1
                want = first + 2 * len(layers)
                if index != want:
                    raise ValueError(f"state_dict: module {name(index)!r} is a Linear, expected at index "
                                     f"{want} ([LayerNorm,] Linear, GELU, Linear, ...): modules without "
                                     "parameters that the state dict cannot describe (a LayerNorm("
                                     "elementwise_affine=False), Dropout, another activation) sit before it")
                layers.append((w, g.get("bias")))
            elif w.ndim == 1 and index == 0:
                if "bias" not in g:
                    raise ValueError(f"state_dict: module {name(index)!r} has a 1-D weight and no bias: "
                                     "LayerNorm(bias=False) and RMSNorm are not supported")
                layernorm = (w, g["bias"], layernorm_eps)
            else:
                raise ValueError(f"state_dict: module {name(index)!r} is neither the leading LayerNorm nor "
                                 f"a Linear (weight shape {w.shape})")
        if not layers:
            raise ValueError("state_dict: holds no Linear layer (no 2-D weight)")
        try:
            return cls(layers, layernorm=layernorm, **kwargs)
        except (ValueError, TypeError) as e:
            # Name the module the user knows: layers[i] is the i-th Linear, index first + 2 i
            msg, first = str(e), 0 if layernorm is None else 1
            if msg.startswith("layers["):
                i = int(msg[7:msg.index("]")])
                msg = f"state_dict: module {name(first + 2 * i)!r}{msg[msg.index(']') + 1:]}"
            elif msg.startswith("layernorm"):
                msg = f"state_dict: module {name(0)!r} (the LayerNorm){msg[9:]}"
            raise type(e)(msg) from None

    def normalize_cpu(self, x: np.ndarray) -> np.ndarray:
        """The LayerNorm step (identity without one): float64 internally, rounded to float32."""
        if self.layernorm is None:
            return x
        g, b, eps = self.layernorm
        x64 = x.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):   # a NaN or inf row is NaN, as documented
            mean = x64.mean(axis=1, keepdims=True)
            var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
            return (((x64 - mean) / np.sqrt(var + eps)) * g + b).astype(np.float32)

    def forward_cpu(self, x: np.ndarray, *, check: bool = False) -> np.ndarray:
        """The reference result for float32 (M, in_features) inputs (no input checks).

        With ``check``, a layer's float32 result that is not finite, or a LayerNorm output or
        hidden activation past float16's range in a ``w8a16`` / ``fp16`` model, raises ValueError
        (see the class docstring).
        """
        h = self.normalize_cpu(x)
        if check and self._f16_hidden and self.layernorm is not None:
            self._check_f16(h, "layernorm output", " (the input of layers[0])")
        for i, lin in enumerate(self.layers):
            h = lin.forward_cpu(h, check=check, name=f"layers[{i}] output")
            if lin is not self.layers[-1] and self.scheme in _F16_ACT:
                if check:
                    self._check_f16(h, f"layers[{i}] output", f" (after GELU; the input of layers[{i + 1}])")
                # hidden activations travel as float16 between these layers on the GPU
                h = cast_output(h, "float16").astype(np.float32)
        return h

    def _check_f16(self, h: np.ndarray, name: str, where: str) -> None:
        # not (|h| <= max) also catches an inf or NaN that float32 arithmetic made on its own
        over = ~(np.abs(h) <= F16_MAX)
        if over.any():
            m, j = (int(a) for a in np.argwhere(over)[0])
            raise ValueError(f"{name}[{m}, {j}]{where}: exceeds float16's range ({F16_MAX:g}), in which "
                             f"scheme {self.scheme!r} carries it, got {float(h[m, j])!r} "
                             "(check=False gives NaN for that row)")

    def __call__(self, x, *, check: bool = True) -> np.ndarray:
        """Run the model on (M, in_features) or (in_features,) inputs; see :meth:`QuantLinear.__call__`."""
        y = _gpu_step(self, x, check)
        if y is not None:
            return y
        # With a LayerNorm the raw input is never rounded to float16 (the LayerNorm's output is,
        # and forward_cpu checks that one).
        x32, single, peak = _check_input(x, self.in_features, check,
                                         "fp32" if self.layernorm is not None else self.scheme)
        return _general_call(self, x32, single, peak > self._safe_x)

    def bind(self, x, *, check: bool = True) -> "_gpu.BoundStep":
        """The model's GPU step bound to the host array x, for a tick loop that updates x in place.

        ``step = model.bind(x)`` checks x once: a C-contiguous float32 or float64 NumPy array of
        shape (tokens, in_features) or (in_features,), 1 to 64 tokens. Each ``step()`` then reads
        x's current contents and returns the GPU step's result (``model(x, check=check)`` on
        backend "gpu"; "auto" is not consulted), to the bit, as a new array: one native pass
        stages x into the step's mapped input, one graph replay runs the step, the output is
        copied out. The binding holds x (NumPy refuses to resize it). With ``check=True`` a step
        raises what ``model(x)`` raises, a hidden float16 overflow of ``w8a16`` included (looked for
        only when the output is not finite).

        Raises
        ------
        TypeError, ValueError
            x of the wrong type, dtype, layout, shape or row count; a model whose backend is
            "cpu", whose scheme runs on the CPU only (fp16, fp32), or whose GPU step reads
            float16 input (W8A16 without a LayerNorm).
        BackendUnavailable
            No usable GPU.
        """
        return _bind(self, x, check)
