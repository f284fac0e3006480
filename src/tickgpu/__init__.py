"""tickgpu: latency-first option and order-book kernels on the GPU, and on the CPU where it wins.

Importing tickgpu makes no driver call and imports neither torch nor triton.
"""
from tickgpu.errors import BackendUnavailable, TickGpuError
from tickgpu.finance.greeks import Greeks, greeks
from tickgpu.finance.iv import IVStatus, implied_vol
from tickgpu.finance.surface import VolSurface
from tickgpu.finance.book import Book, BookFeatures
from tickgpu.finance.lobster import LobsterData, read_lobster


def warmup() -> None:
    """Load the GPU kernel bundle and launch every kernel variant and graph once.

    The driver loads modules lazily, so without this the first real call pays for loading and
    first-launch setup. Raises BackendUnavailable where no GPU is usable. See tickgpu.runtime.warmup.
    """
    from tickgpu.runtime import warmup as _warmup

    _warmup()

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "Book",
    "BookFeatures",
    "Greeks",
    "IVStatus",
    "LobsterData",
    "TickGpuError",
    "VolSurface",
    "greeks",
    "implied_vol",
    "read_lobster",
    "warmup",
    "__version__",
]
