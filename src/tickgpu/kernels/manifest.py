"""The kernel bundle's manifest: what each compiled kernel expects at launch, and its validation.

A bundle is a directory (``src/tickgpu/kernels/bundle`` in the package) holding ``manifest.json``
and one cubin per kernel variant and architecture (``sm_80/<variant>.cubin``, ``sm_90/...``). It is
written by ``tickgpu build-kernels`` (:mod:`tickgpu.kernels.build`) and read by the runtime, which
needs neither Triton nor torch: this module imports only the standard library.

Each kernel entry says how to launch it without looking at its source:

* ``entry``: the symbol for ``cuModuleGetFunction``.
* ``block``: the launch block. Triton kernels must be launched with exactly ``(num_warps * 32, 1,
  1)`` (the cubin carries that as a required thread count); ``grid = ceil(n / elements_per_block)``.
* ``shared``: dynamic shared memory bytes to pass at launch.
* ``params``: every kernel parameter in order, with its kind, size and byte offset in the
  parameter buffer (natural alignment: pointers and 64-bit values on 8 bytes, 32-bit values on
  4). Triton kernels end with two pointers, ``global_scratch`` and ``profile_scratch``; pass 0 for
  each whose size in ``scratch`` is 0 (a nonzero size needs a device buffer of that many bytes per
  program, aligned to ``scratch["global_align"]``).
* ``aligned16``: the variant was compiled assuming every pointer parameter is 16-byte aligned
  *and* ``n`` is a multiple of 16 (that is what lets the compiler use 16-byte vector stores: the
  bound check ``offs < n`` is then constant over each group of 16 elements). Launch it only when
  both hold; otherwise use the variant with ``aligned16`` false.
* ``source_hash``: sha256 of the kernel's source: of the Triton source file for Triton kernels
  (followed by the files its code is also generated from: ``erfcx.py`` for greeks);
  for CUDA C kernels, of the ``.cu`` file's bytes followed by those of the local headers it
  includes that hold kernel code (``csrc/cpu/lbr_core.h`` for implied vol), in that order.

The argument order of each family is fixed by :data:`FAMILY_PARAMS` (the contract between the
kernels and the runtime); :func:`validate` checks every entry against it.

The ``quant`` family (the quantized linear layers of :mod:`tickgpu.quant`) holds four Triton
kernels and a CUDA C one (small-batch W8A16, with the Triton W8A16 kernel's contract) with
argument lists of their own, fixed by :data:`QUANT_PARAMS` and told apart by ``entry``. Their grid
is not ``ceil(n / elements_per_block)``; their entries carry optional fields that the other
families never have (so those families' entries are unchanged):

* ``grid``: ``"rows"`` (one program per row: grid ``(M, 1, 1)``, ``elements_per_block`` 1) or
  ``"tiles"`` (one program per ``block_m`` x ``block_n`` output tile: grid
  ``(ceil(M / block_m) * ceil(N / block_n), 1, 1)``, ``elements_per_block`` = block_m * block_n),
  where M and N are the kernel's parameters of those names.
* ``block_m``, ``block_n``: the output tile, present exactly when ``grid`` is ``"tiles"``.
* ``multiple_of_16``: with ``aligned16``, the i32 parameters the variant assumes are multiples of
  16 (for these kernels ``aligned16`` promises 16-byte aligned pointers and those values, not
  ``n % 16``); absent otherwise.
* ``dtype`` may also be ``"f16"`` or ``"bf16"``: the output element type.
* ``shared`` may exceed 48 KB: the runtime opts the function in to that much dynamic shared memory
  (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``) when it loads it.
* ``pdl``: true where the kernel was compiled with programmatic dependent launch
  (``griddepcontrol``: it lets the next kernel launch early and waits for the previous one before
  reading anything), sm_90 and later only; absent otherwise. The runtime captures such a kernel
  after another in a model step's graph with a programmatic dependency.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

FORMAT = 1

#: Byte size of each parameter kind; each is aligned to its size in the parameter buffer.
KIND_SIZE = {"ptr": 8, "i32": 4, "i64": 8, "f32": 4, "f64": 8}

#: The two pointers Triton (3.x) appends to every kernel's parameters.
TRITON_SCRATCH_PARAMS = (("global_scratch", "ptr"), ("profile_scratch", "ptr"))


def _strided(*names: str) -> tuple[tuple[str, str], ...]:
    """Each input pointer followed by its int32 element stride (0 broadcasts, 1 contiguous)."""
    out: list[tuple[str, str]] = []
    for name in names:
        out += [(f"{name}_ptr", "ptr"), (f"s_{name}", "i32")]
    return tuple(out)


#: The greeks family's outputs, in the order of their pointers.
GREEKS_OUTPUTS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")

#: Kernel parameters of each family in launch order, before Triton's scratch pointers.
FAMILY_PARAMS: dict[str, tuple[tuple[str, str], ...]] = {
    "greeks": _strided("spot", "strike", "t", "rate", "vol", "div", "call")
    + tuple((f"{out}_ptr", "ptr") for out in GREEKS_OUTPUTS)
    + (("n", "i32"),),
    "implied_vol": _strided("price", "spot", "strike", "t", "rate", "div", "call")
    + (("vol_ptr", "ptr"), ("status_ptr", "ptr"), ("n", "i32")),
    # The resident greeks kernel (csrc/cuda/mailbox.cu): the mailbox's device address and two
    # uint32 of device memory for its blocks' hand-over; the requests come through the mailbox.
    "resident_greeks": (("box_ptr", "ptr"), ("arrive_ptr", "ptr")),
    # An empty kernel (csrc/cuda/noop.cu): the launch benchmark's like-for-like with the floor.
    "noop": (("n", "i32"),),
    # y[i] = x[i] * 1.0001f + 1 (csrc/cuda/noop.cu): the zero-copy tick's like-for-like with the floor.
    "scale": (("x_ptr", "ptr"), ("y_ptr", "ptr"), ("n", "i32")),
    "surface": (("strikes_ptr", "ptr"), ("expiries_ptr", "ptr"), ("vols_ptr", "ptr"),
                ("nk", "i32"), ("nt", "i32"), ("mode", "i32"))
    + _strided("strike", "t")
    + (("out_ptr", "ptr"), ("what", "i32"), ("n", "i32")),
}

#: Parameters of the quant family's kernels in launch order (before Triton's scratch pointers), by
#: entry symbol (tickgpu/kernels/quant.py; "ln_eps" is a float32 value).
QUANT_PARAMS: dict[str, tuple[tuple[str, str], ...]] = {
    "act_quant_kernel": (("x_ptr", "ptr"), ("gamma_ptr", "ptr"), ("beta_ptr", "ptr"), ("xq_ptr", "ptr"),
                         ("scale_ptr", "ptr"), ("rowsum_ptr", "ptr"), ("M", "i32"), ("K", "i32"),
                         ("stride_xm", "i32"), ("stride_qm", "i32"), ("ln_eps", "f32")),
    "quant_gemm_kernel": (("a_ptr", "ptr"), ("a_scale_ptr", "ptr"), ("a_rowsum_ptr", "ptr"), ("b_ptr", "ptr"),
                          ("b2_ptr", "ptr"), ("b_scale_ptr", "ptr"), ("b_offset_ptr", "ptr"), ("bias_ptr", "ptr"),
                          ("c_ptr", "ptr"), ("M", "i32"), ("N", "i32"), ("K", "i32"), ("stride_am", "i32"),
                          ("stride_bn", "i32"), ("stride_cm", "i32")),
    "w8a16_gemm_kernel": (("a_ptr", "ptr"), ("b_ptr", "ptr"), ("b_scale_ptr", "ptr"), ("bias_ptr", "ptr"),
                          ("c_ptr", "ptr"), ("M", "i32"), ("N", "i32"), ("K", "i32"), ("stride_am", "i32"),
                          ("stride_bn", "i32"), ("stride_cm", "i32")),
    "layernorm_kernel": (("x_ptr", "ptr"), ("gamma_ptr", "ptr"), ("beta_ptr", "ptr"), ("y_ptr", "ptr"),
                         ("M", "i32"), ("K", "i32"), ("stride_xm", "i32"), ("stride_ym", "i32"),
                         ("ln_eps", "f32")),
    # the fused 3-layer model step: input, LayerNorm, then per layer weights (hi and lo limbs),
    # scale, limb offset and bias, output, sizes, strides and the LayerNorm's epsilon
    "mlp3_fused_kernel": (("x_ptr", "ptr"), ("gamma_ptr", "ptr"), ("beta_ptr", "ptr"),
                          *((f"{p}{i}{q}", "ptr") for i in (1, 2, 3) for p, q in
                            (("w", "_ptr"), ("w", "b_ptr"), ("s", "_ptr"), ("o", "_ptr"), ("b", "_ptr"))),
                          ("y_ptr", "ptr"), ("M", "i32"), ("K0", "i32"), ("H1", "i32"), ("H2", "i32"), ("N", "i32"),
                          ("stride_xm", "i32"), ("stride_w1", "i32"), ("stride_w2", "i32"), ("stride_w3", "i32"),
                          ("stride_ym", "i32"), ("ln_eps", "f32")),
}
# The CUDA C small-batch W8A16 kernel (csrc/cuda/w8a16.cu) has w8a16_gemm_kernel's contract.
QUANT_PARAMS["tg_w8a16_small_kernel"] = QUANT_PARAMS["w8a16_gemm_kernel"]
#: The family of the quantized linear layers, whose argument lists go by entry (QUANT_PARAMS).
QUANT_FAMILY = "quant"
#: Every family a manifest may name.
FAMILIES = (*FAMILY_PARAMS, QUANT_FAMILY)
GRIDS = ("rows", "tiles")
#: The first architecture with programmatic dependent launch (a kernel's ``pdl``).
PDL_MIN_ARCH = 90

SOURCES = ("triton", "cuda")
DTYPES = ("f32", "f64", "f16", "bf16")

_KERNEL_FIELDS = {
    "variant": str, "family": str, "arch": str, "file": str, "entry": str, "source": str,
    "source_hash": str, "num_warps": int, "block": list, "shared": int,
    "elements_per_block": int, "dtype": str, "aligned16": bool, "params": list, "scratch": dict,
}
# Only quant entries have these (see the module docstring).
_OPTIONAL_KERNEL_FIELDS = {"grid": str, "block_m": int, "block_n": int, "multiple_of_16": list, "pdl": bool}
_PARAM_FIELDS = {"name": str, "kind": str, "size": int, "offset": int}
_SCRATCH_FIELDS = {"global": int, "global_align": int, "profile": int}
_TOP_FIELDS = {"format": int, "created": str, "compilers": dict, "kernels": list}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``size`` bytes at ``offset`` in the packed parameter buffer."""
    name: str
    kind: str
    size: int
    offset: int


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel variant for one architecture (see the module docstring)."""
    variant: str
    family: str
    arch: str
    file: str
    entry: str
    source: str
    source_hash: str
    num_warps: int
    block: tuple[int, int, int]
    shared: int
    elements_per_block: int
    dtype: str
    aligned16: bool
    params: tuple[Param, ...]
    scratch: Mapping[str, int]
    grid: str | None = None                 # quant only: "rows" | "tiles"
    block_m: int | None = None
    block_n: int | None = None
    multiple_of_16: tuple[str, ...] | None = None
    pdl: bool = False                       # quant only: compiled with griddepcontrol (sm_90 on)

    @property
    def param_bytes(self) -> int:
        """Size of the packed parameter buffer: the end of the last parameter, not rounded up.

        Pass exactly this as CU_LAUNCH_PARAM_BUFFER_SIZE: the driver refuses any other size
        (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES was seen for a buffer rounded up to 8 bytes).
        """
        if not self.params:
            return 0
        last = self.params[-1]
        return last.offset + last.size


@dataclass(frozen=True)
class Manifest:
    """A loaded, validated bundle manifest; ``root`` is the bundle directory."""
    format: int
    created: str
    compilers: Mapping[str, Any]
    kernels: tuple[Kernel, ...]
    root: Path

    @classmethod
    def from_json(cls, raw: Any, root: str | Path) -> "Manifest":
        """Validate a manifest's JSON object (:func:`validate`, without the cubin files) and build it.

        Raises
        ------
        ValueError
            If the manifest fails :func:`validate` (the message names the kernel and field).
        """
        validate(raw)
        kernels = tuple(
            Kernel(
                variant=k["variant"], family=k["family"], arch=k["arch"], file=k["file"], entry=k["entry"],
                source=k["source"], source_hash=k["source_hash"], num_warps=k["num_warps"],
                block=tuple(k["block"]), shared=k["shared"], elements_per_block=k["elements_per_block"],
                dtype=k["dtype"], aligned16=k["aligned16"],
                params=tuple(Param(**p) for p in k["params"]), scratch=dict(k["scratch"]),
                grid=k.get("grid"), block_m=k.get("block_m"), block_n=k.get("block_n"),
                multiple_of_16=tuple(k["multiple_of_16"]) if "multiple_of_16" in k else None,
                pdl=k.get("pdl", False),
            )
            for k in raw["kernels"]
        )
        return cls(format=raw["format"], created=raw["created"], compilers=dict(raw["compilers"]),
                   kernels=kernels, root=Path(root))

    def cubin_path(self, kernel: Kernel) -> Path:
        """Where ``kernel``'s cubin lies on disk."""
        return self.root / kernel.file

    def find(self, family: str, arch: str, dtype: str | None = None) -> list[Kernel]:
        """The variants of ``family`` built for ``arch`` (and ``dtype``), in manifest order."""
        return [k for k in self.kernels
                if k.family == family and k.arch == arch and (dtype is None or k.dtype == dtype)]


