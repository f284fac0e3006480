"""tickgpu: latency-first option and order-book kernels on the GPU, and on the CPU where it wins.

Importing tickgpu makes no driver call and imports neither torch nor triton.
"""
from tickgpu.errors import BackendUnavailable, TickGpuError
from tickgpu.finance.greeks import Greeks, greeks
from tickgpu.finance.iv import IVStatus, implied_vol
from tickgpu.finance.surface import VolSurface
from tickgpu.finance.book import Book, BookFeatures
from tickgpu.finance.lobster import LobsterData, read_lobster

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
    "__version__",
]
