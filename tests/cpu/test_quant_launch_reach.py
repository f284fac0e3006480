"""KernelRuntime.launch / prepare refuse a buffer smaller than what the kernel reaches through it.

Each case below works out by hand, from the kernel sources (tickgpu/kernels/quant.py,
csrc/cuda/w8a16.cu), how many elements each pointer of one variant is dereferenced over for its
sizes: ``(rows - 1) * stride + columns``, W16A16's lo-limb half row, the CUDA C W8A16 kernel's
weight rows to K rounded up to 16, nothing where the variant never reads the pointer. The runtime
(tickgpu.runtime.extents) must accept buffers of exactly that size and refuse one element less,
naming the parameter; the mock driver, with every buffer an allocation of its exact size, must
accept the same launch and trip on the same short buffer passed as a raw address (which the
runtime leaves unchecked).
"""
import numpy as np
import pytest

import tickgpu.runtime as rt
from tickgpu.kernels.manifest import QUANT_PARAMS
from tickgpu.quant import QuantMLP, _gpu
from tickgpu.runtime.extents import REACH, variant_features
from tickgpu.runtime.kernels_api import DTYPES, BufferPool

from cuda_mock import quant_entries   # tests/cpu is on sys.path (conftest.py)


@pytest.fixture
def mock(quant_driver):
    return quant_driver


@pytest.fixture
def kr(quant_ctx):   # tests/cpu/conftest.py
    return rt.kernel_runtime()


@pytest.fixture
def exact(monkeypatch):
    """Every pool buffer is a driver allocation of exactly its bytes: the mock's bounds checks are
    then those of the buffers, not of their power-of-two size classes."""
    monkeypatch.setattr(BufferPool, "size_class", staticmethod(lambda nbytes: max(1, int(nbytes))))


# A case: a variant, its int and float arguments in order, and per pointer parameter the elements
# the kernel reaches through it and their dtype, from the kernel's loads and stores for these sizes
# (None: the variant never dereferences it).
F32, I32, I8, F16 = "float32", "int32", "int8", "float16"
OUT = {"f32": F32, "f16": F16, "bf16": "bfloat16"}


