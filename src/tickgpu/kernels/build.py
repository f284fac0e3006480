"""Ahead-of-time kernel bundle builder: ``tickgpu build-kernels``.

Compiles every Triton kernel (``triton.compile`` on an ``ASTSource`` with an explicit
``GPUTarget``) and every CUDA C kernel (``nvcc -cubin``) for each requested architecture and
writes a bundle: one cubin per variant under ``<out>/sm_XX/`` and ``<out>/manifest.json``
(format described in :mod:`tickgpu.kernels.manifest`). It needs neither a GPU nor torch: Triton's
code generation and its bundled ``ptxas`` run on any Linux x86-64 machine.

Usage::

    python -m tickgpu.kernels.build --out src/tickgpu/kernels/bundle --arch sm_80 --arch sm_90

Variants per Triton family: dtype x BLOCK_SIZE x aligned16, with num_warps fixed per
(dtype, BLOCK_SIZE). These kernels are bound by memory bandwidth, and what decides their speed is
occupancy: one or two elements per thread keep registers at 40-80 and the SMs full.
Measured on an H200 (33.5M options, greeks, 10 outputs + 7 inputs): float32 BLOCK_SIZE 256 /
4 warps (2 elements per thread) 3.4-3.6 TB/s, float64 256 / 8 warps (1 per thread) 3.2 TB/s, while
1024-element blocks with 4-8 elements per thread needed 143-255 registers and reached only
1.3-2.5 TB/s. So:

* float32: BLOCK_SIZE 256 is the throughput variant (the best measured for large chains);
  BLOCK_SIZE 128 (1 element per thread) is the latency variant: a call of a few thousand options
  is spread over twice as many SMs, with the least serial work per thread. The throughput
  variant is capped at 56 registers (72 uncapped; at 56 only the rare special path spills): 9
  blocks an SM instead of 7.
  Settled on the H200 (benchmarks/results/h200-2026-12-01-d), 64 registers were 1.2% faster than
  72 and 56 another 1.1% faster; 48 was 5% slower.
* float64: only BLOCK_SIZE 32 / 1 warp, capped at 64 registers a thread. A tile of one warp
  takes the greeks kernel's fast-path decision (a block-wide OR) with a warp reduction instead of
  shared memory and two barriers: settled on the H200 (benchmarks/results/h200-2026-12-01-d),
  3.342-3.351 ms a launch at 1e8 options against 3.422-3.424 for 128 / 4 warps and 3.388-3.390
  for 64 / 2, 2.2% faster (float32, memory-bound, gained 0.4% from 64 / 1 and keeps 256 / 4).
  Before that, 128 / 4 warps had been the best: the kernel-sweep on
  the H200 (1e8 options, after the fast-path rewrite) gave 128/4 warps 74% of copy bandwidth
  against 62-67% for 256 with 4 or 8 warps: float64 greeks did ~330 DP operations an option (the
  exp, log and erfc; ~240 since the table erfcx, tickgpu.kernels.erfcx), which alone took ~90% of
  the copy's time, and the board runs them at its 700 W limit (SM clocks 1.2-1.6 GHz instead of 1.98). The 64-register cap (82 uncapped, 72-80
  bytes of stack) lets 8 blocks of 4 warps share an SM instead of 6, and measured 84-89% against 78-80%
  uncapped (benchmarks/results/h200-2026-11-30-g/); 48 registers spilled to 63%, and 56, after
  the loads and the fast-path test were slimmed, measured 82% against 87.6% at 64
  (benchmarks/results/h200-2026-12-01-d).
* aligned16 variants assume every pointer is 16-byte aligned and n % 16 == 0 (both are needed
  for the compiler to emit vector stores; the bound check must be constant over each 16-element
  group). They gained ~5% for float32 at 256 and nothing measurable elsewhere; the runtime may
  pick them when the condition holds.

The quant family (tickgpu.kernels.quant.QUANT_VARIANTS: per-token activation quantization, the
W8A8 / W16A8 / W16A16 / W8A16 GEMMs with fused epilogues, LayerNorm, the fused 3-layer step) is one variant per entry of that table,
compiled with its own num_warps / num_stages and ``enable_fp_fusion=False``; its manifest entries
carry the grid rule (``grid``, ``block_m``, ``block_n``) and alignment promise (``multiple_of_16``).
Where nvcc is found the family also holds the CUDA C small-batch W8A16 kernel (csrc/cuda/w8a16.cu,
tickgpu.kernels.quant.w8a16_small_variants, ``nvcc -fmad=false``); without nvcc those variants are
left out (said in the log) and W8A16 runs on the Triton kernels at every batch size.

CUDA C kernels (implied vol) run one option per thread in blocks of 256 (passed as -DTG_IV_BLOCK);
the solver is compute-bound and branchy, so each block regroups its options by solver branch between
the initial guess and the refinement (csrc/cuda/iv.cu says why; scripts/kernel-sweep measures it).

The build is deterministic: rebuilding unchanged sources gives the same manifest apart from
"created" (Triton's line info, which would embed absolute paths, is turned off).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tickgpu.kernels.manifest import (FAMILY_PARAMS, FORMAT, PDL_MIN_ARCH, QUANT_PARAMS, TRITON_SCRATCH_PARAMS,
                                      layout_params, validate)

KERNELS_DIR = Path(__file__).resolve().parent
#: The source checkout's root (csrc/ lives there; a wheel install has no csrc/).
REPO_ROOT = KERNELS_DIR.parents[2]
DEFAULT_OUT = KERNELS_DIR / "bundle"
DEFAULT_ARCHS = ("sm_80", "sm_90")
FAMILIES = ("greeks", "implied_vol", "surface", "quant", "resident_greeks", "noop", "scale")

# Pointer element types that are not the variant's float type.
_POINTER_ELEMENT = {"call_ptr": "u8", "status_ptr": "i8"}
_TRITON_FLOAT = {"f32": "fp32", "f64": "fp64"}


@dataclass(frozen=True)
class TritonFamily:
    """A Triton kernel and the variants built of it."""
    family: str
    module: str                 # module holding the @triton.jit function
    kernel: str                 # its name
    source: Path                # the file hashed into source_hash
    # dtype -> ((BLOCK_SIZE, num_warps, maxnreg or None), ...)
    configs: dict[str, tuple[tuple[int, int, int | None], ...]]
    # Files the kernel's code is also generated from (hashed after `source`).
    also: tuple[Path, ...] = ()


@dataclass(frozen=True)
class CudaFamily:
    """A CUDA C kernel compiled by nvcc, one cubin per dtype."""
    family: str
    source: str                 # .cu file, relative to the repo root
    headers: tuple[str, ...]    # kernel-code headers it includes (hashed after the source)
    entries: dict[str, str]     # dtype -> extern "C" symbol
    defines: dict[str, str]     # dtype -> -D macro selecting that kernel alone
    block: int                  # threads per block = elements per block
    block_define: str = "TG_IV_BLOCK"   # the -D macro that receives `block`
    # Where `headers` lie: "" for the --lbr-dir directory (implied vol's lbr_core.h), else a
    # folder relative to the repo root.
    header_root: str = ""


TRITON_FAMILIES = (
    TritonFamily("greeks", "tickgpu.kernels.greeks", "bsm_greeks_kernel", KERNELS_DIR / "greeks.py",
                 {"f32": ((256, 4, 56), (128, 4, None)), "f64": ((32, 1, 64),)},
                 also=(KERNELS_DIR / "erfcx.py",)),
    TritonFamily("surface", "tickgpu.kernels.surface", "vol_surface_kernel", KERNELS_DIR / "surface.py",
                 {"f64": ((256, 8, None), (128, 4, None))}),
)

CUDA_FAMILIES = (
    CudaFamily("implied_vol", "csrc/cuda/iv.cu", ("lbr_core.h",),
               {"f64": "tg_implied_vol_f64_kernel", "f32": "tg_implied_vol_f32_kernel"},
               {"f64": "TG_IV_ONLY_F64", "f32": "TG_IV_ONLY_F32"}, 256),
    # The resident (persistent) greeks kernel of the mailbox hot path: grid = however many blocks
    # the runtime chooses, not ceil(n / block) (tickgpu.runtime.mailbox).
    CudaFamily("resident_greeks", "csrc/cuda/mailbox.cu", ("csrc/cpu/greeks_kernel.h", "csrc/hot/mailbox_protocol.h"),
               {"f64": "tg_resident_greeks_f64_kernel", "f32": "tg_resident_greeks_f32_kernel"},
               {"f64": "TG_MB_ONLY_F64", "f32": "TG_MB_ONLY_F32"}, 1024, block_define="TG_MB_BLOCK", header_root="."),
    # An empty kernel: what a launch costs with nothing to run (the launch benchmark).
    CudaFamily("noop", "csrc/cuda/noop.cu", (), {"f32": "tg_noop_kernel"}, {"f32": "TG_NOOP_ONLY_F32"}, 32,
               block_define="TG_NOOP_BLOCK", header_root="."),
    # y = x * 1.0001f + 1 (the floor's scale_k): the zero-copy tick benchmark's like-for-like.
    CudaFamily("scale", "csrc/cuda/noop.cu", (), {"f32": "tg_scale_kernel"}, {"f32": "TG_SCALE_ONLY_F32"}, 256,
               block_define="TG_SCALE_BLOCK", header_root="."),
)


class BuildError(RuntimeError):
    """A kernel failed to compile, or its cubin disagrees with the manifest being written."""



def _triton_compile(src, capability: int, cache_dir, options: dict, what: str):
    """triton.compile for one target with the builder's fixed settings, in scoped knobs."""
    import triton
    from triton.backends.compiler import GPUTarget

    with triton.knobs.cache.scope(), triton.knobs.compilation.scope(), triton.knobs.runtime.scope():
        triton.knobs.cache.dir = str(cache_dir)
        # Line info would put this checkout's absolute paths into the cubin.
        triton.knobs.compilation.disable_line_info = True
        triton.knobs.compilation.always_compile = True
        triton.knobs.runtime.override_arch = None
        try:
            # No flush-to-zero in libdevice: float32 tails keep their subnormals.
            return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                                  options={"enable_reflect_ftz": False, **options})
        except Exception as e:  # noqa: BLE001 - reported with the variant named
            raise BuildError(f"{what}: Triton compile failed: {e}") from e

