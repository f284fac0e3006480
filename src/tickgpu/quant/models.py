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
    OUT_DTYPES,
    QuantizedWeight,
    cast_output,
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


def _check_input(x, k: int, check: bool, scheme: str) -> tuple[np.ndarray, bool]:
    """x as float32 (M, K) and whether it was a single token (K,)."""
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
    if check and arr.size:
        # One pass first: the largest magnitude is NaN or infinite exactly where some element is
        # (max of |x| propagates NaN and raises no floating-point warning); the element-wise
        # search for the first bad one runs only then.
        peak = float(_max(np.abs(arr), None))
        if not math.isfinite(peak):
            bad = ~np.isfinite(arr)
            m, j = np.argwhere(bad)[0]
            _not_finite(m, j, arr[m, j])
        if scheme in ("w8a16", "fp16") and peak > 65504:
            big = np.abs(arr) > 65504
            if big.any():
                m, j = np.argwhere(big)[0]
                raise ValueError(f"x[{m}, {j}]: exceeds float16's range (65504) for scheme "
                                 f"{scheme!r}, got {arr[m, j]!r}")
    return arr, single


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_max = np.maximum.reduce


def _not_finite(m, j, value):
    raise ValueError(f"x[{m}, {j}]: must be finite, got {value!r} (check=False gives NaN for that row)")


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
    y = _gpu.plan_for(model).run_staged(x, check, _not_finite)
    if y is None:
        return None
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
    return _gpu.BoundStep(model, x, check, _not_finite)


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
        Float weights (``torch.nn.Linear.weight`` layout). Must be finite.
    bias : array_like, shape (out_features,), optional
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
        Bad shapes, non-finite weights, or in_features > :data:`tickgpu.quant.gemm.K_MAX`
        (:data:`~tickgpu.quant.gemm.K_MAX_A16` for ``w16a16``): int32 accumulation could overflow.
    """

    op_name = "quant_linear"

    def __init__(self, weight, bias=None, *, scheme: str = "w8a8", gelu: bool = False,
                 out_dtype: str = "float32", backend: str = "cpu"):
        self.scheme = _check_scheme(scheme)
        self.out_dtype = _check_out_dtype(out_dtype)
        if backend not in _BACKENDS:
            raise ValueError(f"backend: must be one of {_BACKENDS}, got {backend!r}")
        self.backend = backend
        self.gelu = bool(gelu)
        # Its GPU step reads float32 input (W8A16 reads float16): see _gpu_step.
        self._stages_f32 = self.scheme in _INT_ACT
        w = np.asarray(weight)
        if w.ndim != 2:
            raise ValueError(f"weight: must be 2-D (out_features, in_features), got shape {w.shape}")
        self.out_features, self.in_features = w.shape
        gemm.check_k(self.in_features, act16=self.scheme == "w16a16")
        if bias is None:
            self.bias = np.zeros(self.out_features, np.float32)
        else:
            b = np.asarray(bias, np.float64)
            if b.shape != (self.out_features,):
                raise ValueError(f"bias: must have shape ({self.out_features},), got {b.shape}")
            bad = ~np.isfinite(b)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"bias[{i}]: must be finite, got {b[i]!r}")
            self.bias = b.astype(np.float32)
        self.weight_q: QuantizedWeight | None = None
        self.weight_float: np.ndarray | None = None
        if scheme in ("w8a8", "w8a16"):
            self.weight_q = quantize_weight(w, "int8")
        elif scheme in ("w16a8", "w16a16"):
            self.weight_q = quantize_weight(w, "int16")
        else:
            wf = np.asarray(w, np.float64)
            bad = ~np.isfinite(wf)
            if bad.any():
                n, k = np.argwhere(bad)[0]
                raise ValueError(f"weight[{n}, {k}]: must be finite, got {wf[n, k]!r}")
            self.weight_float = wf.astype(np.float32)

    def forward_cpu(self, x: np.ndarray, *, gelu: bool | None = None, out_dtype: str | None = None):
        """The reference result for float32 (M, K) activations (no input checks)."""
        gelu = self.gelu if gelu is None else gelu
        out_dtype = self.out_dtype if out_dtype is None else out_dtype
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

        With ``check=True`` (default) a non-finite input raises ValueError naming its index; with
        ``check=False`` the rows holding one come out NaN. Returns (M, out_features) (or
        (out_features,) for a single token) in ``out_dtype``.
        """
        y = _gpu_step(self, x, check)
        if y is not None:
            return y
        x32, single = _check_input(x, self.in_features, check, self.scheme)
        # No rows: nothing to launch (an empty grid); the reference gives the empty result.
        if _choose_backend(self.op_name, self.backend, self.scheme, x32.shape[0]) == "gpu" and x32.shape[0]:
            y = _gpu.plan_for(self).run(x32)
        else:
            y = self.forward_cpu(x32)
        return y[0] if single else y

    def bind(self, x, *, check: bool = True) -> "_gpu.BoundStep":
        """The GPU step bound to the array x; see :meth:`QuantMLP.bind`."""
        return _bind(self, x, check)