def layout_params(params: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> list[dict]:
    """Byte offsets of kernel parameters under the CUDA ABI: each at its natural alignment.

    Parameters
    ----------
    params : sequence of (name, kind)
        In launch order; kind is one of :data:`KIND_SIZE`.

    Returns
    -------
    list of dict
        ``{"name", "kind", "size", "offset"}`` per parameter, as recorded in the manifest.
    """
    out, offset = [], 0
    for name, kind in params:
        size = KIND_SIZE[kind]
        offset = (offset + size - 1) // size * size
        out.append({"name": name, "kind": kind, "size": size, "offset": offset})
        offset += size
    return out


def _where(entry: Mapping[str, Any], index: int) -> str:
    variant = entry.get("variant", f"#{index}") if isinstance(entry, Mapping) else f"#{index}"
    arch = entry.get("arch", "?") if isinstance(entry, Mapping) else "?"
    return f"kernel {variant} ({arch})"


def _check_fields(obj: Any, fields: Mapping[str, type], where: str,
                  optional: Mapping[str, type] | None = None) -> None:
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = [f for f in fields if f not in obj]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(repr(f) for f in missing)}")
    optional = optional or {}
    extra = sorted(set(obj) - set(fields) - set(optional))
    if extra:
        raise ValueError(f"{where}: unknown field(s) {', '.join(extra)}")
    for name, typ in {**fields, **{k: v for k, v in optional.items() if k in obj}}.items():
        value = obj[name]
        # bool is an int in Python; a JSON true where a count belongs is still an error.
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise ValueError(f"{where}: field '{name}' must be {typ.__name__}, got {value!r}")


