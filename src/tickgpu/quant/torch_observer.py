"""SafeMinMaxObserver: a drop-in observer for torch.ao.quantization with tickgpu's guarantees.

Importing this module imports torch (tickgpu itself never does); ``tickgpu.quant.SafeMinMaxObserver``
loads it on first use.

Compared with ``torch.ao.quantization.MovingAverageMinMaxObserver`` it

- masks NaN and +-inf instead of letting one bad value poison min/max forever (counted in the
  ``n_nonfinite`` buffer); a batch with no finite value leaves the state unchanged;
- floors scales at ``2**-100`` instead of float32's machine epsilon (1.2e-7), so a feature whose whole
  range is 1e-8 still gets its 255 levels instead of quantizing to a single code;
- keeps min/max within +-float32max / 2, so the range and the scale cannot overflow to inf: a
  finite value beyond that (float64 input up to 1.8e308) is clamped to it, not counted as
  non-finite;
- refuses complex and bool batches (TypeError) rather than observing their real parts or 0 / 1;
- loads a ``MovingAverageMinMaxObserver`` state dict (no ``n_nonfinite``: counted from 0), with the
  same guarantees: a loaded min/max that is NaN, an infinite bound other than the fresh state's
  (+inf, -inf), or min > max is refused (RuntimeError from ``load_state_dict``, naming the key);
  finite bounds beyond +-float32max / 2 are clamped.

The EMA is the same recursion: ``averaging_constant`` is ``1 - alpha`` of tickgpu's observers (0.01 by
default, i.e. alpha = 0.99). Like every observer it only ever sees batches up to the current one.
"""
from __future__ import annotations

import torch
from torch.ao.quantization.observer import MovingAverageMinMaxObserver

from tickgpu.quant.schemes import EPS

_LIMIT = float(torch.finfo(torch.float32).max) / 2


class SafeMinMaxObserver(MovingAverageMinMaxObserver):
    """EMA min/max observer that never yields a zero, infinite or NaN scale (see module docstring)."""

    def __init__(self, averaging_constant: float = 0.01, dtype=torch.quint8,
                 qscheme=torch.per_tensor_affine, eps: float = float(EPS), **kwargs):
        if isinstance(averaging_constant, bool) or not 0.0 < float(averaging_constant) <= 1.0:
            raise ValueError(f"averaging_constant: must be in (0, 1], got {averaging_constant!r}")
        super().__init__(averaging_constant=averaging_constant, dtype=dtype, qscheme=qscheme,
                         eps=eps, **kwargs)
        self.register_buffer("n_nonfinite", torch.tensor(0, dtype=torch.int64))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # torch's load_state_dict hands each module its own copy of the dict: entries may be replaced.
        key = prefix + "n_nonfinite"
        if key not in state_dict:       # a MovingAverageMinMaxObserver's state: nothing masked yet
            state_dict[key] = torch.zeros((), dtype=torch.int64)
        lo_key, hi_key = prefix + "min_val", prefix + "max_val"
        lo, hi = state_dict.get(lo_key), state_dict.get(hi_key)
        if isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor):
            problem = _bad_bounds(lo.detach().to(torch.float64), hi.detach().to(torch.float64))
            if problem:
                error_msgs.append(f"{lo_key}, {hi_key}: {problem}; a SafeMinMaxObserver never holds such "
                                  f"a state (reset the source observer, or start from a fresh one)")
                return
            state_dict[lo_key] = lo.clamp(-_LIMIT, _LIMIT) if lo.numel() and lo.isfinite().all() else lo
            state_dict[hi_key] = hi.clamp(-_LIMIT, _LIMIT) if hi.numel() and hi.isfinite().all() else hi
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def forward(self, x_orig):
        if x_orig.is_complex() or x_orig.dtype == torch.bool:
            # a complex batch's imaginary parts would be dropped with only a warning
            raise TypeError(f"x: must be real numbers, got {x_orig.dtype}")
        if x_orig.numel() == 0:
            return x_orig
        x = x_orig.detach()
        # float64 (and integer) input is checked and clamped before it is narrowed: a float64 1e39
        # is finite, and cast to float32 first it would turn into inf and be dropped as non-finite.
        # Narrower floats widen to float32 first (float16 cannot hold the clamp bounds).
        x = x.to(torch.float64) if x.dtype == torch.float64 or not x.is_floating_point() else x.to(self.min_val.dtype)
        finite = torch.isfinite(x)
        self.n_nonfinite += (~finite).sum()
        if not bool(finite.any()):
            return x_orig
        cur_min, cur_max = torch.aminmax(x[finite].clamp(-_LIMIT, _LIMIT).to(self.min_val.dtype))
        if self.min_val == float("inf") and self.max_val == float("-inf"):
            new_min, new_max = cur_min, cur_max
        else:
            new_min = self.min_val + self.averaging_constant * (cur_min - self.min_val)
            new_max = self.max_val + self.averaging_constant * (cur_max - self.max_val)
        self.min_val.copy_(new_min)
        self.max_val.copy_(new_max)
        return x_orig


def _bad_bounds(lo: torch.Tensor, hi: torch.Tensor) -> str | None:
    """Why loaded (min_val, max_val) break the observer's guarantees, or None: the fresh state
    (+inf, -inf) and finite bounds with min <= max are fine."""
    if lo.shape != hi.shape or lo.numel() == 0:
        return None        # torch's own checks report shapes; an empty pair is a fresh per-channel state
    if torch.isnan(lo).any() or torch.isnan(hi).any():
        return "NaN in the loaded bounds"
    fresh = (lo == float("inf")) & (hi == float("-inf"))
    finite = torch.isfinite(lo) & torch.isfinite(hi)
    if not bool((fresh | finite).all()):
        return "an infinite bound outside the fresh state (+inf, -inf)"
    if bool((finite & (lo > hi)).any()):
        return "min_val > max_val"
    return None