class QuantMLP:
    """``[LayerNorm] -> Linear -> GELU -> ... -> Linear``, every Linear quantized with one scheme.

    Parameters
    ----------
    layers : list of (weight, bias)
        Float weights (out, in) and biases (or None) of the Linear layers, input first; GELU sits
        between consecutive layers (not after the last).
    layernorm : (gamma, beta) or (gamma, beta, eps), optional
        A LayerNorm over the input features, computed in float32 precision (float64 internally,
        rounded once) before the first layer; eps defaults to 1e-5 as in PyTorch.
    scheme, out_dtype, backend
        As for :class:`QuantLinear`; ``out_dtype`` applies to the final output (hidden activations
        are float32, float16 for ``w8a16`` and ``fp16``).
    """

    op_name = "quant_mlp"

    def __init__(self, layers, *, layernorm=None, scheme: str = "w8a8", out_dtype: str = "float32",
                 backend: str = "cpu"):
        if not layers:
            raise ValueError("layers: must hold at least one (weight, bias) pair")
        self.scheme = _check_scheme(scheme)
        self.out_dtype = _check_out_dtype(out_dtype)
        if backend not in _BACKENDS:
            raise ValueError(f"backend: must be one of {_BACKENDS}, got {backend!r}")
        self.backend = backend
        self.layers: list[QuantLinear] = []
        for i, (w, b) in enumerate(layers):
            last = i == len(layers) - 1
            lin = QuantLinear(w, b, scheme=scheme, gelu=not last,
                              out_dtype=out_dtype if last else "float32", backend="cpu")
            if self.layers and lin.in_features != self.layers[-1].out_features:
                raise ValueError(f"layers[{i}]: in_features {lin.in_features} does not match the previous "
                                 f"layer's out_features {self.layers[-1].out_features}")
            self.layers.append(lin)
        self.in_features = self.layers[0].in_features
        self.out_features = self.layers[-1].out_features
        self.layernorm = None
        if layernorm is not None:
            gamma, beta, *rest = layernorm
            eps = float(rest[0]) if rest else 1e-5
            g = np.asarray(gamma, np.float64)
            bt = np.asarray(beta, np.float64)
            if g.shape != (self.in_features,) or bt.shape != (self.in_features,):
                raise ValueError(f"layernorm: gamma and beta must have shape ({self.in_features},), "
                                 f"got {g.shape} and {bt.shape}")
            if not (np.isfinite(g).all() and np.isfinite(bt).all() and eps > 0):
                raise ValueError("layernorm: gamma, beta must be finite and eps > 0")
            self.layernorm = (g.astype(np.float32), bt.astype(np.float32), eps)
        # Its GPU step reads float32 input, but for W8A16 without a LayerNorm (float16): see _gpu_step.
        self._stages_f32 = self.scheme in _INT_ACT or (self.scheme == "w8a16" and self.layernorm is not None)

    @classmethod
    def from_state_dict(cls, state_dict, *, layernorm_eps: float = 1e-5, **kwargs) -> "QuantMLP":
        """Build from the state dict of ``nn.Sequential(LayerNorm?, Linear, GELU, ..., Linear)``.

        Entries are read in order and grouped by module prefix ("0.weight", "0.bias", ...): a 2-D
        weight is a Linear, a 1-D weight with a bias before the first Linear is the LayerNorm. Values
        may be NumPy arrays or torch tensors (converted with ``.detach().cpu().numpy()``).
        """
        groups: dict[str, dict[str, np.ndarray]] = {}
        for key, value in state_dict.items():
            prefix, _, leaf = key.rpartition(".")
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            groups.setdefault(prefix, {})[leaf] = np.asarray(value)
        layers, layernorm = [], None
        for prefix, g in groups.items():
            if "weight" not in g:
                raise ValueError(f"state_dict: module {prefix!r} has no weight (keys {sorted(g)})")
            if g["weight"].ndim == 2:
                layers.append((g["weight"], g.get("bias")))
            elif g["weight"].ndim == 1 and not layers and layernorm is None and "bias" in g:
                layernorm = (g["weight"], g["bias"], layernorm_eps)
            else:
                raise ValueError(f"state_dict: module {prefix!r} is neither the leading LayerNorm nor "
                                 f"a Linear (weight shape {g['weight'].shape})")
        return cls(layers, layernorm=layernorm, **kwargs)

    def normalize_cpu(self, x: np.ndarray) -> np.ndarray:
        """The LayerNorm step (identity without one): float64 internally, rounded to float32."""
        if self.layernorm is None:
            return x
        g, b, eps = self.layernorm
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=1, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
        return (((x64 - mean) / np.sqrt(var + eps)) * g + b).astype(np.float32)

    def forward_cpu(self, x: np.ndarray) -> np.ndarray:
        """The reference result for float32 (M, in_features) inputs (no input checks)."""
        h = self.normalize_cpu(x)
        for lin in self.layers:
            h = lin.forward_cpu(h)
            if lin is not self.layers[-1] and self.scheme in ("w8a16", "fp16"):
                # hidden activations travel as float16 between these layers on the GPU
                h = cast_output(h, "float16").astype(np.float32)
        return h

    def __call__(self, x, *, check: bool = True) -> np.ndarray:
        """Run the model on (M, in_features) or (in_features,) inputs; see :meth:`QuantLinear.__call__`."""
        y = _gpu_step(self, x, check)
        if y is not None:
            return y
        x32, single = _check_input(x, self.in_features, check,
                                   "fp32" if self.layernorm is not None else self.scheme)
        if _choose_backend(self.op_name, self.backend, self.scheme, x32.shape[0]) == "gpu" and x32.shape[0]:
            y = _gpu.plan_for(self).run(x32)
        else:
            y = self.forward_cpu(x32)
        return y[0] if single else y

    def bind(self, x, *, check: bool = True) -> "_gpu.BoundStep":
        """The model's GPU step bound to the host array x, for a tick loop that updates x in place.

        ``step = model.bind(x)`` checks x once: a C-contiguous float32 or float64 NumPy array of
        shape (tokens, in_features) or (in_features,), 1 to 64 tokens. Each ``step()`` then reads
        x's current contents and returns the GPU step's result (``model(x, check=check)`` on
        backend "gpu"; "auto" is not consulted), to the bit, as a new array: one native pass
        stages x into the step's mapped input, one graph replay runs the step, the output is
        copied out. The binding holds x (NumPy refuses to resize it).

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
