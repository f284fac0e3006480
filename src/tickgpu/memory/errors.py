"""The memory layer's exception."""
from __future__ import annotations

from tickgpu.errors import TickGpuError

__all__ = ["PoolError"]


class PoolError(TickGpuError, MemoryError):
    """A pool refused: a request that cannot fit (size and what is free are in the message), a
    double free, a pointer the pool never handed out, or use after close."""