def source_hash(paths: Sequence[Path]) -> str:
    """sha256 of the files' bytes, concatenated in order (see the manifest's ``source_hash``)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
    return h.hexdigest()


# ---- tool discovery ------------------------------------------------------------------------

def _run(cmd: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a tool; BuildError, naming it, if it cannot be started (missing, not executable)."""
    try:
        return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e.strerror or e}") from e


def find_nvcc(explicit: str | None = None) -> str | None:
    """nvcc from --nvcc, $CUDA_HOME/bin, or PATH; None when there is none."""
    if explicit:
        return explicit
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def tool_version(path: str | None) -> str | None:
    """'13.0.88' from a CUDA tool's --version banner ('... V13.0.88'), None without the tool."""
    if not path:
        return None
    out = _run([path, "--version"]).stdout
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def _cuobjdump() -> str:
    import triton
    return triton.knobs.nvidia.cuobjdump.path


def cubin_facts(cubin: bytes, entry: str) -> dict[str, Any]:
    """What the cubin itself says about ``entry``: parameters, registers, stack, thread count.

    Read with ``cuobjdump -elf`` (EIATTR_KPARAM_INFO, EIATTR_REGCOUNT, EIATTR_FRAME_SIZE,
    EIATTR_REQNTID / EIATTR_MAX_THREADS), so the builder can check its manifest against the binary.
    """
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = _run([_cuobjdump(), "-elf", f.name])
    if res.returncode != 0:
        raise BuildError(f"cuobjdump -elf failed on {entry}: {res.stderr.strip()}")
    text = res.stdout
    params = sorted(
        (int(o, 16), int(off, 16), int(sz, 16))
        for o, off, sz in re.findall(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+"
                                     r"Size\s*:\s*(0x[0-9a-f]+)", text))
    regs = re.findall(rf"function: {entry}\(0x[0-9a-f]+\)\s+register count: (\d+)", text)
    frame = re.findall(rf"function: {entry}\(0x[0-9a-f]+\)\s+frame size: (0x[0-9a-f]+)", text)
    reqntid = re.search(r"EIATTR_REQNTID\s+Format:\s+\S+\s+Value:\s+(0x[0-9a-f]+)", text)
    if not re.search(rf"\b{re.escape(entry)}\b", text):
        raise BuildError(f"entry symbol {entry} not found in its cubin")
    return {
        "params": [(off, sz) for _, off, sz in params],
        "registers": int(regs[0]) if regs else None,
        "stack": int(frame[0], 16) if frame else 0,
        "reqntid": int(reqntid.group(1), 16) if reqntid else None,
    }


