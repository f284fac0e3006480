"""Memory that keeps the GPU fed: pinned and huge-page host memory, mapped zero-copy buffers,
managed arrays prefetched in blocks, and a three-level device pool (slabs, the driver's stream-ordered
pool, mapped VMM ranges) with lazy reclamation.

- `PinnedPool` / `PinnedBuffer` (`tickgpu.memory.host`): page-locked, 64-byte-aligned host
  memory from huge pages where the OS allows, registered with the driver, reused by size class,
  never handed out again while an asynchronous copy may still read or write it.
- `mapped` / `MappedBuffer` (`tickgpu.memory.host`): pinned host memory with a device address,
  for ticks small enough that a kernel reading across PCIe beats a copy; `mapped_array`: a NumPy
  array there, its buffer returned with the last view (what a zero-copy `bind_greeks(..., out=)`
  binds).
- `ManagedArray` (`tickgpu.memory.managed`): managed memory with read-mostly advice and block
  prefetch, or explicit copies where managed memory is unavailable or degraded.
- `DevicePool` (`tickgpu.memory.device`): size-class slabs in a few preallocated blocks for small
  buffers, the driver's stream-ordered pool for the rest; lazy batched frees; statistics;
  allocators for CuPy and PyTorch.

Importing this package makes no driver call and imports neither torch nor cupy.
"""
from __future__ import annotations

import importlib

__all__ = ["PinnedPool", "PinnedBuffer", "MappedBuffer", "mapped", "mapped_array", "ManagedArray", "DevicePool",
           "DeviceBuffer", "PoolStats", "PoolError"]

_HOME = {"PinnedPool": "host", "PinnedBuffer": "host", "MappedBuffer": "host", "mapped": "host", "mapped_array": "host",
         "ManagedArray": "managed", "DevicePool": "device", "DeviceBuffer": "device", "PoolStats": "device",
         "PoolError": "errors"}


def __getattr__(name: str):
    # Lazy: `import tickgpu.memory` stays cheap, and each part loads only when it is used.
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'tickgpu.memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tickgpu.memory.{home}"), name)
    globals()[name] = value
    return value
