"""The shipped Black-Scholes surrogate: its input domain, the map onto the model's inputs, its weights.

The model (``tickgpu/data/quant_bsm_surrogate.npz``; Linear(3, 64) -> GELU -> Linear(64, 64) ->
GELU -> Linear(64, 64) -> GELU -> Linear(64, 2)) maps (moneyness K/S, years to expiry, vol) to the
call price over spot and its delta, r = q = 0 (scripts/train_quant_models.py trains it). This
module defines its domain and input scaling once, for the training script, the quant suite's
accuracy section and the tests.
"""
from __future__ import annotations

from importlib import resources

import numpy as np

# (low, high) of moneyness, t and vol: where the surrogate was trained
DOMAIN = ((0.7, 1.3), (0.02, 2.0), (0.05, 0.8))
_LO = np.array([lo for lo, _ in DOMAIN])
_HI = np.array([hi for _, hi in DOMAIN])
# The draw of the accuracy table's 20,000 test points (sample_inputs(np.random.default_rng(TEST_SEED), n))
TEST_SEED = 3


def sample_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """n raw points (moneyness, t, vol), uniform over DOMAIN: float64 (n, 3)."""
    return np.column_stack([rng.uniform(lo, hi, n) for lo, hi in DOMAIN])


def scale_inputs(raw) -> np.ndarray:
    """The fixed affine map of DOMAIN onto [-1, 1] (no calibration involved): the model's float32 input."""
    return (2 * (np.asarray(raw) - _LO) / (_HI - _LO) - 1).astype(np.float32)


def shipped_state_dict() -> dict:
    """The shipped model's float weights, as the state dict of its ``nn.Sequential`` (without the
    stored test points)."""
    with resources.files("tickgpu").joinpath("data/quant_bsm_surrogate.npz").open("rb") as f:
        z = np.load(f)
        return {k: z[k] for k in z.files if not k.startswith("test_")}