def _check_kernel(k: Mapping[str, Any], where: str) -> None:
    _check_fields(k, _KERNEL_FIELDS, where, _OPTIONAL_KERNEL_FIELDS)

    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"{where}: field '{field}' {why}, got {k[field]!r}")

    if not re.fullmatch(r"[a-z0-9_]+", k["variant"]):
        raise bad("variant", "must be lower-case letters, digits and _")
    if k["family"] not in FAMILIES:
        raise ValueError(f"{where}: unknown family {k['family']!r} (field 'family' must be one of "
                         f"{sorted(FAMILIES)})")
    if not re.fullmatch(r"sm_\d+a?", k["arch"]):
        raise bad("arch", "must look like sm_90")
    # A cubin inside its architecture's folder (the builder names it after the variant; several
    # variants may share one cubin, as hand-built test bundles do).
    folder, _, name = k["file"].partition("/")
    if folder != k["arch"] or not name.endswith(".cubin") or "/" in name or name.startswith("."):
        raise bad("file", f"must be {k['arch']}/<name>.cubin")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k["entry"]):
        raise bad("entry", "must be a C identifier")
    if k["source"] not in SOURCES:
        raise bad("source", f"must be one of {SOURCES}")
    if not re.fullmatch(r"[0-9a-f]{64}", k["source_hash"]):
        raise bad("source_hash", "must be 64 lower-case hex digits (sha256)")
    nw = k["num_warps"]
    if not (1 <= nw <= 32 and nw & (nw - 1) == 0):
        raise bad("num_warps", "must be a power of two from 1 to 32")
    block = k["block"]
    if len(block) != 3 or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in block):
        raise bad("block", "must be three positive ints")
    threads = block[0] * block[1] * block[2]
    if k["source"] == "triton" and block != [nw * 32, 1, 1]:
        raise bad("block", f"must be [num_warps * 32, 1, 1] = [{nw * 32}, 1, 1] for a Triton kernel")
    if threads != nw * 32 or threads > 1024:
        raise bad("block", f"must hold num_warps * 32 = {nw * 32} threads (at most 1024)")
    if k["shared"] < 0:
        raise bad("shared", "must be >= 0")
    if k["elements_per_block"] < 1:
        raise bad("elements_per_block", "must be >= 1")
    if k["dtype"] not in DTYPES:
        raise bad("dtype", f"must be one of {DTYPES}")
    if k["family"] == QUANT_FAMILY:
        _check_quant_launch(k, where)
    else:
        present = sorted(f for f in _OPTIONAL_KERNEL_FIELDS if f in k)
        if present:
            raise ValueError(f"{where}: field(s) {', '.join(present)} belong to quant kernels only")
        if k["dtype"] not in ("f32", "f64"):
            raise bad("dtype", "must be f32 or f64 for this family")

    _check_fields(k["scratch"], _SCRATCH_FIELDS, f"{where}: field 'scratch'")
    sc = k["scratch"]
    if sc["global"] < 0 or sc["profile"] < 0:
        raise bad("scratch", "sizes must be >= 0")
    if sc["global_align"] < 1 or sc["global_align"] & (sc["global_align"] - 1):
        raise bad("scratch", "global_align must be a power of two >= 1")

    params = k["params"]
    end = 0
    seen: set[str] = set()
    for i, p in enumerate(params):
        pw = f"{where}: params[{i}]"
        _check_fields(p, _PARAM_FIELDS, pw)
        if p["kind"] not in KIND_SIZE:
            raise ValueError(f"{pw}: field 'kind' must be one of {sorted(KIND_SIZE)}, got {p['kind']!r}")
        size = KIND_SIZE[p["kind"]]
        if p["size"] != size or p["offset"] % size:
            raise ValueError(f"{pw} ({p['name']}): fields 'size' {p['size']} / 'offset' {p['offset']} do not "
                             f"fit kind {p['kind']} ({size} bytes, naturally aligned)")
        if p["offset"] < end:
            raise ValueError(f"{pw}: field 'offset' {p['offset']} overlaps the previous parameter "
                             f"(which ends at {end})")
        if p["name"] in seen:
            raise ValueError(f"{pw}: field 'name' {p['name']!r} repeats")
        seen.add(p["name"])
        end = p["offset"] + p["size"]
    if end > 4096:
        raise bad("params", f"take {end} bytes, over the 4096-byte kernel parameter limit")

    if k["family"] == QUANT_FAMILY:
        if k["entry"] not in QUANT_PARAMS:
            raise bad("entry", f"must be one of the quant kernels {sorted(QUANT_PARAMS)}")
        expected = list(QUANT_PARAMS[k["entry"]])
    else:
        expected = list(FAMILY_PARAMS[k["family"]])
    if k["source"] == "triton":
        expected += list(TRITON_SCRATCH_PARAMS)
    got = [(p["name"], p["kind"]) for p in params]
    if got != expected:
        family = k["family"]
        i = next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e), min(len(got), len(expected)))
        if i < min(len(got), len(expected)):
            detail = (f"param {i} is {got[i][1]} {got[i][0]!r}, the {family} contract wants "
                      f"{expected[i][1]} {expected[i][0]!r} there")
        else:
            detail = f"{len(got)} params, the {family} contract has {len(expected)}"
        raise ValueError(f"{where}: field 'params': {detail} (the {family} argument order is "
                         f"{', '.join(f'{n} {kind}' for n, kind in expected)})")


