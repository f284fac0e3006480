"""tickgpu's GPU runtime: kernel bundles on the CUDA driver API, without PyTorch or Triton.

Importing this package makes no driver call. The device, its context and the kernel bundle are
set up on first use (`context()`), and `warmup()` pays every remaining first-use cost (module
loading, graph capture) up front.

Layers: `driver` (cuda.bindings, the only module touching it) -> `bundle` (manifest, cubins) ->
`launch` (argument buffers packed once) -> `graph` (GraphRunner: one tick as a replayed graph) ->
`ops` (greeks, implied vol, surface evaluation); `streams` (Pipeline: host arrays far larger
than a tick as overlapped fetch / compute / write on three streams); `kernels_api` (named kernels
on device buffers: the quantized layers of tickgpu.quant). The launch-and-wait calls run in C
(csrc/hot/hot.c) with the GIL released.
"""
from __future__ import annotations

import os
import threading

from tickgpu.runtime.arrays import is_device_array

__all__ = ["available", "unavailable_reason", "warmup", "is_device_array", "context", "init", "reset",
           "kernel_runtime", "Pipeline", "PipelineStats", "resident", "ResidentGreeks", "bind_greeks",
           "BoundGreeks", "bind_implied_vol", "BoundImpliedVol", "DeviceBoundGreeks", "DeviceBoundImpliedVol"]

# Imported on first use: `import tickgpu` stays free of the runtime's heavier modules.
_LAZY = {"resident": "tickgpu.runtime.mailbox", "ResidentGreeks": "tickgpu.runtime.mailbox",
         "bind_greeks": "tickgpu.runtime.bound", "BoundGreeks": "tickgpu.runtime.bound",
         "bind_implied_vol": "tickgpu.runtime.bound", "BoundImpliedVol": "tickgpu.runtime.bound",
         "DeviceBoundGreeks": "tickgpu.runtime.bound_device", "DeviceBoundImpliedVol": "tickgpu.runtime.bound_device",
         "Pipeline": "tickgpu.runtime.streams", "PipelineStats": "tickgpu.runtime.streams"}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tickgpu.runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


_lock = threading.Lock()
_context = None
_probe: tuple[bool, str] | None = None


def _probe_device() -> tuple[bool, str]:
    """Can the GPU backend run here? Light: driver, device, architecture, bundle -- no module loads."""
    if os.environ.get("TICKGPU_DISABLE_GPU"):
        return False, "disabled by TICKGPU_DISABLE_GPU"
    try:
        from tickgpu.runtime.driver import CudaError, Driver
    except ImportError as e:   # pragma: no cover - the module itself imports nothing optional
        return False, f"runtime not importable: {e}"
    try:
        d = Driver()
    except ImportError:
        return False, "cuda-bindings is not installed (pip install 'tickgpu[gpu]')"
    from tickgpu.errors import BackendUnavailable
    from tickgpu.runtime.bundle import BundleError, Manifest, arch_for, default_bundle_dir

    try:
        d.init()
        count = d.device_count()
        from tickgpu.runtime.device import env_ordinal

        ordinal = env_ordinal()
        if count == 0:
            return False, "no CUDA device"
        if not 0 <= ordinal < count:
            return False, f"TICKGPU_DEVICE={ordinal} but {count} device(s) present"
        dev = d.device_get(ordinal)
        arch, reason = arch_for(d.compute_capability(dev))
        if arch is None:
            return False, f"{d.device_name(dev)}: {reason}"
        manifest = Manifest.read(default_bundle_dir())
        if not manifest.for_arch(arch):
            return False, f"the kernel bundle at {manifest.root} has no kernels for {arch}"
    except CudaError as e:
        if e.name == "CUDA_DRIVER_NOT_FOUND":
            return False, "no NVIDIA driver (libcuda.so.1 not found)"
        return False, f"CUDA driver: {e}"
    except (BundleError, BackendUnavailable) as e:
        return False, str(e)
    except Exception as e:     # available() never raises
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def available() -> bool:
    """True where the GPU backend can run (driver, supported device, bundle); cached, never raises."""
    global _probe
    if _context is not None:
        return True
    if _probe is None:
        with _lock:
            if _probe is None:
                _probe = _probe_device()
    return _probe[0]


def unavailable_reason() -> str:
    """Why `available()` is False ("" when it is True); never raises."""
    available()
    return "" if _context is not None else _probe[1]