def _act(variant, ln, a16):
    m, k, sx, sq = 3, 20, 24, 32
    return variant, [m, k, sx, sq, 1e-5], {
        "x_ptr": ((m - 1) * sx + k, F32),
        "gamma_ptr": (k, F32) if ln else None, "beta_ptr": (k, F32) if ln else None,
        # act16: hi limbs from the row's start, lo limbs from half a row in
        "xq_ptr": ((m - 1) * sq + (sq // 2 if a16 else 0) + k, I8),
        "scale_ptr": (m, F32), "rowsum_ptr": (m, I32)}


def _layernorm(out):
    m, k, sx, sy = 3, 20, 24, 22
    return f"quant_layernorm_{out}_k64", [m, k, sx, sy, 1e-5], {
        "x_ptr": ((m - 1) * sx + k, F32), "gamma_ptr": (k, F32), "beta_ptr": (k, F32),
        "y_ptr": ((m - 1) * sy + k, OUT[out])}


def _gemm(scheme, out, tile):
    m, n, k, sa, sb, sc = 3, 20, 48, 64, 80, 23
    limbs, a16 = scheme in ("w16a8", "w16a16"), scheme == "w16a16"
    return f"quant_gemm_{scheme}_{out}_{tile}", [m, n, k, sa, sb, sc], {
        "a_ptr": ((m - 1) * sa + (sa // 2 if a16 else 0) + k, I8),
        "a_scale_ptr": (m, F32), "a_rowsum_ptr": (m, I32) if limbs else None,
        "b_ptr": ((n - 1) * sb + k, I8), "b2_ptr": ((n - 1) * sb + k, I8) if limbs else None,
        "b_scale_ptr": (n, F32), "b_offset_ptr": (n, F32) if limbs else None, "bias_ptr": (n, F32),
        "c_ptr": ((m - 1) * sc + n, OUT[out])}


def _w8a16(variant, out, k, sa, sb, b_cols):
    m, n, sc = 3, 20, 23
    return variant, [m, n, k, sa, sb, sc], {
        "a_ptr": ((m - 1) * sa + k, F16), "b_ptr": ((n - 1) * sb + b_cols, I8),
        "b_scale_ptr": (n, F32), "bias_ptr": (n, F32), "c_ptr": ((m - 1) * sc + n, OUT[out])}


def _mlp3(scheme, ln, width):
    m, k0, h1, h2, n = 5, 20, 30, 25, 7
    sx, sw1, sw2, sw3, sy = 22, 32, 32, 32, 9
    limbs = scheme in ("w16a8", "w16a16")
    ptrs = {"x_ptr": ((m - 1) * sx + k0, F32),
            "gamma_ptr": (k0, F32) if ln else None, "beta_ptr": (k0, F32) if ln else None}
    for i, (rows, cols, stride) in enumerate(((h1, k0, sw1), (h2, h1, sw2), (n, h2, sw3)), 1):
        w = ((rows - 1) * stride + cols, I8)
        ptrs.update({f"w{i}_ptr": w, f"w{i}b_ptr": w if limbs else None, f"s{i}_ptr": (rows, F32),
                     f"o{i}_ptr": (rows, F32) if limbs else None, f"b{i}_ptr": (rows, F32)})
    ptrs["y_ptr"] = ((m - 1) * sy + n, F32)
    return (f"quant_mlp3_{scheme}{'_ln' if ln else ''}_h{width}",
            [m, k0, h1, h2, n, sx, sw1, sw2, sw3, sy, 1e-5], ptrs)


CASES = [
    _act("quant_act_k64", False, False), _act("quant_act_ln_k1024", True, False), _act("quant_act_k512", False, False),
    _act("quant_act16_k64", False, True), _act("quant_act16_ln_k512", True, True),
    _layernorm("f16"), _layernorm("f32"),
    _gemm("w8a8", "f32", "s"), _gemm("w8a8", "bf16", "l"), _gemm("w16a8", "f16", "m"), _gemm("w16a16", "bf16", "s"),
    _gemm("w16a16", "f32", "w"),
    # Triton W8A16: activation rows of any stride (K = 40, rows 41 apart) and the aligned variant
    _w8a16("quant_w8a16_f32_s", "f32", 40, 41, 48, 40), _w8a16("quant_w8a16_gelu_bf16_w_a16", "bf16", 48, 64, 80, 48),
    # CUDA C W8A16: weight rows read in 16-byte loads, to K = 40 rounded up to 48
    _w8a16("quant_w8a16_f16_m8", "f16", 40, 41, 48, 48), _w8a16("quant_w8a16_gelu_f32_m32", "f32", 33, 33, 64, 48),
    _mlp3("w8a8", False, 32), _mlp3("w16a8", True, 32), _mlp3("w16a16", False, 64), _mlp3("w8a16", True, 64),
]
CASE_IDS = [c[0] for c in CASES]


def _zeros(kr, elements, dtype):
    return kr.upload_as(np.zeros(elements, DTYPES[dtype]), dtype)


class _Args(list):
    """Launch arguments that keep the buffers behind any raw addresses among them alive."""


def _build(kr, case, short=None, raw=False):
    """The launch's arguments: exactly sized zero buffers (one float32 where the kernel never reads
    the pointer), `short` one element less; with `raw`, that one as its bare address."""
    variant, ints, ptrs = case
    args, keep, ints = _Args(), [], list(ints)
    for p in kr.spec(variant).contract_params:
        if p.kind != "ptr":
            args.append(ints.pop(0))
            continue
        elements, dtype = ptrs[p.name] or (1, F32)
        buf = _zeros(kr, elements - (p.name == short), dtype)
        keep.append(buf)
        args.append(buf.ptr if raw and p.name == short else buf)
    args.keep = keep
    return args


def test_every_kernel_and_pointer_has_a_rule():
    assert set(REACH) == set(QUANT_PARAMS)
    for entry, params in QUANT_PARAMS.items():
        kinds = dict(params)
        assert [r.pointer for r in REACH[entry]] == [n for n, k in params if k == "ptr"], entry
        for r in REACH[entry]:
            for size in (r.rows, r.columns, r.stride):
                assert size in (0, 1) or kinds[size] == "i32", (entry, r)
    entries = {e["entry"] for e in quant_entries("sm_90") if e["variant"] in CASE_IDS}
    assert entries == set(QUANT_PARAMS)   # the cases cover every kernel


def test_variant_features_from_the_committed_names():
    for e in quant_entries("sm_90"):
        v, f = e["variant"], variant_features(e["variant"])
        assert ("ln" in f) == ("_ln_" in v), v
        assert ("limbs" in f) == any(s in v for s in ("w16a8", "w16a16")), v
        assert ("a16" in f) == (v.startswith("quant_act16") or "w16a16" in v), v


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_exactly_sized_buffers_launch(kr, mock, exact, case):
    variant = case[0]
    args = _build(kr, case)
    kr.launch(variant, None, args)
    kr.prepare(variant, None, args).launch(sync=True)
    assert [ln["variant"] for ln in mock.launches[-2:]] == [variant] * 2


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_buffer_one_element_short_is_refused(kr, mock, exact, case):
    variant, _, ptrs = case
    before = len(mock.launches)
    for name, need in ptrs.items():
        if need is None:
            continue
        args = _build(kr, case, short=name)
        nbytes = (need[0] - 1) * DTYPES[need[1]].itemsize
        for call in (kr.launch, kr.prepare):
            with pytest.raises(ValueError, match=rf"^{variant}: parameter {name} needs a buffer of at least "
                                                 rf"{nbytes + DTYPES[need[1]].itemsize} bytes, .*; got {nbytes} bytes"):
                call(variant, None, args)
    assert len(mock.launches) == before


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_mock_trips_on_the_same_short_buffer_passed_raw(kr, mock, exact, case):
    """A raw address is the caller's promise: the runtime passes it on, and the mock -- every buffer
    its exact size -- finds the kernel reaching past the short one."""
    variant, _, ptrs = case
    for name, need in ptrs.items():
        if need is None:
            continue
        args = _build(kr, case, short=name, raw=True)
        with pytest.raises(AssertionError, match=f"{variant} {name}: .* outside every allocation"):
            kr.launch(variant, None, args)


def test_error_messages_give_the_sizes(kr):
    args = _build(kr, CASES[0], short="x_ptr")
    with pytest.raises(ValueError) as e:
        kr.launch("quant_act_k64", None, args)
    assert str(e.value) == ("quant_act_k64: parameter x_ptr needs a buffer of at least 272 bytes, ((M - 1) * "
                            "stride_xm + K) x 4 bytes with M=3, stride_xm=24, K=20; got 268 bytes (float32 (67,))")
    case = next(c for c in CASES if c[0] == "quant_act16_k64")
    with pytest.raises(ValueError, match=r"xq_ptr needs a buffer of at least 100 bytes, \(\(M - 1\) \* stride_qm \+ "
                                         r"stride_qm // 2 \+ K\) x 1 bytes with M=3, stride_qm=32, K=20; got 99"):
        kr.launch("quant_act16_k64", None, _build(kr, case, short="xq_ptr"))
    case = next(c for c in CASES if c[0] == "quant_w8a16_f16_m8")
    with pytest.raises(ValueError, match=r"b_ptr needs a buffer of at least 960 bytes, \(\(N - 1\) \* stride_bn \+ "
                                         r"K rounded up to 16\) x 1 bytes with N=20, stride_bn=48, K=40; got 959"):
        kr.launch("quant_w8a16_f16_m8", None, _build(kr, case, short="b_ptr"))
    case = next(c for c in CASES if c[0] == "quant_gemm_w8a8_bf16_l")
    with pytest.raises(ValueError, match=r"c_ptr needs a buffer of at least 132 bytes, \(\(M - 1\) \* stride_cm \+ N\) "
                                         r"x 2 bytes with M=3, stride_cm=23, N=20; got 130 bytes \(bfloat16 \(65,\)\)"):
        kr.launch("quant_gemm_w8a8_bf16_l", None, _build(kr, case, short="c_ptr"))


def test_sizes_that_reach_nothing_need_nothing(kr, mock):
    """No rows or no columns: every lane of that pointer is masked off, so any buffer will do (a row
    kernel's grid is then one program that returns at once); the other pointers still count."""
    tiny = _zeros(kr, 1, F32)
    kr.launch("quant_act_k64", None, [tiny] * 6 + [0, 20, 24, 32, 1e-5])
    kr.launch("quant_layernorm_f32_k64", None, [tiny] * 4 + [0, 20, 24, 24, 1e-5])
    # a GEMM with K = 0 reads no codes or weights, but still its scales and bias, and writes C
    m, n = 2, 16
    vec_m, vec_n, c = _zeros(kr, m, F32), _zeros(kr, n, F32), _zeros(kr, m * n, F32)
    kr.launch("quant_gemm_w8a8_f32_s", None, [tiny, vec_m, tiny, tiny, tiny, vec_n, tiny, vec_n, c, m, n, 0, 16, 16, n])
    with pytest.raises(ValueError, match="quant_gemm_w8a8_f32_s: parameter c_ptr needs"):
        kr.launch("quant_gemm_w8a8_f32_s", None, [tiny, vec_m, tiny, tiny, tiny, vec_n, tiny, vec_n, tiny,
                                                  m, n, 0, 16, 16, n])
    # the fused step with no rows reads no input and writes no output, but loads every weight
    variant, ints, ptrs = next(c for c in CASES if c[0] == "quant_mlp3_w16a8_ln_h32")
    args = _build(kr, (variant, [0] + ints[1:], ptrs))
    args[0] = args[18] = tiny
    kr.launch(variant, None, args)
    args[3] = _zeros(kr, ptrs["w1_ptr"][0] - 1, I8)
    with pytest.raises(ValueError, match=f"{variant}: parameter w1_ptr needs"):
        kr.launch(variant, None, args)


@pytest.mark.parametrize("variant", ["quant_gemm_w8a8_f32_s", "quant_w8a16_f32_m", "quant_w8a16_f32_m8"])
def test_tiled_gemms_need_a_row_and_a_column(kr, mock, variant):
    """Their tile index divides by the number of row and column tiles: M or N below 1 is refused
    (raw addresses too), not launched as the manifest's one-program grid."""
    bufs = [_zeros(kr, 4096, F32) for p in kr.spec(variant).contract_params if p.kind == "ptr"]
    before = len(mock.launches)
    for m, n, name in ((0, 16, "M"), (4, 0, "N"), (-3, 16, "M")):
        for args in (bufs, [b.ptr for b in bufs]):
            with pytest.raises(ValueError, match=rf"{variant}: parameter {name} must be at least 1, got {min(m, n)}"):
                kr.launch(variant, None, list(args) + [m, n, 16, 16, 16, 16])
    assert len(mock.launches) == before
    kr.launch(variant, None, bufs + [1, 1, 16, 16, 16, 16])


def test_negative_stride_into_a_buffer_is_refused(kr, mock):
    case = CASES[0]
    args = _build(kr, case)
    args[8] = -24                       # stride_xm
    with pytest.raises(ValueError, match="quant_act_k64: parameter stride_xm is -24: a negative row stride "
                                         "reaches before x_ptr's buffer"):
        kr.launch("quant_act_k64", None, args)
    one_row = _build(kr, case)
    one_row[6], one_row[8] = 1, -24     # one row: the stride is never used
    kr.prepare("quant_act_k64", None, one_row)
    a16 = _build(kr, next(c for c in CASES if c[0] == "quant_act16_k64"))
    a16[6], a16[9] = 1, -32             # one row, but its lo limbs start stride_qm // 2 in
    with pytest.raises(ValueError, match="stride_qm is -32"):
        kr.launch("quant_act16_k64", None, a16)


def test_mapped_buffers_are_checked_too(kr, mock):
    variant, ints, ptrs = CASES[0]
    args = _build(kr, CASES[0])
    args[0] = kr.mapped((ptrs["x_ptr"][0] - 1,), F32)
    with pytest.raises(ValueError, match="parameter x_ptr needs a buffer of at least 272 bytes.*got 268"):
        kr.prepare(variant, None, args)
    args[0] = kr.mapped((ptrs["x_ptr"][0],), F32)
    args[0].host[:] = 1.0
    kr.prepare(variant, None, args).launch(sync=True)
    assert mock.launches[-1]["variant"] == variant


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_model_steps_fit_exactly_sized_allocations(kr, mock, exact, rng, scheme):
    """The plans' own buffers pass the check and, each allocated to its exact size, every access
    of the mock's kernels: layer by layer (odd widths, 70 rows; the CUDA C W8A16 kernel at 5 rows)
    and the fused step."""
    for dims in ([13, 40, 24, 3], [20, 48, 60, 7]):
        layers = [(rng.standard_normal((o, i)), rng.standard_normal(o)) for i, o in zip(dims[:-1], dims[1:])]
        for ln in (None, (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]))):
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype="float16")
            for m in (5, 70):
                x = rng.standard_normal((m, dims[0])).astype(np.float32)
                assert np.array_equal(_gpu.plan_for(mlp, kr).run(x), mlp.forward_cpu(x))
    launched = {ln_["variant"] for ln_ in mock.launches}
    assert any(v.startswith("quant_mlp3_") for v in launched)
    if scheme == "w8a16":
        assert any(v.endswith("_m8") for v in launched)
