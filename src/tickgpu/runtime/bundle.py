"""Kernel bundles: the manifest, the architecture choice, and loading every cubin once.

A bundle (``src/tickgpu/kernels/bundle/``, built by ``tickgpu build-kernels``) is a manifest.json
plus one cubin per kernel variant and architecture; the format is fixed in CONTRACTS.md. Loading
checks what the manifest promises against what the driver reports (``cuFuncGetParamInfo``): a
manifest that disagrees with its cubin would otherwise mean arguments read from the wrong bytes.

The manifest is parsed here against the contract directly, so the runtime depends only on the
bundle's files, not on the (build-time) kernel builder.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tickgpu.errors import TickGpuError

__all__ = ["BundleError", "ParamSpec", "KernelSpec", "Manifest", "LoadedKernel", "Bundle",
           "default_bundle_dir", "arch_for", "FAMILY_ARGS", "SCRATCH_PARAMS", "QUANT_FAMILY"]

PARAM_SIZES = {"ptr": 8, "i32": 4, "i64": 8, "f32": 4, "f64": 8}

# Argument order of each kernel family (CONTRACTS.md, "Kernel bundle"): (logical name, kind).
# Packing goes by position, so a builder may name parameters as it likes; names are for messages.
_BSM_INPUTS = ("spot", "strike", "t", "rate", "vol", "div", "call")
_IV_INPUTS = ("price", "spot", "strike", "t", "rate", "div", "call")
GREEKS_OUTPUTS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
FAMILY_ARGS: dict[str, tuple[tuple[str, str], ...]] = {
    "greeks": tuple(p for x in _BSM_INPUTS for p in ((x, "ptr"), ("s_" + x, "i32")))
    + tuple((o, "ptr") for o in GREEKS_OUTPUTS) + (("n", "i32"),),
    "implied_vol": tuple(p for x in _IV_INPUTS for p in ((x, "ptr"), ("s_" + x, "i32")))
    + (("vol_out", "ptr"), ("status_out", "ptr"), ("n", "i32")),
    "surface": (("strikes", "ptr"), ("expiries", "ptr"), ("vols", "ptr"), ("nk", "i32"), ("nt", "i32"),
                ("mode", "i32"), ("strike", "ptr"), ("s_strike", "i32"), ("t", "ptr"), ("s_t", "i32"),
                ("out", "ptr"), ("what", "i32"), ("n", "i32")),
}
# Triton 3.6 appends these two pointers to every kernel (global scratch, profile scratch).
SCRATCH_PARAMS = ("global_scratch", "profile_scratch")
# The quant family (tickgpu.quant's layers) has one argument list per kernel: its entries list their
# own parameters (checked against the cubin at load) and say how their grid is formed.
QUANT_FAMILY = "quant"
FAMILIES = (*FAMILY_ARGS, QUANT_FAMILY)
GRIDS = ("elements", "rows", "tiles")
# Dynamic shared memory above this needs the function's explicit opt-in (cuFuncSetAttribute).
SHARED_DEFAULT_LIMIT = 48 * 1024

# Cubins run on the compute capabilities of their major version at or above their own:
# sm_80 code runs on 8.0, 8.6, 8.7, 8.9; sm_90 on 9.0 (sm_90a only on exactly 9.0).
SUPPORTED_ARCHES = ("sm_80", "sm_90")


class BundleError(TickGpuError):
    """The kernel bundle is missing, malformed, or disagrees with its cubins or this device."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str      # ptr | i32 | i64 | f32 | f64
    size: int
    offset: int