def context():
    """The runtime `Context` on the current device, created on first use.

    Raises
    ------
    BackendUnavailable, CudaError, BundleError
        Where the GPU backend cannot run; the message says why.
    """
    global _context
    if _context is None:
        with _lock:
            if _context is None:
                from tickgpu.runtime import fasttick
                from tickgpu.runtime.device import Context

                c = Context()
                fasttick.install(c)
                _context = c
    return _context


def init(driver=None, device: int | None = None, bundle_dir=None, staging_elements: int | None = None):
    """Create the runtime context explicitly (a chosen device, bundle or driver stand-in).

    Replaces any existing one; returns it.
    """
    global _context, _probe
    from tickgpu.runtime import fasttick
    from tickgpu.runtime.device import Context

    with _lock:
        fasttick.uninstall()
        _context = Context(driver=driver, device=device, bundle_dir=bundle_dir, staging_elements=staging_elements)
        _probe = (True, "")
        fasttick.install(_context)
    return _context


def reset() -> None:
    """Forget the context and the availability probe (tests; the next call starts afresh)."""
    global _context, _probe
    with _lock:
        if _context is not None:
            from tickgpu.runtime import fasttick

            fasttick.uninstall()
        from tickgpu.runtime.arrays import forget_results

        forget_results()
        _context, _probe = None, None


def warmup() -> dict:
    """Load, launch and capture everything now, so the first real call costs what the thousandth does.

    Returns timing and counts ({"seconds", "kernels", "graphs"}). Raises BackendUnavailable (or
    the driver's error) where the GPU backend cannot run.
    """
    from tickgpu.errors import BackendUnavailable
    from tickgpu.runtime import ops

    if not available():
        raise BackendUnavailable(f"warmup: no usable GPU ({unavailable_reason()})")
    info = ops.warmup(context())
    # Last, the public entry points once each on a few host options, so that what the first real
    # call runs (argument checks, dispatch, the tick path) is what ran last: loaded, cached.
    import numpy as np

    import tickgpu
    from tickgpu import dispatch

    if dispatch.gpu_available():   # False where it was asked before a context was made by hand
        # Two shapes of call: single values broadcast against a few strikes, and a whole chain of
        # arrays of the requested dtype (the usual tick). Each takes its own branches through the
        # checks and the staging; run three times, the interpreter's caches of both are warm.
        # (In one process on a mock driver, a first 1,024-option call after warm-up calls of 16
        # options cost 100-270 us against 12 us in steady state; after chain-sized calls, 25-35 us.)
        k = np.linspace(90.0, 110.0, 16)
        chain = np.linspace(80.0, 120.0, 2000)
        for _ in range(3):
            for dtype in (np.float64, np.float32):
                g = tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, dtype=dtype, backend="gpu")
                tickgpu.implied_vol(g.price, 100.0, k, 0.5, 0.01, dtype=dtype, backend="gpu")
                c = [np.full_like(chain, v, dtype=dtype) for v in (100.0, 0.0, 0.5, 0.01, 0.2)]
                c[1] = chain.astype(dtype)
                g = tickgpu.greeks(*c, dtype=dtype, backend="gpu")
                tickgpu.implied_vol(g.price, *c[:4], dtype=dtype, backend="gpu")
        # Then the commonest tick, a chain of strikes with one spot, expiry, rate and vol, several
        # times in each dtype, the default last: a first call of that kind finds its code and data
        # in the caches. (On an H200 host its first call after warm-up took 1.9x steady state
        # without this and 1.38x with it; a first call of another kind still takes 2.9x; a full
        # garbage collection here instead made it 4.6x. benchmarks/results/h200-2026-11-30-n/)
        chain = np.linspace(80.0, 120.0, 1024)
        for _ in range(10):
            for dtype in (np.float32, np.float64):
                tickgpu.greeks(np.full(1024, 100.0, dtype), chain.astype(dtype), 0.5, 0.01, 0.2, dtype=dtype,
                               backend="gpu")
    return info


def kernel_runtime():
    """The `KernelRuntime` of the current context: bundle kernels by name on device buffers.

    What :mod:`tickgpu.quant` runs its GPU plans on (see `tickgpu.runtime.kernels_api`).

    Raises
    ------
    BackendUnavailable
        Where the GPU backend cannot run (the message says why).
    """
    from tickgpu.errors import BackendUnavailable
    from tickgpu.runtime.ops import kernel_runtime_of

    if not available():
        raise BackendUnavailable(f"kernel_runtime: no usable GPU ({unavailable_reason()})")
    return kernel_runtime_of(context())