def dependency_control(cubin: bytes) -> bool:
    """Whether the cubin's code lets the next kernel launch and waits for the previous one
    (``griddepcontrol.launch_dependents`` and ``.wait``: SASS ``PREEXIT`` and ``ACQBULK``)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = _run([_cuobjdump(), "-sass", f.name])
    if res.returncode != 0:
        raise BuildError(f"cuobjdump -sass failed: {res.stderr.strip()}")
    return bool(re.search(r"\bPREEXIT\b", res.stdout)) and bool(re.search(r"\bACQBULK\b", res.stdout))


def _check_dependency_control(entry: dict[str, Any], cubin: bytes) -> None:
    """A quant entry says ``pdl`` exactly where its code has the dependency control: the runtime
    launches a ``pdl`` kernel before its predecessor has finished, which is safe only if it waits."""
    has = dependency_control(cubin)
    if has != bool(entry.get("pdl")):
        raise BuildError(f"{entry['variant']} ({entry['arch']}): the manifest says pdl={bool(entry.get('pdl'))} "
                         f"but the cubin {'has' if has else 'lacks'} griddepcontrol (PREEXIT / ACQBULK)")


def _check_against_cubin(entry: dict[str, Any], facts: dict[str, Any]) -> None:
    mine = [(p["offset"], p["size"]) for p in entry["params"]]
    if facts["params"] != mine:
        raise BuildError(f"{entry['variant']} ({entry['arch']}): parameters (offset, size) in the cubin "
                         f"{facts['params']} differ from the manifest's {mine}")
    threads = entry["block"][0] * entry["block"][1] * entry["block"][2]
    if facts["reqntid"] is not None and facts["reqntid"] != threads:
        raise BuildError(f"{entry['variant']} ({entry['arch']}): cubin requires {facts['reqntid']} threads "
                         f"per block, manifest says {threads}")


# ---- Triton --------------------------------------------------------------------------------

def _triton_signature(fn, family: str, dtype: str, aligned16: bool):
    names = list(fn.arg_names)
    # Compile-time parameters (BLOCK_SIZE and tuning switches with defaults) are not launch arguments.
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    expected = [n for n, _ in FAMILY_PARAMS[family]]
    if [n for n in names if n not in constexprs] != expected:
        raise BuildError(f"{family}: kernel arguments {names} are not the contract's order {expected}")
    kinds = dict(FAMILY_PARAMS[family])
    signature, attrs = {}, {}
    for i, name in enumerate(names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        if kinds[name] == "ptr":
            signature[name] = "*" + _POINTER_ELEMENT.get(name, _TRITON_FLOAT[dtype])
        else:
            signature[name] = kinds[name]
        # Divisibility by 16 (bytes for pointers, elements for n) is what aligned16 promises.
        if aligned16 and (kinds[name] == "ptr" or name == "n"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs


def build_triton(fam: TritonFamily, arch: str, cache_dir: Path) -> list[tuple[dict[str, Any], bytes, dict]]:
    """Compile every variant of ``fam`` for ``arch``; returns (manifest entry, cubin, cubin facts)."""
    import importlib

    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(fam.module), fam.kernel)
    capability = int(arch[len("sm_"):])
    digest = source_hash([fam.source, *fam.also])
    out = []
    for dtype, configs in sorted(fam.configs.items()):
        for block_size, num_warps, maxnreg in configs:
            for aligned16 in (True, False):
                variant = f"{fam.family}_{dtype}_b{block_size}" + ("_a16" if aligned16 else "")
                signature, attrs = _triton_signature(fn, fam.family, dtype, aligned16)
                # Tuning switches other than BLOCK_SIZE take the kernel's defaults.
                constants = {p.name: p.default for p in fn.params if p.is_constexpr and p.name != "BLOCK_SIZE"}
                src = ASTSource(fn=fn, signature=signature, constexprs={**constants, "BLOCK_SIZE": block_size},
                                attrs=attrs)
                options = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
                compiled = _triton_compile(src, capability, cache_dir, options, f"{variant} ({arch})")
                md = compiled.metadata
                params = layout_params(list(FAMILY_PARAMS[fam.family]) + list(TRITON_SCRATCH_PARAMS))
                entry = {
                    "variant": variant, "family": fam.family, "arch": arch,
                    "file": f"{arch}/{variant}.cubin", "entry": md.name, "source": "triton",
                    "source_hash": digest, "num_warps": md.num_warps, "block": [md.num_warps * 32, 1, 1],
                    "shared": md.shared, "elements_per_block": block_size, "dtype": dtype,
                    "aligned16": aligned16, "params": params,
                    "scratch": {"global": md.global_scratch_size or 0,
                                "global_align": md.global_scratch_align or 1,
                                "profile": md.profile_scratch_size or 0},
                }
                cubin = compiled.asm["cubin"]
                facts = cubin_facts(cubin, md.name)
                _check_against_cubin(entry, facts)
                out.append((entry, cubin, facts))
    return out


_QUANT_KINDS = {"i32": "i32", "fp32": "f32"}


def build_quant(arch: str, cache_dir: Path) -> list[tuple[dict[str, Any], bytes, dict]]:
    """Compile every variant of :data:`tickgpu.kernels.quant.QUANT_VARIANTS` for ``arch``."""
    from triton.compiler import ASTSource

    from tickgpu.kernels import quant as kq

    capability = int(arch[len("sm_"):])
    digest = source_hash([KERNELS_DIR / "quant.py"])
    out = []
    for v in kq.QUANT_VARIANTS:
        variant, fn = v["variant"], v["kernel"]
        names = [n for n, t in v["signature"].items() if t != "constexpr"]
        contract = QUANT_PARAMS.get(fn.__name__)
        kinds = ["ptr" if v["signature"][n].startswith("*") else _QUANT_KINDS[v["signature"][n]] for n in names]
        if contract is None or list(zip(names, kinds)) != list(contract):
            raise BuildError(f"{variant}: kernel {fn.__name__} arguments {list(zip(names, kinds))} are not the "
                             f"manifest's quant order {contract}")
        # Programmatic dependent launch (griddepcontrol) is Hopper's: the sm_90 variants have it.
        pdl = "PDL" in v["constexprs"] and capability >= PDL_MIN_ARCH
        constexprs = dict(v["constexprs"], PDL=1) if pdl else v["constexprs"]
        src = ASTSource(fn=fn, signature=v["signature"], constexprs=constexprs,
                        attrs=kq.divisibility_attrs(v))
        compiled = _triton_compile(src, capability, cache_dir,
                                   {"num_warps": v["num_warps"], "num_stages": v["num_stages"], **v["options"]},
                                   f"{variant} ({arch})")
        md = compiled.metadata
        tiles = v["grid"] == "tiles"
        entry = {
            "variant": variant, "family": "quant", "arch": arch, "file": f"{arch}/{variant}.cubin",
            "entry": md.name, "source": "triton", "source_hash": digest, "num_warps": md.num_warps,
            "block": [md.num_warps * 32, 1, 1], "shared": md.shared,
            "elements_per_block": v["block_m"] * v["block_n"] if tiles else 1,
            "dtype": v["dtype"], "aligned16": v["aligned16"],
            "params": layout_params(list(contract) + list(TRITON_SCRATCH_PARAMS)),
            "scratch": {"global": md.global_scratch_size or 0, "global_align": md.global_scratch_align or 1,
                        "profile": md.profile_scratch_size or 0},
            "grid": v["grid"],
        }
        if tiles:
            entry["block_m"], entry["block_n"] = v["block_m"], v["block_n"]
        if v["aligned16"]:
            entry["multiple_of_16"] = list(v["multiple_of_16"])
        if pdl:
            entry["pdl"] = True
        cubin = compiled.asm["cubin"]
        facts = cubin_facts(cubin, md.name)
        _check_against_cubin(entry, facts)
        if capability >= PDL_MIN_ARCH:   # below, the manifest refuses pdl (validate)
            _check_dependency_control(entry, cubin)
        out.append((entry, cubin, facts))
    return out


# ---- CUDA C --------------------------------------------------------------------------------

def _nvcc_cubin(cmd: list[str], source: str, what: str) -> tuple[bytes, int]:
    """Run nvcc `cmd` (up to its output option) on `source` (relative to the repo root); the cubin
    and the most bytes of registers ptxas spilled in it."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = Path(tmp) / "k.cubin"
        full = [*cmd, "-o", str(cubin_path), source]
        res = _run(full, cwd=REPO_ROOT)
        if res.returncode != 0:
            raise BuildError(f"{what}: nvcc failed:\n{' '.join(full)}\n{res.stderr}")
        cubin = cubin_path.read_bytes()
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", res.stderr)]
    return cubin, max(spills, default=0)