def _check_quant_launch(k: Mapping[str, Any], where: str) -> None:
    """The quant-only fields: grid rule, tile, alignment promise."""
    if "grid" not in k:
        raise ValueError(f"{where}: missing field(s) grid (quant kernels say how their grid is formed)")
    grid = k["grid"]
    if grid not in GRIDS:
        raise ValueError(f"{where}: field 'grid' must be one of {GRIDS}, got {grid!r}")
    tile = [f for f in ("block_m", "block_n") if f in k]
    if grid == "tiles":
        if len(tile) != 2:
            raise ValueError(f"{where}: field(s) block_m, block_n are required with grid 'tiles'")
        for f in tile:
            if k[f] < 1:
                raise ValueError(f"{where}: field '{f}' must be >= 1, got {k[f]!r}")
        if k["elements_per_block"] != k["block_m"] * k["block_n"]:
            raise ValueError(f"{where}: field 'elements_per_block' must be block_m * block_n = "
                             f"{k['block_m'] * k['block_n']} with grid 'tiles', got {k['elements_per_block']!r}")
    else:
        if tile:
            raise ValueError(f"{where}: field(s) {', '.join(tile)} only go with grid 'tiles'")
        if k["elements_per_block"] != 1:
            raise ValueError(f"{where}: field 'elements_per_block' must be 1 (one row) with grid 'rows', "
                             f"got {k['elements_per_block']!r}")
    names = {p.get("name"): p.get("kind") for p in k["params"] if isinstance(p, Mapping)}
    for need in ("M",) + (("N",) if grid == "tiles" else ()):
        if names.get(need) != "i32":
            raise ValueError(f"{where}: field 'grid' {grid!r} needs an i32 parameter {need!r}")
    m16 = k.get("multiple_of_16")
    if m16 is not None:
        if not k["aligned16"]:
            raise ValueError(f"{where}: field 'multiple_of_16' needs aligned16 true")
        for name in m16:
            if not isinstance(name, str) or names.get(name) != "i32":
                raise ValueError(f"{where}: field 'multiple_of_16' names {name!r}, not an i32 parameter")
    if k.get("pdl") and not int(re.match(r"sm_(\d+)", k["arch"]).group(1)) >= PDL_MIN_ARCH:
        raise ValueError(f"{where}: field 'pdl': programmatic dependent launch needs sm_{PDL_MIN_ARCH} or later, "
                         f"not {k['arch']}")


