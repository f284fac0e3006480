"""Test configuration: GPU tests skip with a reason where no GPU is usable.

Set TICKGPU_REQUIRE_GPU=1 (scripts/device-check does) to turn that skip into a failure, so GPU tests
can never pass vacuously on the GPU machine.
"""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def _gpu_state() -> tuple[bool, str]:
    from tickgpu import dispatch

    if dispatch.gpu_available():
        return True, ""
    return False, dispatch.gpu_reason()


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items:
        return
    ok, reason = _gpu_state()
    if ok:
        return
    if os.environ.get("TICKGPU_REQUIRE_GPU"):
        raise pytest.UsageError(f"TICKGPU_REQUIRE_GPU is set but no GPU is usable: {reason}")
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for it in gpu_items:
        it.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared beside the checkout (oracles and LOBSTER data); tests needing it skip without it."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present")
    return SHARED


@pytest.fixture
def rng(request):
    """A fresh generator per test; the seed is printed on failure so a case can be replayed."""
    import numpy as np

    seed = int.from_bytes(os.urandom(4), "little") if not os.environ.get("TICKGPU_SEED") else int(os.environ["TICKGPU_SEED"])
    request.node.user_properties.append(("seed", seed))
    print(f"rng seed {seed} (TICKGPU_SEED={seed} to replay)")
    return np.random.default_rng(seed)
