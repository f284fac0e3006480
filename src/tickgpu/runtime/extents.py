"""How many bytes each pointer of a quant kernel reaches, so a launch can refuse a buffer too small.

A quant kernel (tickgpu/kernels/quant.py, csrc/cuda/w8a16.cu) walks each of its pointers as a
matrix: ``rows`` rows of ``columns`` elements, row r starting ``r * stride`` elements in. It
touches ``(rows - 1) * stride + columns`` elements from the pointer when rows and columns are
both positive (its masks keep every other lane off memory), nothing otherwise. A vector is one
row; a row kernel's LayerNorm weights are a row every one of its M programs reads (stride 0: K
elements, none when M < 1). :data:`REACH` holds, per kernel entry and pointer parameter, which
int parameters are the rows, columns and stride, the element size, and the variant features that
change it:

- ``when``: without this feature the kernel never dereferences the pointer (a LayerNorm's gamma
  and beta without ``ln``; the lo limbs, limb offsets and row sums of int8 weights without
  ``limbs``), so the pointer needs no bytes at all;
- ``half_row``: with this feature (``a16``: W16A16 activations) each row also has a second half
  from ``stride // 2`` on (the int16 codes' lo limbs), so the last row reaches ``stride // 2``
  further;
- ``columns_to``: the columns are read in whole groups of this many (the CUDA C W8A16 kernel's
  16-byte weight loads read each weight row to K rounded up to 16).

Features come from the variant name as :mod:`tickgpu.kernels.quant` forms it: ``ln`` (a LayerNorm,
``_ln``), ``limbs`` (int16 weights as two int8 limbs: ``w16a8``, ``w16a16``), ``a16`` (int16
activations as two int8 limbs: ``w16a16``, ``act16``). An element size "out" is the variant's
output type (its manifest ``dtype``).

The sizes are the launch's own: a kernel given a padded K reads the padded K. Where a kernel reads
at most a block of a row (the fused step's BLOCK_H, the single-read row kernels' BLOCK_K), the
sizes given still count: a launch whose sizes exceed the block is wrong anyway.

The GEMMs that order their tiles by index arithmetic (quant_gemm_kernel, w8a16_gemm_kernel,
tg_w8a16_small_kernel) divide by the number of row and column tiles: with M or N below 1 the
quotient is undefined and so is every address the kernel forms. :func:`compile_reach` makes them
need M and N of at least 1 (:data:`TILE_INDEXED`); an empty batch launches nothing.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Reach", "REACH", "TILE_INDEXED", "VariantReach", "compile_reach", "variant_features", "reach_formula"]


class Reach(NamedTuple):
    """What one pointer parameter spans: ``rows`` x ``columns`` elements of ``element`` bytes
    (int, or "out": the variant's output type), rows ``stride`` elements apart. rows / columns /
    stride name int parameters; rows 1 is a vector, stride 0 one vector every row reads (a row
    kernel's LayerNorm weights: read by each of its M programs, by none when M < 1)."""
    pointer: str
    rows: str | int
    columns: str
    stride: str | int
    element: int | str
    when: str | None = None
    half_row: str | None = None
    columns_to: int = 1


def _vector(pointer: str, length: str, element: int = 4, when: str | None = None, rows: str | int = 1) -> Reach:
    return Reach(pointer, rows, length, 0, element, when)


_W8A16 = (Reach("a_ptr", "M", "K", "stride_am", 2),                 # float16 activations
          Reach("b_ptr", "N", "K", "stride_bn", 1),                 # int8 weights, K contiguous
          _vector("b_scale_ptr", "N"), _vector("bias_ptr", "N"),
          Reach("c_ptr", "M", "N", "stride_cm", "out"))


def _mlp3_layer(i: int, n: str, k: str) -> tuple[Reach, ...]:
    return (Reach(f"w{i}_ptr", n, k, f"stride_w{i}", 1), Reach(f"w{i}b_ptr", n, k, f"stride_w{i}", 1, "limbs"),
            _vector(f"s{i}_ptr", n), _vector(f"o{i}_ptr", n, when="limbs"), _vector(f"b{i}_ptr", n))


#: Per quant kernel entry, what each of its pointer parameters spans (see the module docstring).
REACH: dict[str, tuple[Reach, ...]] = {
    "act_quant_kernel": (
        Reach("x_ptr", "M", "K", "stride_xm", 4),                       # float32 rows
        # LayerNorm weights: read by each row's program (none when M < 1)
        _vector("gamma_ptr", "K", when="ln", rows="M"), _vector("beta_ptr", "K", when="ln", rows="M"),
        Reach("xq_ptr", "M", "K", "stride_qm", 1, half_row="a16"),      # int8 codes (act16: hi, lo limbs)
        _vector("scale_ptr", "M"), _vector("rowsum_ptr", "M")),
    "layernorm_kernel": (
        Reach("x_ptr", "M", "K", "stride_xm", 4),
        _vector("gamma_ptr", "K", rows="M"), _vector("beta_ptr", "K", rows="M"),
        Reach("y_ptr", "M", "K", "stride_ym", "out")),
    "quant_gemm_kernel": (
        Reach("a_ptr", "M", "K", "stride_am", 1, half_row="a16"),       # int8 codes (W16A16: limbs)
        _vector("a_scale_ptr", "M"), _vector("a_rowsum_ptr", "M", when="limbs"),
        Reach("b_ptr", "N", "K", "stride_bn", 1), Reach("b2_ptr", "N", "K", "stride_bn", 1, "limbs"),
        _vector("b_scale_ptr", "N"), _vector("b_offset_ptr", "N", when="limbs"), _vector("bias_ptr", "N"),
        Reach("c_ptr", "M", "N", "stride_cm", "out")),
    "w8a16_gemm_kernel": _W8A16,
    # 16-byte weight loads: each row to K rounded up to 16 (its weight padding is read, not used)
    "tg_w8a16_small_kernel": tuple(r._replace(columns_to=16) if r.pointer == "b_ptr" else r for r in _W8A16),
    "mlp3_fused_kernel": (
        Reach("x_ptr", "M", "K0", "stride_xm", 4),
        # the LayerNorm weights and every layer's weights are loaded by each program, whatever M
        _vector("gamma_ptr", "K0", when="ln"), _vector("beta_ptr", "K0", when="ln"),
        *_mlp3_layer(1, "H1", "K0"), *_mlp3_layer(2, "H2", "H1"), *_mlp3_layer(3, "N", "H2"),
        Reach("y_ptr", "M", "N", "stride_ym", 4)),                      # float32 outputs
}
#: Entries whose tile index arithmetic divides by ceil(M / block_m) and ceil(N / block_n).
TILE_INDEXED = ("quant_gemm_kernel", "w8a16_gemm_kernel", "tg_w8a16_small_kernel")
_OUT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def variant_features(variant: str) -> frozenset[str]:
    """The features of a quant variant that change what its pointers reach, from its name."""
    tokens = set(variant.split("_"))
    out = set()
    if "ln" in tokens:
        out.add("ln")
    if tokens & {"w16a8", "w16a16"}:
        out.add("limbs")
    if tokens & {"w16a16", "act16"}:
        out.add("a16")
    return frozenset(out)


class VariantReach(NamedTuple):
    """:data:`REACH` for one variant, as argument indices: ``rules`` holds, per pointer the kernel
    dereferences, (argument, rows index or -1 for one row, columns index, stride index or -1 for
    stride 0, element bytes, half row, columns rounded up to); ``positive``, the indices of M and N
    where they must be at least 1."""
    rules: tuple[tuple[int, int, int, int, int, bool, int], ...]
    positive: tuple[int, ...]


def compile_reach(spec) -> VariantReach:
    """:data:`REACH` for `spec` (a quant `KernelSpec`) by argument index."""
    table = REACH[spec.entry]
    index = {p.name: i for i, p in enumerate(spec.contract_params)}
    features = variant_features(spec.variant)
    rules = []
    for r in table:
        if r.when is not None and r.when not in features:
            continue
        element = _OUT_BYTES[spec.dtype] if r.element == "out" else r.element
        rules.append((index[r.pointer], -1 if r.rows == 1 else index[r.rows], index[r.columns],
                      -1 if r.stride == 0 else index[r.stride], element,
                      r.half_row is not None and r.half_row in features, r.columns_to))
    positive = (index["M"], index["N"]) if spec.entry in TILE_INDEXED else ()
    return VariantReach(tuple(rules), positive)


def reach_formula(spec, arg: int, values) -> str:
    """How argument `arg`'s bytes follow from the launch's sizes, with their values (error messages)."""
    names = [p.name for p in spec.contract_params]
    r = next(r for r in REACH[spec.entry] if r.pointer == names[arg])
    element = _OUT_BYTES[spec.dtype] if r.element == "out" else r.element
    cols = r.columns if r.columns_to == 1 else f"{r.columns} rounded up to {r.columns_to}"
    used = [r.columns]
    if r.rows == 1 or r.stride == 0:
        text = cols
    else:
        half = f" + {r.stride} // 2" if r.half_row in variant_features(spec.variant) else ""
        text = f"({r.rows} - 1) * {r.stride}{half} + {cols}"
        used = [r.rows, r.stride, r.columns]
    sizes = ", ".join(f"{n}={values[names.index(n)]}" for n in used)
    return f"({text}) x {element} bytes with {sizes}"
