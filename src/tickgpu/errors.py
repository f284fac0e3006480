"""Exceptions that tickgpu raises (besides ValueError/TypeError for bad arguments)."""


class TickGpuError(RuntimeError):
    """Base class of tickgpu's runtime errors."""


class BackendUnavailable(TickGpuError):
    """The requested backend cannot run here (no GPU, no driver, no bundle for this architecture)."""