def build_cuda(fam: CudaFamily, arch: str, nvcc: str, lbr_dir: Path) -> list[tuple[dict[str, Any], bytes, dict]]:
    """nvcc -cubin each dtype's kernel of ``fam`` for ``arch``."""
    src = REPO_ROOT / fam.source
    headers = [(REPO_ROOT / fam.header_root if fam.header_root else lbr_dir) / h for h in fam.headers]
    for p in [src, *headers]:
        if not p.is_file():
            raise BuildError(f"{fam.family}: source {p} not found (pass --lbr-dir, or --family to skip it)")
    digest = source_hash([src, *headers])
    out = []
    for dtype, symbol in sorted(fam.entries.items()):
        variant = f"{fam.family}_{dtype}_b{fam.block}"
        # Relative paths from the repo root keep the cubin independent of where the checkout is.
        include = os.path.relpath(lbr_dir, REPO_ROOT)
        cubin, spills = _nvcc_cubin([nvcc, "-cubin", f"-arch={arch}", "-O3", "-Xptxas", "-v",
                                     f"-D{fam.defines[dtype]}", f"-D{fam.block_define}={fam.block}", "-I", include],
                                    fam.source, f"{variant} ({arch})")
        entry = {
            "variant": variant, "family": fam.family, "arch": arch, "file": f"{arch}/{variant}.cubin",
            "entry": symbol, "source": "cuda", "source_hash": digest, "num_warps": fam.block // 32,
            "block": [fam.block, 1, 1], "shared": 0, "elements_per_block": fam.block, "dtype": dtype,
            "aligned16": False, "params": layout_params(FAMILY_PARAMS[fam.family]),
            "scratch": {"global": 0, "global_align": 1, "profile": 0},
        }
        facts = cubin_facts(cubin, symbol)
        facts["spill_stores"] = spills
        _check_against_cubin(entry, facts)
        out.append((entry, cubin, facts))
    return out