def validate(manifest: Manifest | Mapping[str, Any]) -> None:
    """Check a manifest's structure; raise ValueError naming the kernel and field at fault.

    Parameters
    ----------
    manifest : Manifest or mapping
        A loaded :class:`Manifest`, or the raw JSON object.

    Raises
    ------
    ValueError
        On a missing, unknown or mistyped field, a parameter list that is not the family's
        argument order, misaligned or overlapping offsets, a block that is not num_warps * 32
        threads, or a (variant, arch) pair that repeats. For a :class:`Manifest`, also when a cubin
        file is missing or is not an ELF file.
    """
    if isinstance(manifest, Manifest):
        raw = _to_raw(manifest)
        root: Path | None = manifest.root
    else:
        raw, root = manifest, None
    # The format first: a manifest of another format may differ in any other field.
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, Mapping) else raw
        raise ValueError(f"manifest: format must be {FORMAT} (field 'format'), got {got!r}")
    _check_fields(raw, _TOP_FIELDS, "manifest")
    for name in ("triton", "nvcc", "ptxas"):
        if name not in raw["compilers"]:
            raise ValueError(f"manifest: field 'compilers' lacks {name!r}")
        v = raw["compilers"][name]
        if v is not None and not isinstance(v, str):
            raise ValueError(f"manifest: field 'compilers.{name}' must be a string or null, got {v!r}")
    seen: set[tuple[str, str]] = set()
    for i, k in enumerate(raw["kernels"]):
        where = _where(k, i)
        _check_kernel(k, where)
        key = (k["variant"], k["arch"])
        if key in seen:
            raise ValueError(f"{where}: field 'variant' repeats for arch {k['arch']}")
        seen.add(key)
        if root is not None:
            path = root / k["file"]
            if not path.is_file():
                raise ValueError(f"{where}: field 'file' {k['file']!r}: no such file under {root}")
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    raise ValueError(f"{where}: field 'file' {k['file']!r} is not a cubin (no ELF magic)")


