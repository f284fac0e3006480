"""Kernel bundles: the architecture choice, and loading every cubin once.

A bundle (``src/tickgpu/kernels/bundle/``, built by ``tickgpu build-kernels``) is a manifest.json
plus one cubin per kernel variant and architecture. The manifest is read and validated by
:mod:`tickgpu.kernels.manifest` (standard library only, so the runtime needs neither Triton nor
the builder); this module adds what only a running device needs. Loading checks what the manifest
promises against what the driver reports (``cuFuncGetParamInfo``): a manifest that disagrees with
its cubin would otherwise mean arguments read from the wrong bytes.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tickgpu.errors import TickGpuError
from tickgpu.kernels import manifest as mf
from tickgpu.kernels.manifest import GREEKS_OUTPUTS, QUANT_FAMILY

__all__ = ["BundleError", "KernelSpec", "Manifest", "LoadedKernel", "Bundle",
           "default_bundle_dir", "arch_for", "GREEKS_OUTPUTS", "QUANT_FAMILY"]

# Dynamic shared memory above this needs the function's explicit opt-in (cuFuncSetAttribute).
SHARED_DEFAULT_LIMIT = 48 * 1024

# Cubins run on the compute capabilities of their major version at or above their own:
# sm_80 code runs on 8.0, 8.6, 8.7, 8.9; sm_90 on 9.0 (sm_90a only on exactly 9.0).
SUPPORTED_ARCHES = ("sm_80", "sm_90")


class BundleError(TickGpuError):
    """The kernel bundle is missing, malformed, or disagrees with its cubins or this device."""


@dataclass(frozen=True)
class KernelSpec(mf.Kernel):
    """One validated manifest entry (:class:`tickgpu.kernels.manifest.Kernel`), with what launching needs.

    ``grid`` is None for kernels whose grid follows n (``ceil(n / elements_per_block)``); quant
    kernels say "rows" or "tiles" (see :meth:`grid_for`).
    """

    @classmethod
    def of(cls, kernel: mf.Kernel) -> "KernelSpec":
        return cls(**{f.name: getattr(kernel, f.name) for f in dataclasses.fields(kernel)})

    @property
    def n_contract(self) -> int:
        """How many parameters precede Triton's trailing scratch pointers."""
        # A validated entry's params are its contract, then those two pointers for Triton kernels.
        return len(self.params) - (len(mf.TRITON_SCRATCH_PARAMS) if self.source == "triton" else 0)

    @property
    def contract_params(self) -> tuple[mf.Param, ...]:
        """The parameters of the family's contract (without Triton's trailing scratch pointers)."""
        return self.params[: self.n_contract]

    @property
    def scratch_params(self) -> tuple[mf.Param, ...]:
        return self.params[self.n_contract:]

    def grid_for(self, values) -> tuple[int, int, int]:
        """The launch grid of a "rows" or "tiles" kernel for contract values `values` (in order)."""
        names = [p.name for p in self.contract_params]
        if self.grid == "rows":
            return (max(1, int(values[names.index("M")])), 1, 1)
        if self.grid == "tiles":
            m, n = int(values[names.index("M")]), int(values[names.index("N")])
            return (max(1, -(-m // self.block_m) * -(-n // self.block_n)), 1, 1)
        raise BundleError(f"kernel {self.variant}: its grid follows n (elements_per_block), not its arguments")


@dataclass(frozen=True)
class Manifest(mf.Manifest):
    """A bundle's manifest.json, validated, with its kernels as :class:`KernelSpec`."""

    @classmethod
    def read(cls, root: Path | str) -> "Manifest":
        """Parse ``root/manifest.json``; BundleError naming the file, kernel and field on any defect."""
        root = Path(root)
        path = root / "manifest.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise BundleError(f"no kernel bundle at {root} (manifest.json missing; run `tickgpu build-kernels`)") from None
        except (OSError, ValueError) as e:
            raise BundleError(f"{path}: unreadable: {e}") from None
        try:
            m = cls.from_json(doc, root)
        except ValueError as e:
            raise BundleError(f"{path}: {e}") from None
        # The cubin files are checked when loaded (Bundle), by the driver itself.
        return dataclasses.replace(m, kernels=tuple(KernelSpec.of(k) for k in m.kernels))

    def for_arch(self, arch: str) -> list[KernelSpec]:
        return [k for k in self.kernels if k.arch == arch]


def default_bundle_dir() -> Path:
    """``$TICKGPU_BUNDLE`` if set, else the bundle shipped inside the package."""
    env = os.environ.get("TICKGPU_BUNDLE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "kernels" / "bundle"


def arch_for(cc: tuple[int, int]) -> tuple[str | None, str]:
    """The bundle architecture that runs on compute capability `cc`: (arch, "") or (None, reason)."""
    major, minor = cc
    if (major, minor) == (9, 0):
        return "sm_90", ""
    if major == 8:
        return "sm_80", ""
    return None, (f"compute capability {major}.{minor} is not supported: the kernel bundle holds cubins "
                  f"for {', '.join(SUPPORTED_ARCHES)} (8.x and 9.0 devices); cubins do not run across "
                  f"major versions")


@dataclass
class LoadedKernel:
    """A kernel variant resident on the device: its function handle and its scratch memory."""

    spec: KernelSpec
    module: int
    func: int
    load_seconds: float
    scratch: dict[str, int] = field(default_factory=dict)   # param name -> device pointer (0 = none)
    scratch_grid: int = 0                                    # blocks the global scratch is sized for

    @property
    def variant(self) -> str:
        return self.spec.variant


class Bundle:
    """Every kernel of one architecture, loaded into the current context.

    Parameters
    ----------
    driver : Driver
        The driver (or a mock with the same methods).
    manifest : Manifest
    arch : str
        "sm_80" or "sm_90".

    Raises
    ------
    BundleError
        No kernel for `arch`; a cubin missing; parameters disagreeing with cuFuncGetParamInfo.
    CudaError
        A driver call failed (the error names the kernel).
    """

    def __init__(self, driver, manifest: Manifest, arch: str):
        self.driver = driver
        # The wait for the whole context before a scratch block is replaced; the owning context
        # sets its own (which parks resident kernels first).
        self.synchronize = driver.ctx_synchronize
        self.manifest = manifest
        self.arch = arch
        specs = manifest.for_arch(arch)
        if not specs:
            raise BundleError(f"the kernel bundle at {manifest.root} has no kernels for {arch}")
        t0 = time.perf_counter()
        self.kernels: dict[str, LoadedKernel] = {}
        for spec in specs:
            self.kernels[spec.variant] = self._load(spec)
        self.load_seconds = time.perf_counter() - t0   # cold start: reading, loading, checking
        self.scratch_epoch = 0   # bumped when a scratch block moves (argument values holding it go stale)
        self._choices: dict[tuple, list[LoadedKernel]] = {}   # select's candidates, by (family, dtype, aligned16)

    def _load(self, spec: KernelSpec) -> LoadedKernel:
        path = self.manifest.root / spec.file
        try:
            image = path.read_bytes()
        except OSError as e:
            raise BundleError(f"kernel {spec.variant}: cubin {path} unreadable: {e}") from None
        t0 = time.perf_counter()
        module = self.driver.module_load_data(image, kernel=spec.variant)
        func = self.driver.module_get_function(module, spec.entry, kernel=spec.variant)
        self._check_params(spec, func)
        if spec.shared > SHARED_DEFAULT_LIMIT:
            # Triton's big GEMM tiles pipeline through more than the default 48 KB.
            try:
                static = self.driver.func_attribute("SHARED_SIZE_BYTES", func, kernel=spec.variant)
                self.driver.func_set_attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES", func, spec.shared,
                                               kernel=spec.variant)
            except Exception as e:
                raise BundleError(f"kernel {spec.variant}: needs {spec.shared} bytes of dynamic shared memory "
                                  f"and the device refused the opt-in: {e}") from None
            if static:
                raise BundleError(f"kernel {spec.variant}: has {static} bytes of static shared memory on top of "
                                  f"{spec.shared} dynamic; the bundle assumes none")
        loaded = LoadedKernel(spec, module, func, time.perf_counter() - t0)
        for p in spec.scratch_params:
            loaded.scratch[p.name] = 0
        if spec.scratch["global"] > 0 and not spec.scratch_params:
            raise BundleError(f"kernel {spec.variant}: needs {spec.scratch['global']} bytes of global scratch per "
                              f"block but has no scratch parameter to pass it through")
        if spec.scratch["profile"] > 0:
            # Profile scratch only exists in kernels built with instrumentation; a shipped bundle
            # should not have it, and sizing it is the profiler's business.
            raise BundleError(f"kernel {spec.variant}: needs {spec.scratch['profile']} bytes of profile scratch "
                              f"(built with instrumentation?); rebuild the bundle without profiling")
        return loaded

    def _check_params(self, spec: KernelSpec, func: int) -> None:
        info = self.driver.func_param_info(func, kernel=spec.variant)
        if len(info) != len(spec.params):
            raise BundleError(f"kernel {spec.variant}: the cubin's entry {spec.entry} takes {len(info)} params, "
                              f"the manifest lists {len(spec.params)}")
        for i, (p, (offset, size)) in enumerate(zip(spec.params, info)):
            if (p.offset, p.size) != (offset, size):
                raise BundleError(f"kernel {spec.variant}: param {i} ({p.name}): manifest says offset {p.offset} "
                                  f"size {p.size}, the cubin says offset {offset} size {size}")

    def ensure_scratch(self, kernel: LoadedKernel, grid_blocks: int) -> None:
        """Size `kernel`'s global scratch for `grid_blocks` blocks (allocated once, grown rarely).

        Triton's global scratch is per program (block): the kernel indexes it by program id.
        """
        spec = kernel.spec
        size, align = spec.scratch["global"], spec.scratch["global_align"]
        if size <= 0 or grid_blocks <= kernel.scratch_grid:
            return
        blocks = 1 << max(0, (grid_blocks - 1).bit_length())   # power of two: few regrowths
        per_block = -(-size // align) * align
        name = spec.scratch_params[0].name
        old = kernel.scratch.get(name, 0)
        if old:
            self.synchronize()   # a launch in flight may still use the old block
            self.driver.mem_free(old)
        kernel.scratch[name] = self.driver.mem_alloc(per_block * blocks)
        kernel.scratch_grid = blocks
        self.scratch_epoch += 1

    def select(self, family: str, dtype: str, n: int, aligned16: bool, sm_count: int) -> LoadedKernel:
        """The variant for `n` elements of `family`/`dtype`.

        Alignment: a variant compiled with ``aligned16`` assumes every pointer 16-byte aligned and
        n a multiple of 16 (so its bound checks are uniform over groups of 16 and it may use vector
        loads and stores); pass ``aligned16=True`` only when both hold, else it could fault or
        read wrong. Size: the largest elements_per_block
        that still gives every SM a block, so big work runs in big blocks and small work is spread
        over many SMs; below that, the smallest block.
        """
        cands = self._choices.get((family, dtype, aligned16))
        if cands is None:
            cands = self._choices[(family, dtype, aligned16)] = self._candidates(family, dtype, aligned16)
        # Largest block first: the first that still fills every SM, else the smallest.
        for k in cands:
            if -(-n // k.spec.elements_per_block) >= sm_count:
                return k
        return cands[-1]

    def _candidates(self, family: str, dtype: str, aligned16: bool) -> list[LoadedKernel]:
        """`select`'s variants of `family`/`dtype`, largest (elements per block, block) first."""
        cands = [k for k in self.kernels.values()
                 if k.spec.family == family and k.spec.dtype == dtype and (aligned16 or not k.spec.aligned16)
                 and k.spec.grid is None]
        if not cands:
            raise BundleError(f"no {family} kernel for dtype {dtype}"
                              f"{'' if aligned16 else ' that accepts unaligned pointers or sizes'} on {self.arch} "
                              f"in the bundle at {self.manifest.root}")
        if aligned16 and any(k.spec.aligned16 for k in cands):
            cands = [k for k in cands if k.spec.aligned16]
        return sorted(cands, key=lambda k: (k.spec.elements_per_block, k.spec.block[0]), reverse=True)