def build_quant_cuda(arch: str, nvcc: str) -> list[tuple[dict[str, Any], bytes, dict]]:
    """nvcc -cubin the quant family's CUDA C variants (:func:`tickgpu.kernels.quant.w8a16_small_variants`),
    one nvcc per variant, as many at once as there are cores (results in the table's order)."""
    from concurrent.futures import ThreadPoolExecutor

    from tickgpu.kernels import quant as kq

    src = REPO_ROOT / kq.W8A16_SMALL_SOURCE
    if not src.is_file():
        raise BuildError(f"quant: source {src} not found")
    digest = source_hash([src])

    def one(v):
        variant, contract = v["variant"], QUANT_PARAMS[v["entry"]]
        # No FMA contraction: the float32 epilogue is the reference's operations one at a time.
        cubin, spills = _nvcc_cubin([nvcc, "-cubin", f"-arch={arch}", "-O3", "-fmad=false", "-Xptxas", "-v",
                                     *(f"-D{name}={value}" for name, value in v["defines"].items())],
                                    kq.W8A16_SMALL_SOURCE, f"{variant} ({arch})")
        entry = {
            "variant": variant, "family": "quant", "arch": arch, "file": f"{arch}/{variant}.cubin",
            "entry": v["entry"], "source": "cuda", "source_hash": digest,
            "num_warps": v["num_warps"], "block": [v["num_warps"] * 32, 1, 1],
            "shared": 0,   # its shared memory is static
            "elements_per_block": v["block_m"] * v["block_n"], "dtype": v["dtype"], "aligned16": True,
            "params": layout_params(contract), "scratch": {"global": 0, "global_align": 1, "profile": 0},
            "grid": "tiles", "block_m": v["block_m"], "block_n": v["block_n"],
            "multiple_of_16": list(v["multiple_of_16"]),
        }
        hopper = int(arch[len("sm_"):]) >= PDL_MIN_ARCH
        if hopper:
            entry["pdl"] = True   # griddepcontrol, compiled in for sm_90 and later (csrc/cuda/w8a16.cu)
        facts = cubin_facts(cubin, v["entry"])
        facts["spill_stores"] = spills
        _check_against_cubin(entry, facts)
        if hopper:   # below, the manifest refuses pdl (validate)
            _check_dependency_control(entry, cubin)
        return entry, cubin, facts

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, list(kq.w8a16_small_variants())))