def _to_raw(m: Manifest) -> dict[str, Any]:
    return {
        "format": m.format, "created": m.created, "compilers": dict(m.compilers),
        "kernels": [
            {"variant": k.variant, "family": k.family, "arch": k.arch, "file": k.file, "entry": k.entry,
             "source": k.source, "source_hash": k.source_hash, "num_warps": k.num_warps,
             "block": list(k.block), "shared": k.shared, "elements_per_block": k.elements_per_block,
             "dtype": k.dtype, "aligned16": k.aligned16,
             "params": [{"name": p.name, "kind": p.kind, "size": p.size, "offset": p.offset} for p in k.params],
             "scratch": dict(k.scratch), **_optional_raw(k)}
            for k in m.kernels
        ],
    }


def _optional_raw(k: Kernel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if k.grid is not None:
        out["grid"] = k.grid
    if k.block_m is not None:
        out["block_m"], out["block_n"] = k.block_m, k.block_n
    if k.multiple_of_16 is not None:
        out["multiple_of_16"] = list(k.multiple_of_16)
    if k.pdl:
        out["pdl"] = True
    return out


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a bundle's manifest.

    Parameters
    ----------
    path : str or Path
        The bundle directory or its ``manifest.json``.

    Returns
    -------
    Manifest
        With ``root`` set to the bundle directory.

    Raises
    ------
    FileNotFoundError
        If there is no manifest at ``path``.
    ValueError
        If the JSON is malformed or the manifest fails :func:`validate` (the message names the
        kernel and field).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    m = Manifest.from_json(raw, path.parent)
    validate(m)     # the cubin files themselves
    return m