@dataclass(frozen=True)
class KernelSpec:
    """One manifest entry: a kernel variant compiled for one architecture."""

    variant: str
    family: str
    arch: str
    file: str
    entry: str
    source: str
    num_warps: int
    block: tuple[int, int, int]
    shared: int
    elements_per_block: int
    dtype: str
    aligned16: bool                # assumes 16-byte aligned pointers and n % 16 == 0
    params: tuple[ParamSpec, ...]
    scratch_global: int = 0
    scratch_global_align: int = 1
    scratch_profile: int = 0
    source_hash: str = ""
    # How the grid is formed: "elements" ceil(n / elements_per_block); quant kernels: "rows" (M, 1, 1)
    # or "tiles" (ceil(M / block_m) * ceil(N / block_n), 1, 1), M and N being parameters so named.
    grid: str = "elements"
    block_m: int = 0
    block_n: int = 0
    multiple_of_16: tuple[str, ...] = ()   # with aligned16: i32 parameters assumed multiples of 16

    @property
    def n_contract(self) -> int:
        """How many parameters precede Triton's trailing scratch pointers."""
        if self.family in FAMILY_ARGS:
            return len(FAMILY_ARGS[self.family])
        return sum(1 for p in self.params if p.name not in SCRATCH_PARAMS)

    @property
    def contract_params(self) -> tuple[ParamSpec, ...]:
        """The parameters of the family's contract (without Triton's trailing scratch pointers)."""
        return self.params[: self.n_contract]

    @property
    def scratch_params(self) -> tuple[ParamSpec, ...]:
        return self.params[self.n_contract:]

    def grid_for(self, values) -> tuple[int, int, int]:
        """The launch grid of a "rows" or "tiles" kernel for contract values `values` (in order)."""
        names = [p.name for p in self.contract_params]
        m = int(values[names.index("M")])
        if self.grid == "rows":
            return (max(1, m), 1, 1)
        if self.grid == "tiles":
            n = int(values[names.index("N")])
            return (max(1, -(-m // self.block_m) * -(-n // self.block_n)), 1, 1)
        raise BundleError(f"kernel {self.variant}: its grid follows n (elements_per_block), not its arguments")


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


def _spec_from_json(entry: dict, where: str) -> KernelSpec:
    try:
        variant = str(entry["variant"])
    except (KeyError, TypeError):
        raise BundleError(f"{where}: a kernel entry has no 'variant'") from None

    def need(key, conv=None):
        if key not in entry:
            raise BundleError(f"{where}: kernel {variant}: missing '{key}'")
        return conv(entry[key]) if conv else entry[key]

    family = need("family", str)
    if family not in FAMILIES:
        raise BundleError(f"{where}: kernel {variant}: unknown family {family!r} (expected one of {sorted(FAMILIES)})")
    quant = family == QUANT_FAMILY
    dtype = need("dtype", str)
    if dtype not in (("f32", "f64", "f16", "bf16") if quant else ("f32", "f64")):
        raise BundleError(f"{where}: kernel {variant}: dtype {dtype!r} is not one of the {family} family's")
    block = tuple(int(b) for b in need("block"))
    if len(block) != 3 or min(block) < 1 or block[0] * block[1] * block[2] > 1024:
        raise BundleError(f"{where}: kernel {variant}: block {block} is not a valid launch block")
    source = need("source", str)
    num_warps = int(entry.get("num_warps", 0))
    if source == "triton" and block != (num_warps * 32, 1, 1):
        raise BundleError(f"{where}: kernel {variant}: a Triton kernel's block must be (num_warps*32, 1, 1) "
                          f"= ({num_warps * 32}, 1, 1), got {block}")
    epb = need("elements_per_block", int)
    if epb < 1:
        raise BundleError(f"{where}: kernel {variant}: elements_per_block must be >= 1, got {epb}")

    params = []
    for i, p in enumerate(need("params")):
        kind = str(p.get("kind"))
        if kind not in PARAM_SIZES:
            raise BundleError(f"{where}: kernel {variant}: param {i} ({p.get('name')}): unknown kind {kind!r}")
        size, offset = int(p.get("size", -1)), int(p.get("offset", -1))
        if size != PARAM_SIZES[kind] or offset < 0 or offset % size:
            raise BundleError(f"{where}: kernel {variant}: param {i} ({p.get('name')}): size {size} / offset "
                              f"{offset} do not fit kind {kind} ({PARAM_SIZES[kind]} bytes, naturally aligned)")
        params.append(ParamSpec(str(p.get("name", f"arg{i}")), kind, size, offset))

    grid, block_m, block_n = "elements", 0, 0
    if quant:
        grid = str(entry.get("grid"))
        if grid not in ("rows", "tiles"):
            raise BundleError(f"{where}: kernel {variant}: a quant kernel needs grid 'rows' or 'tiles', got {grid!r}")
        names = [p.name for p in params]
        if "M" not in names or (grid == "tiles" and "N" not in names):
            raise BundleError(f"{where}: kernel {variant}: grid {grid!r} needs parameters M{' and N' if grid == 'tiles' else ''}")
        if grid == "tiles":
            block_m, block_n = int(entry.get("block_m", 0)), int(entry.get("block_n", 0))
            if block_m < 1 or block_n < 1:
                raise BundleError(f"{where}: kernel {variant}: grid 'tiles' needs block_m and block_n >= 1")
        contract = tuple((p.name, p.kind) for p in params if p.name not in SCRATCH_PARAMS)
    else:
        contract = FAMILY_ARGS[family]
    if len(params) < len(contract):
        raise BundleError(f"{where}: kernel {variant}: {len(params)} params, the {family} contract has "
                          f"{len(contract)} ({', '.join(n for n, _ in contract)})")
    for i, ((name, kind), p) in enumerate(zip(contract, params)):
        if p.kind != kind:
            raise BundleError(f"{where}: kernel {variant}: param {i} ({p.name}) is {p.kind}, the {family} "
                              f"contract wants {kind} for '{name}' there")
    extra = params[len(contract):]
    if extra and (len(extra) > len(SCRATCH_PARAMS) or any(p.kind != "ptr" for p in extra)):
        raise BundleError(f"{where}: kernel {variant}: unexpected trailing params "
                          f"{[p.name for p in extra]} (only Triton's scratch pointers may follow the contract)")

    scratch = entry.get("scratch") or {}
    return KernelSpec(
        variant=variant, family=family, arch=need("arch", str), file=need("file", str),
        entry=need("entry", str), source=source, num_warps=num_warps, block=block,
        shared=int(entry.get("shared", 0)), elements_per_block=epb, dtype=dtype,
        aligned16=bool(need("aligned16")), params=tuple(params),
        scratch_global=int(scratch.get("global", 0)), scratch_global_align=max(1, int(scratch.get("global_align", 1))),
        scratch_profile=int(scratch.get("profile", 0)), source_hash=str(entry.get("source_hash", "")),
        grid=grid, block_m=block_m, block_n=block_n, multiple_of_16=tuple(entry.get("multiple_of_16") or ()),
    )


@dataclass
class Manifest:
    """A parsed manifest.json: every kernel variant of every architecture."""

    root: Path
    kernels: list[KernelSpec]
    created: str = ""
    compilers: dict = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path | str) -> "Manifest":
        """Parse ``root/manifest.json``; BundleError naming the file and kernel on any defect."""
        root = Path(root)
        path = root / "manifest.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise BundleError(f"no kernel bundle at {root} (manifest.json missing; run `tickgpu build-kernels`)") from None
        except (OSError, ValueError) as e:
            raise BundleError(f"{path}: unreadable: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != 1:
            raise BundleError(f"{path}: format must be 1, got {doc.get('format') if isinstance(doc, dict) else doc!r}")
        kernels = [_spec_from_json(k, str(path)) for k in doc.get("kernels", [])]
        seen = set()
        for k in kernels:
            if (k.arch, k.variant) in seen:
                raise BundleError(f"{path}: kernel {k.variant} appears twice for {k.arch}")
            seen.add((k.arch, k.variant))
        return cls(root, kernels, str(doc.get("created", "")), dict(doc.get("compilers") or {}))

    def for_arch(self, arch: str) -> list[KernelSpec]:
        return [k for k in self.kernels if k.arch == arch]


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
        if spec.scratch_global > 0 and not spec.scratch_params:
            raise BundleError(f"kernel {spec.variant}: needs {spec.scratch_global} bytes of global scratch per "
                              f"block but has no scratch parameter to pass it through")
        if spec.scratch_profile > 0:
            # Profile scratch only exists in kernels built with instrumentation; a shipped bundle
            # should not have it, and sizing it is the profiler's business.
            raise BundleError(f"kernel {spec.variant}: needs {spec.scratch_profile} bytes of profile scratch "
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
        if spec.scratch_global <= 0 or grid_blocks <= kernel.scratch_grid:
            return
        blocks = 1 << max(0, (grid_blocks - 1).bit_length())   # power of two: few regrowths
        per_block = -(-spec.scratch_global // spec.scratch_global_align) * spec.scratch_global_align
        name = spec.scratch_params[0].name
        old = kernel.scratch.get(name, 0)
        if old:
            self.driver.ctx_synchronize()   # a launch in flight may still use the old block
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
        cands = [k for k in self.kernels.values()
                 if k.spec.family == family and k.spec.dtype == dtype and (aligned16 or not k.spec.aligned16)
                 and k.spec.grid == "elements"]
        if not cands:
            raise BundleError(f"no {family} kernel for dtype {dtype}"
                              f"{'' if aligned16 else ' that accepts unaligned pointers or sizes'} on {self.arch} "
                              f"in the bundle at {self.manifest.root}")
        if aligned16 and any(k.spec.aligned16 for k in cands):
            cands = [k for k in cands if k.spec.aligned16]
        filling = [k for k in cands if -(-n // k.spec.elements_per_block) >= sm_count]
        if filling:
            return max(filling, key=lambda k: (k.spec.elements_per_block, k.spec.block[0]))
        return min(cands, key=lambda k: (k.spec.elements_per_block, k.spec.block[0]))