# ---- the bundle ----------------------------------------------------------------------------

def build_bundle(out: Path, archs: Sequence[str] = DEFAULT_ARCHS, families: Sequence[str] = FAMILIES,
                 nvcc: str | None = None, lbr_dir: Path | None = None, log=print) -> dict[str, Any]:
    """Compile the requested families for ``archs`` and write the bundle to ``out``.

    Parameters
    ----------
    out : Path
        Bundle directory; its manifest.json and sm_*/ *.cubin files are replaced, nothing else.
    archs : sequence of str
        Like "sm_80", "sm_90" (Triton compiles sm_90 as sm_90a: such cubins run only on compute
        capability 9.0, i.e. H100/H200).
    families : sequence of str
        Subset of :data:`FAMILIES`.
    nvcc : str, optional
        nvcc to use for CUDA C families (default: $CUDA_HOME/bin/nvcc or PATH).
    lbr_dir : Path, optional
        Directory holding lbr_core.h (default csrc/cpu).
    log : callable
        Receives one line per variant (registers, stack, size).

    Returns
    -------
    dict
        The manifest written.

    Raises
    ------
    BuildError
        If a kernel fails to compile, a needed tool or source is missing, or a cubin's parameter
        layout or thread count disagrees with the manifest.
    """
    out = Path(out)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise BuildError(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {unknown}; known: {list(FAMILIES)}")
    for arch in archs:
        if not re.fullmatch(r"sm_\d+", arch):
            raise BuildError(f"--arch {arch!r}: expected sm_NN, e.g. sm_90")
    lbr_dir = Path(lbr_dir) if lbr_dir else REPO_ROOT / "csrc" / "cpu"

    import triton

    cuda_wanted = [f for f in CUDA_FAMILIES if f.family in families]
    nvcc = find_nvcc(nvcc) if cuda_wanted or "quant" in families else None
    if cuda_wanted and not nvcc:
        raise BuildError(f"nvcc not found (needed for {[f.family for f in cuda_wanted]}); "
                         "set CUDA_HOME, pass --nvcc, or leave those families out with --family")
    if "quant" in families and not nvcc:
        log("quant: nvcc not found: the small-batch W8A16 kernels (csrc/cuda/w8a16.cu) are left out; "
            "W8A16 runs on the Triton kernels at every batch size")

    results = []
    with tempfile.TemporaryDirectory(prefix="tickgpu-triton-cache-") as cache:
        for arch in archs:
            for fam in TRITON_FAMILIES:
                if fam.family in families:
                    results += build_triton(fam, arch, Path(cache))
            for fam in cuda_wanted:
                results += build_cuda(fam, arch, nvcc, lbr_dir)
            if "quant" in families:
                results += build_quant(arch, Path(cache))
                if nvcc:
                    results += build_quant_cuda(arch, nvcc)

    results.sort(key=lambda r: (r[0]["arch"], r[0]["variant"]))
    manifest = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "compilers": {"triton": triton.__version__, "nvcc": tool_version(nvcc),
                      "ptxas": tool_version(triton.knobs.nvidia.ptxas.path)},
        "kernels": [r[0] for r in results],
    }
    validate(manifest)

    out.mkdir(parents=True, exist_ok=True)
    for old in sorted(out.glob("sm_*/*.cubin")):
        old.unlink()
    for entry, cubin, facts in results:
        path = out / entry["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(cubin)
        log(f"{entry['arch']}  {entry['variant']:<30} {entry['entry']:<28} regs {facts['registers']!s:>3}  "
            f"stack {facts['stack']:>4} B  {len(cubin):>7} B")
    for d in sorted(out.glob("sm_*")):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _arch(text: str) -> str:
    """argparse type for --arch: one of the architectures the runtime loads (DEFAULT_ARCHS: a
    bundle for any other would never be used, and nvcc would be the one to say it is wrong)."""
    if text not in DEFAULT_ARCHS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DEFAULT_ARCHS)} (the architectures "
                                         f"tickgpu's runtime loads), got {text!r}")
    return text


