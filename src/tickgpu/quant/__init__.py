"""tickgpu.quant: quantized small models for per-tick inference, calibrated without seeing the future.

- :mod:`~tickgpu.quant.schemes`: how weights (int8 symmetric, int16 asymmetric as two int8 limbs) and
  activations (int8 per token, or int16 as two int8 limbs) are quantized, formula by formula.
- :mod:`~tickgpu.quant.gemm`: the NumPy integer reference that defines the results of the GPU kernels.
- :mod:`~tickgpu.quant.observers`: causal calibration (EMA min/max and absmax, scheduled frozen scales).
- :mod:`~tickgpu.quant.causal`: :func:`check_causal`, which proves causality by perturbing the future.
- :mod:`~tickgpu.quant.models`: :class:`QuantLinear` and :class:`QuantMLP`.

``SafeMinMaxObserver`` (for ``torch.ao.quantization`` users) is importable from here when torch is
installed; tickgpu itself never imports torch.
"""
from tickgpu.quant.causal import CausalityError, CausalReport, check_causal
from tickgpu.quant.gemm import K_MAX, K_MAX_A16
from tickgpu.quant.models import SCHEMES, QuantLinear, QuantMLP
from tickgpu.quant.observers import (
    AbsMaxObserver,
    EmaStandardizer,
    FrozenScales,
    MinMaxObserver,
    Observer,
    ScheduledScales,
    calibration_noise,
    qparams_from_range,
)
from tickgpu.quant.schemes import (
    EPS,
    QuantizedActivations,
    QuantizedWeight,
    join_limbs,
    quantize_activations,
    quantize_weight,
    split_act_limbs,
    split_limbs,
)

__all__ = [
    "EPS", "K_MAX", "K_MAX_A16", "SCHEMES",
    "AbsMaxObserver", "CausalReport", "CausalityError", "EmaStandardizer", "FrozenScales",
    "MinMaxObserver", "Observer", "QuantLinear", "QuantMLP", "QuantizedActivations",
    "QuantizedWeight", "SafeMinMaxObserver", "ScheduledScales", "calibration_noise", "check_causal",
    "join_limbs", "qparams_from_range", "quantize_activations", "quantize_weight", "split_act_limbs",
    "split_limbs",
]


def __getattr__(name):
    # torch is optional: only touching SafeMinMaxObserver imports it.
    if name == "SafeMinMaxObserver":
        from tickgpu.quant.torch_observer import SafeMinMaxObserver

        return SafeMinMaxObserver
    raise AttributeError(f"module 'tickgpu.quant' has no attribute {name!r}")
