"""Fixtures shared by the CPU tests."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def gpu_ctx(tmp_path):
    """The runtime on the mock driver (tests/cpu/cuda_mock.py), 64 staging elements a tick."""
    import tickgpu.runtime as rt
    from cuda_mock import MockDriver, default_entries, write_bundle

    c = rt.init(driver=MockDriver(), bundle_dir=write_bundle(tmp_path / "bundle", default_entries()),
                staging_elements=64)
    yield c
    rt.reset()


@pytest.fixture
def quant_driver():
    from cuda_mock import MockDriver

    return MockDriver()


@pytest.fixture
def quant_ctx(quant_driver, tmp_path):
    """The runtime on `quant_driver` (the mock) with the quant kernels' entries besides the
    element-wise ones, 64 staging elements a tick."""
    import tickgpu.runtime as rt
    from cuda_mock import default_entries, quant_entries, write_bundle

    entries = default_entries() + quant_entries("sm_90")
    c = rt.init(driver=quant_driver, bundle_dir=write_bundle(tmp_path / "bundle", entries), staging_elements=64)
    yield c
    rt.reset()