def _lbr_dir(text: str) -> Path:
    """argparse type for --lbr-dir: a directory that holds lbr_core.h."""
    d = Path(text)
    if not (d / "lbr_core.h").is_file():
        raise argparse.ArgumentTypeError(f"{text}: no lbr_core.h there")
    return d


def _nvcc_path(text: str) -> str:
    """argparse type for --nvcc: the executable, as a path or a name on PATH."""
    found = shutil.which(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text}: no such executable")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``tickgpu build-kernels`` / ``python -m tickgpu.kernels.build``; returns the exit status.

    Bad arguments (an --arch the runtime does not load, an --nvcc that is not there, an --out that
    cannot be written, an --lbr-dir without lbr_core.h) are refused before anything is compiled,
    by argparse: a message naming the option and SystemExit(2), the CLI's usage error. A failed
    build returns 1.
    """
    from tickgpu.cli import writable_dir

    p = argparse.ArgumentParser(prog="tickgpu build-kernels",
                                description="Compile tickgpu's GPU kernels ahead of time into a bundle "
                                            "(cubins + manifest.json). Needs Triton and, for the CUDA C "
                                            "kernels, nvcc; no GPU and no torch.")
    # A str default goes through `type` too: an unwritable install fails before the build, not after.
    p.add_argument("--out", type=writable_dir, default=str(DEFAULT_OUT),
                   help=f"bundle directory (default {DEFAULT_OUT})")
    p.add_argument("--arch", action="append", type=_arch,
                   help="target architecture, repeatable (default sm_80 and sm_90)")
    p.add_argument("--family", action="append", choices=FAMILIES,
                   help="kernel family to build, repeatable (default all)")
    p.add_argument("--nvcc", type=_nvcc_path, help="nvcc to use (default $CUDA_HOME/bin/nvcc or PATH)")
    p.add_argument("--lbr-dir", type=_lbr_dir, help="directory holding lbr_core.h (default csrc/cpu)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    args = p.parse_args(argv)
    try:
        manifest = build_bundle(args.out, archs=args.arch or DEFAULT_ARCHS, families=args.family or FAMILIES,
                                nvcc=args.nvcc, lbr_dir=args.lbr_dir,
                                log=(lambda *_: None) if args.quiet else print)
    except BuildError as e:
        print(f"build-kernels: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"wrote {len(manifest['kernels'])} kernels to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
