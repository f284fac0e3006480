"""tickgpu.runtime.kernel_runtime() on the mock driver: the quant kernels' packing, grids, alignment
promises, warm-up and a whole QuantMLP plan -- no GPU needed.

The bundle is the committed manifest's quant entries (real parameter layouts, tiles, shared memory
sizes) with fake cubins. The mock (cuda_mock.py) reads every launch's arguments through the packed
buffer at the manifest's offsets, checks the grid against the manifest's rule and the alignment
promise, and computes the kernel with the NumPy reference on "device" memory: so a swapped
argument, a wrong stride or a K that is not the padded one gives wrong numbers, not a pass.
"""
import gc
import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import tickgpu.runtime as rt
from tickgpu.quant import QuantLinear, QuantMLP, _gpu
from tickgpu.runtime.bundle import BundleError
from tickgpu.runtime.kernels_api import BufferPool
from tickgpu.runtime.launch import ArgBuffer

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, kernel_entry, quant_entries, write_bundle  # noqa: E402


@pytest.fixture
def mock(quant_driver):
    return quant_driver


@pytest.fixture
def ctx(quant_ctx):   # tests/cpu/conftest.py
    return quant_ctx


@pytest.fixture
def kr(ctx):
    return rt.kernel_runtime()


def test_committed_bundle_has_the_quant_variants_the_plan_names():
    names = {k["variant"] for k in quant_entries("sm_90")}
    assert names == {k["variant"] for k in quant_entries("sm_80")}
    for scheme, large in (("w8a8", "l"), ("w16a8", "l"), ("w16a16", "w")):
        for gelu in ("", "_gelu"):
            for out in ("f32", "f16", "bf16"):
                for tile in "sm" + large:
                    assert f"quant_gemm_{scheme}{gelu}_{out}_{tile}" in names
                for tile in "sl":
                    assert f"quant_w8a16{gelu}_{out}_{tile}" in names
                    assert f"quant_w8a16{gelu}_{out}_{tile}_a16" in names
    for k in (64, 1024, 512):
        assert {f"quant_act_k{k}", f"quant_act_ln_k{k}", f"quant_act16_k{k}", f"quant_act16_ln_k{k}",
                f"quant_layernorm_f16_k{k}"} <= names


def test_quant_kernels_load_with_shared_memory_opt_in(ctx, mock):
    big = [lk for lk in ctx.bundle.kernels.values() if lk.spec.shared > 48 * 1024]
    assert big, "expected some GEMM tiles above 48 KB of shared memory"
    for lk in big:
        attrs = mock.functions[lk.func].get("attributes", {})
        assert attrs.get("MAX_DYNAMIC_SHARED_SIZE_BYTES") == lk.spec.shared, lk.variant
    small = next(lk for lk in ctx.bundle.kernels.values() if lk.spec.family == "quant" and lk.spec.shared <= 48 * 1024)
    assert "attributes" not in mock.functions[small.func]


def test_arg_buffer_packs_quant_params_at_manifest_offsets(ctx):
    lk = ctx.bundle.kernels["quant_act_ln_k64"]
    spec = lk.spec
    assert [p.name for p in spec.contract_params][-1] == "ln_eps"
    assert [p.name for p in spec.scratch_params] == ["global_scratch", "profile_scratch"]
    buf = ArgBuffer(lk)
    vals = [0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 7, 50, 53, 64, 1e-5]
    buf.pack(*vals)
    raw = buf.values.tobytes()
    off = {p.name: p.offset for p in spec.params}
    assert struct.unpack_from("<Q", raw, off["beta_ptr"])[0] == 0x3000
    assert struct.unpack_from("<i", raw, off["stride_qm"])[0] == 64
    assert struct.unpack_from("<f", raw, off["ln_eps"])[0] == np.float32(1e-5)
    assert struct.unpack_from("<QQ", raw, off["global_scratch"]) == (0, 0)
    with pytest.raises(TypeError, match="12 values for 11"):
        buf.pack(*vals, 1)


# W8A8 tiles: "s" 16 x 32, "m" 64 x 64, "w" 64 x 128, "l" 128 x 128 (tickgpu.kernels.quant.GEMM_TILES).
@pytest.mark.parametrize("m,n,tile,grid", [(1, 70, "s", 3), (16, 64, "s", 2), (17, 70, "s", 6), (64, 1, "s", 4),
                                           (70, 130, "m", 6), (70, 130, "w", 4), (65, 129, "l", 2),
                                           (300, 257, "l", 9)])
def test_launch_uses_the_manifests_tile_grid(kr, mock, rng, m, n, tile, grid):
    k = 48
    a = kr.upload(rng.integers(-127, 128, (m, k), dtype=np.int8))
    b = kr.upload(rng.integers(-127, 128, (n, k), dtype=np.int8))
    s_a, s_b = kr.upload(np.full(m, 0.5, np.float32)), kr.upload(np.full(n, 0.25, np.float32))
    rs, bias = kr.upload(np.zeros(m, np.int32)), kr.upload(np.zeros(n, np.float32))
    c = kr.empty((m, n), "float32")
    args = [a, s_a, rs, b, b, s_b, s_b, bias, c, m, n, k, k, k, n]
    variant = f"quant_gemm_w8a8_f32_{tile}"
    assert kr.grid(variant, args) == (grid, 1, 1)
    kr.launch(variant, (grid, 1, 1), args)
    assert mock.launches[-1]["variant"] == variant and mock.launches[-1]["grid"] == (grid, 1, 1)
    want = (kr.download(a).astype(np.int64) @ kr.download(b).astype(np.int64).T) * np.float32(0.125)
    assert np.array_equal(kr.download(c), want.astype(np.float32))
    with pytest.raises(ValueError, match="grid"):
        kr.launch(variant, (grid + 1, 1, 1), args)
    kr.launch(variant, None, args)   # the manifest's rule
    assert mock.launches[-1]["grid"] == (grid, 1, 1)


def test_rows_grid_and_bad_arguments(kr, mock, rng):
    m, k = 5, 20
    x = kr.upload(rng.standard_normal((m, k)).astype(np.float32))
    g, bt = kr.upload(np.ones(k, np.float32)), kr.upload(np.zeros(k, np.float32))
    xq, s, rs = kr.empty((m, 32), "int8"), kr.empty((m,), "float32"), kr.empty((m,), "int32")
    args = [x, g, bt, xq, s, rs, m, k, k, 32, 1e-5]
    kr.launch("quant_act_k64", (m, 1, 1), args)
    assert mock.launches[-1]["grid"] == (m, 1, 1)
    with pytest.raises(ValueError, match="grid"):
        kr.launch("quant_act_k64", (m + 1, 1, 1), args)
    with pytest.raises(TypeError, match="10 arguments for 11"):
        kr.launch("quant_act_k64", None, args[:-1])
    with pytest.raises(TypeError, match="x_ptr takes a device buffer"):
        kr.launch("quant_act_k64", None, [np.zeros(3)] + args[1:])
    with pytest.raises(TypeError, match="M takes an int"):
        kr.launch("quant_act_k64", None, args[:6] + [5.0] + args[7:])
    with pytest.raises(ValueError, match="int32"):
        kr.launch("quant_act_k64", None, args[:7] + [2**31] + args[8:])
    with pytest.raises(BundleError, match="quant_act_k128"):
        kr.launch("quant_act_k128", None, args)


def test_aligned_variants_refuse_broken_promises(kr, mock):
    m, n, k = 3, 16, 32
    bufs = [kr.empty(shape, dt) for shape, dt in [((m, k), "int8"), ((m,), "float32"), ((m,), "int32"),
                                                  ((n, k), "int8"), ((n, k), "int8"), ((n,), "float32"),
                                                  ((n,), "float32"), ((n,), "float32"), ((m, n), "float32")]]
    args = bufs + [m, n, k, k, k, n]
    before = len(mock.launches)
    bad_k = list(args)
    bad_k[11] = 30     # K not a multiple of 16
    with pytest.raises(ValueError, match="K must be a multiple of 16"):
        kr.launch("quant_gemm_w8a8_f32_s", None, bad_k)
    bad_stride = list(args)
    bad_stride[12] = 40
    with pytest.raises(ValueError, match="stride_am must be a multiple of 16"):
        kr.launch("quant_gemm_w8a8_f32_s", None, bad_stride)
    bad_ptr = list(args)
    bad_ptr[0] = bufs[0].ptr + 8
    with pytest.raises(ValueError, match="a_ptr.*16-byte"):
        kr.launch("quant_gemm_w8a8_f32_s", None, bad_ptr)
    assert len(mock.launches) == before
    # stride_cm and N carry no promise (C's rows n + 3 apart: a buffer that holds them)
    kr.launch("quant_gemm_w8a8_f32_s", None, bufs[:8] + [kr.empty((m, n + 3), "float32"), m, n, k, k, k, n + 3])


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
@pytest.mark.parametrize("dims", [[13, 40, 24, 3], [64, 96, 32, 5]], ids=["odd", "aligned"])
def test_quant_mlp_plan_on_the_kernel_runtime(kr, mock, rng, scheme, dims):
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
    for layernorm in (None, ln):
        for out in ("float32", "float16", "bfloat16"):
            mlp = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out)
            for m in (1, 17, 70):
                x = (rng.standard_normal((m, dims[0])) * 2).astype(np.float32)
                x[m // 2, 0] = np.nan if m > 1 else x[0, 0]   # a poisoned row stays a NaN row
                got = _gpu.plan_for(mlp, kr).run(x)
                want = mlp.forward_cpu(x)
                assert got.dtype == want.dtype and got.shape == (m, dims[-1])
                # The mock computes each kernel with the reference: any plumbing slip shows here.
                assert np.array_equal(got, want, equal_nan=True), (layernorm is None, out, m)
    launched = {ln_["variant"] for ln_ in mock.launches}
    # Up to 64 rows, three layers up to 64 wide are one fused kernel; 70 rows go layer by layer.
    assert {v for v in launched if v.startswith("quant_mlp3_")} == {
        f"quant_mlp3_{scheme}{ln_}_h64" for ln_ in (("_ln",) if scheme == "w8a16" else ("", "_ln"))
        if max(dims) <= 64}
    if scheme == "w8a16":
        assert any(v.endswith("_a16") for v in launched) == (dims[0] % 16 == 0)
        assert any(v.endswith("_m8") for v in launched)   # one row: the small-batch kernel


def test_fused_step_is_one_kernel_in_its_graph(kr, ctx, mock, rng):
    """A 3-layer step of up to 64 rows: one kernel on mapped input and output (one program per 16
    rows), the narrowest width variant that holds the model, float32 out rounded on the host as a
    kernel's store rounds; the plan's arguments read back at the manifest's offsets."""
    dims = [20, 48, 60, 3]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    mlp = QuantMLP(layers, layernorm=(rng.uniform(0.5, 1.5, 20), rng.standard_normal(20)), scheme="w16a8",
                   out_dtype="float16")
    plan = _gpu.plan_for(mlp, kr)
    for m in (1, 16, 17, 64):
        x = rng.standard_normal((m, 20)).astype(np.float32)
        before = len(mock.launches)
        got = plan.run(x)
        assert got.dtype == np.float16 and np.array_equal(got, mlp.forward_cpu(x))
        launch = mock.launches[before:]
        assert [ln_["variant"] for ln_ in launch] == ["quant_mlp3_w16a8_ln_h64"]
        assert launch[0]["grid"] == (-(-m // 16), 1, 1)
        prog = plan.programs[m]
        assert prog.graph is not None and prog.x.host.shape == (m, 20) and prog.out.host.dtype == np.float32
        # sizes and strides as the kernel reads them: M, K0, H1, H2, N, then x, weights (padded K), y
        assert tuple(launch[0]["args"][19:29]) == (m, 20, 48, 60, 3, 20, 32, 48, 64, 3)
    assert plan.fused_variant(65) is None
    lin = _gpu.plan_for(QuantMLP(layers[:2], scheme="w8a8"), kr)
    assert lin.fused_variant(1) is None   # two layers: layer by layer


def test_step_graphs_chain_their_kernels_by_programmatic_launch(kr, mock, rng):
    """The sm_90 bundle's quant kernels wait for their predecessor themselves (manifest "pdl"): a
    layer-by-layer step's graph launches every kernel after the first as a programmatic dependent
    launch, the first plainly; a one-kernel step, and a runtime with `programmatic` off, none.
    Results are the reference's either way."""
    dims = [64, 256, 256, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
    assert all(k["pdl"] for k in quant_entries("sm_90") if not k["variant"].startswith("quant_mlp3_"))
    for scheme, kernels in (("w8a16", 4), ("w8a8", 6), ("w16a8", 6), ("w16a16", 6)):
        for programmatic in (True, False):
            kr.programmatic = programmatic
            mlp = QuantMLP(layers, layernorm=ln, scheme=scheme)
            before = len(mock.programmatic)
            x = rng.standard_normal((5, 64)).astype(np.float32)
            assert np.array_equal(_gpu.plan_for(mlp, kr).run(x), mlp.forward_cpu(x))
            names = [v for v, _, _ in _gpu.plan_for(mlp, kr).programs[5].launches]
            assert len(names) == kernels
            assert mock.programmatic[before:] == (names[1:] if programmatic else []), (scheme, programmatic)
    kr.programmatic = True
    small = QuantMLP([(rng.standard_normal((32, 12)), np.zeros(32)), (rng.standard_normal((32, 32)), np.zeros(32)),
                      (rng.standard_normal((1, 32)), np.zeros(1))], scheme="w8a8")
    before = len(mock.programmatic)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    assert np.array_equal(_gpu.plan_for(small, kr).run(x), small.forward_cpu(x))
    assert len(_gpu.plan_for(small, kr).programs[3].launches) == 1 and mock.programmatic[before:] == []
    # asked for a kernel that does not wait for its predecessor (the one-kernel step), a
    # programmatic launch is a plain one
    fused = _gpu.plan_for(small, kr).programs[3].prepared[0]
    assert not fused.pdl
    fused.launch(programmatic=True, sync=True)
    assert mock.programmatic[before:] == []


def test_no_programmatic_launch_before_hopper(tmp_path, rng):
    """sm_80 kernels are built without the dependency control (it came with sm_90): their steps'
    graphs have plain edges only, with the same results."""
    mock = MockDriver(cc=(8, 0))
    rt.init(driver=mock, staging_elements=64,
            bundle_dir=write_bundle(tmp_path / "bundle", default_entries("sm_80") + quant_entries("sm_80")))
    try:
        assert not any(k.get("pdl") for k in quant_entries("sm_80"))
        kr = rt.kernel_runtime()
        layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
                  for i, o in zip((64, 256, 256), (256, 256, 4))]
        mlp = QuantMLP(layers, layernorm=(np.ones(64), np.zeros(64)), scheme="w8a8")
        x = rng.standard_normal((16, 64)).astype(np.float32)
        assert np.array_equal(_gpu.plan_for(mlp, kr).run(x), mlp.forward_cpu(x))
        assert len(_gpu.plan_for(mlp, kr).programs[16].launches) == 6 and mock.programmatic == []
    finally:
        rt.reset()


@pytest.mark.parametrize("arch,family,ok", [("sm_90", "quant", True), ("sm_80", "quant", False),
                                            ("sm_90", "greeks", False)])
def test_manifest_pdl_field(arch, family, ok):
    """"pdl" is a quant kernel's, on sm_90 or later; elsewhere the manifest is refused, naming it."""
    from tickgpu.kernels.manifest import validate

    raw = json.loads((Path(__file__).resolve().parents[2] / "src/tickgpu/kernels/bundle/manifest.json").read_text())
    if family == "quant":
        k = dict(next(k for k in raw["kernels"] if k["variant"] == "quant_act_k64" and k["arch"] == "sm_90"))
    else:
        k = kernel_entry("greeks", "f64", 256, 128, True)
    k.update(arch=arch, file=f"{arch}/{k['variant']}.cubin", pdl=True)
    doc = dict(raw, kernels=[k])
    if ok:
        validate(doc)
    else:
        with pytest.raises(ValueError, match="pdl"):
            validate(doc)


def test_auto_runs_quant_models_on_the_gpu_where_it_won(kr, mock, rng, monkeypatch):
    """backend="auto": a QuantMLP / QuantLinear call goes to the GPU for row counts inside the op's
    measured range (tickgpu.dispatch, ops "quant_mlp" / "quant_linear") and stays on the CPU
    outside it, for CPU-only schemes, and without a GPU; results are the reference's either way."""
    from tickgpu import dispatch

    monkeypatch.setattr(dispatch, "gpu_range", lambda: {"quant_mlp": (4, 64), "quant_linear": (2, None)})
    layers = [(rng.standard_normal((o, i)), rng.standard_normal(o)) for i, o in ((12, 32), (32, 32), (32, 2))]
    x = rng.standard_normal((100, 12)).astype(np.float32)
    models = [(QuantMLP(layers, scheme="w8a8", backend="auto"), {1: False, 4: True, 63: True, 64: False}),
              (QuantLinear(*layers[0], scheme="w8a8", backend="auto"), {1: False, 2: True, 100: True}),
              (QuantMLP(layers, scheme="fp16", backend="auto"), {4: False, 63: False})]
    for model, on_gpu in models:
        for m, want in on_gpu.items():
            before = len(mock.launches)
            y = model(x[:m])
            assert (len(mock.launches) > before) == want, (type(model).__name__, model.scheme, m)
            assert np.array_equal(y, model.forward_cpu(x[:m]))
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    before = len(mock.launches)
    assert np.array_equal(models[0][0](x[:4]), models[0][0].forward_cpu(x[:4]))
    assert len(mock.launches) == before


def test_shipped_crossover_sends_quant_models_to_the_gpu(kr, mock, rng):
    """The shipped ranges (data/crossover.json, measured by the quant suite: the GPU won at every
    size) send a GPU scheme's model to the GPU from one row under "auto"."""
    from tickgpu import dispatch

    dispatch.gpu_range.cache_clear()
    try:
        ranges = dispatch.gpu_range()
        assert ranges["quant_mlp"] == ranges["quant_linear"] == (1, None)
        assert dispatch.choose("quant_mlp", 1, "auto") == "gpu"
        mlp = QuantMLP([(rng.standard_normal((4, 6)), None), (rng.standard_normal((2, 4)), None)], backend="auto")
        before = len(mock.launches)
        x = rng.standard_normal((1, 6)).astype(np.float32)
        assert np.array_equal(mlp(x), mlp.forward_cpu(x)) and len(mock.launches) > before
    finally:
        dispatch.gpu_range.cache_clear()


@pytest.mark.parametrize("m,tile,grid", [(1, "m8", 5), (8, "m8", 5), (9, "m16", 5), (16, "m16", 5),
                                         (17, "m32", 5), (32, "m32", 5), (33, "s", 9), (65, "s", 15)])
def test_w8a16_small_batches_take_the_cuda_kernel(kr, mock, rng, m, tile, grid):
    """M <= 8 / 16 / 32: the CUDA C kernel's variants (16 channels a block); above: the Triton tiles."""
    n, k = 70, 37     # odd K: activation rows of 37 elements, weight rows padded to 48 bytes
    lin = QuantLinear(rng.standard_normal((n, k)), rng.standard_normal(n), scheme="w8a16",
                      out_dtype="float16", gelu=True)
    x = rng.standard_normal((m, k)).astype(np.float32)
    assert np.array_equal(_gpu.plan_for(lin, kr).run(x), lin.forward_cpu(x))
    last = mock.launches[-1]
    assert last["variant"] == f"quant_w8a16_gelu_f16_{tile}" and last["grid"] == (grid, 1, 1)
    assert tuple(last["args"][5:11]) == (m, n, k, k, 48, n)   # (Triton kernels: then two scratch pointers)
    name, g = _gpu.w8a16_launch(m, n, k, k, 48, True, "f16", 132)   # a runtime without has(): Triton only
    assert name == "quant_w8a16_gelu_f16_s" and g == (-(-m // 16) * -(-n // 32), 1, 1)
    # On one SM the 128 x 256 tile's one program is the wave it wants (from 65 rows), and from
    # 33 rows the 64 x 64 tile's two.
    name, g = _gpu.w8a16_launch(m, n, k, k, 48, True, "f16", 1)
    assert (name, g) == (("quant_w8a16_gelu_f16_l", (1, 1, 1)) if m > 64 else
                         ("quant_w8a16_gelu_f16_m", (2, 1, 1)) if m > 32 else
                         ("quant_w8a16_gelu_f16_s", (-(-m // 16) * -(-n // 32), 1, 1)))


# The tile rule against the measured sweep (benchmarks/results/h200-2026-11-30-j/quant-sweep-mid.json,
# an H200's 132 SMs): the tile it chose at each of these shapes.
@pytest.mark.parametrize("scheme,m,n,tile", [
    ("w8a8", 1, 4096, "s"), ("w8a8", 16, 4096, "s"), ("w8a8", 32, 4096, "s"), ("w8a8", 64, 4096, "m"),
    ("w8a8", 64, 1024, "s"), ("w8a8", 128, 4096, "m"), ("w8a8", 128, 1024, "s"), ("w8a8", 512, 4096, "w"),
    ("w8a8", 512, 1024, "m"), ("w8a8", 1024, 4096, "l"), ("w8a8", 4096, 4096, "l"), ("w8a8", 1024, 256, "m"),
    ("w16a8", 64, 4096, "m"), ("w16a8", 256, 4096, "m"), ("w16a8", 512, 4096, "l"), ("w16a8", 128, 1024, "s"),
    ("w16a16", 16, 4096, "s"), ("w16a16", 64, 4096, "m"), ("w16a16", 128, 4096, "m"), ("w16a16", 256, 4096, "m"),
    ("w16a16", 512, 4096, "w"), ("w16a16", 1024, 1024, "m"), ("w16a16", 4096, 1024, "w"),
    ("w8a16", 64, 4096, "s"), ("w8a16", 65, 4096, "m"), ("w8a16", 512, 4096, "w"), ("w8a16", 1024, 4096, "l"),
    ("w8a16", 1024, 256, "s"), ("w8a16", 4096, 1024, "l")])
def test_gemm_tile_rule_at_the_measured_shapes(scheme, m, n, tile):
    assert _gpu.gemm_tile(scheme, m, n, 132) == tile


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_gemm_tile_rule_properties(scheme):
    for sms in (1, 2, 108, 132):
        for m in (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 1000, 5000):
            for n in (1, 4, 31, 32, 33, 256, 1000, 4096, 16384):
                tile = _gpu.gemm_tile(scheme, m, n, sms)
                bm, bn = _gpu._TILE_M_N[(scheme, tile)]
                if m <= 16:
                    assert tile == "s"   # per-tick batches keep the per-tick tile, on any GPU
                if tile != "s":
                    assert 2 * m > bm   # more than half the tile's rows used
                    waves = dict(_gpu.GEMM_LADDER[scheme])[tile]
                    assert -(-m // bm) * -(-n // bn) >= waves * sms


def test_a_model_plan_launches_the_rules_tile(kr, mock, rng):
    """A 65 x 4096 W8A8 layer on 132 SMs: the 64 x 64 tile (128 programs), with its grid."""
    lin = QuantLinear(rng.standard_normal((4096, 24)), rng.standard_normal(4096), scheme="w8a8", out_dtype="float32")
    x = rng.standard_normal((65, 24)).astype(np.float32)
    assert np.array_equal(_gpu.plan_for(lin, kr).run(x), lin.forward_cpu(x))
    last = mock.launches[-1]
    assert last["variant"] == "quant_gemm_w8a8_f32_m" and last["grid"] == (2 * 64, 1, 1)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_no_rows_launch_nothing(kr, mock, rng, scheme):
    """An empty batch gives the empty result of the reference, with no launch (an empty grid)."""
    lin = QuantLinear(rng.standard_normal((5, 7)), scheme=scheme, out_dtype="float16", backend="gpu")
    mlp = QuantMLP([(rng.standard_normal((6, 7)), None), (rng.standard_normal((3, 6)), None)], scheme=scheme,
                   backend="gpu")
    before = len(mock.launches)
    for model, n in ((lin, 5), (mlp, 3)):
        y = model(np.zeros((0, 7), np.float32))
        assert y.shape == (0, n) and y.dtype == model.forward_cpu(np.zeros((0, 7), np.float32)).dtype
    assert len(mock.launches) == before


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_staged_step_is_the_general_step(kr, mock, rng, scheme):
    """The one-pass native staging of a host batch (GpuPlan.run_staged) against the general path
    (the model's input check, then GpuPlan.run): same outputs, same errors, same NaN rows."""
    from tickgpu.quant import models

    ln = (rng.uniform(0.5, 1.5, 13), rng.standard_normal(13) * 0.1)
    mlp = QuantMLP([(rng.standard_normal((24, 13)), rng.standard_normal(24)), (rng.standard_normal((5, 24)), None)],
                   layernorm=ln, scheme=scheme, out_dtype="bfloat16", backend="gpu")
    plan = _gpu.plan_for(mlp, kr)
    staged = []
    orig = plan.run_staged

    def counted(*a):
        y = orig(*a)
        if y is not None:
            staged.append(a[0].dtype)
        return y
    plan.run_staged = counted
    for m in (1, 7, 64, 65):
        for dtype in (np.float32, np.float64):
            x = (rng.standard_normal((m, 13)) * 3).astype(dtype)
            want = plan.run(models._check_input(x, 13, True, "fp32")[0])
            got = mlp(x)
            assert got.dtype == want.dtype and np.array_equal(got, want), (m, dtype)
    assert len(staged) == 6            # 65 rows is not one graph: the general path
    assert np.array_equal(mlp(x[0].astype(np.float64)), mlp(x[:1])[0])   # a single token
    bad = x[:7].copy()
    bad[3, 5], bad[4, 1] = np.inf, np.nan
    with pytest.raises(ValueError) as fast:
        mlp(bad)
    with pytest.raises(ValueError) as general:
        models._check_input(bad, 13, True, "fp32")
    assert str(fast.value) == str(general.value) and str(fast.value).startswith("x[3, 5]: must be finite")
    rows = mlp(bad, check=False)
    assert np.isnan(rows[3]).all() and np.isnan(rows[4]).all()
    assert np.array_equal(np.delete(rows, [3, 4], axis=0), np.delete(mlp(x[:7]), [3, 4], axis=0))
    assert np.array_equal(mlp(x[:7], check=None), mlp(x[:7]))   # any truthy / falsy check
    n = len(staged)
    mlp(np.asfortranarray(x[:7]))       # not C-contiguous: the general path
    mlp(x[:7].astype(np.float16))       # another dtype: the general path
    assert len(staged) == n


def test_w8a16_without_layernorm_is_not_staged(kr, mock, rng):
    """Its GPU step reads float16 input: the one-pass float32 staging is not even tried."""
    mlp = QuantMLP([(rng.standard_normal((24, 13)), None), (rng.standard_normal((5, 24)), None)], scheme="w8a16",
                   backend="gpu")
    plan = _gpu.plan_for(mlp, kr)
    plan.run_staged = lambda *a: pytest.fail("staged a float16 step")
    x = rng.standard_normal((3, 13)).astype(np.float32)
    assert np.array_equal(mlp(x), mlp.forward_cpu(x))
    big = x.copy()
    big[1, 2] = 7e4
    with pytest.raises(ValueError, match=r"x\[1, 2\]: exceeds float16's range"):
        mlp(big)


def test_staged_rows_native_check():
    from tickgpu._native import ffi, lib

    x = np.array([[1.0, 70000.0, 2.0], [np.nan, 3.0, -np.inf]])
    out = np.empty((2, 3), np.float32)
    bad, kind = ffi.new("int64_t *"), ffi.new("int *")
    args = (ffi.from_buffer(x), 1, 2, 3, 3, ffi.cast("float *", out.ctypes.data))
    assert lib.tg_stage_rows_f32(*args, 1, 65504.0, bad, kind) == 0 and (bad[0], kind[0]) == (3, 1)
    np.testing.assert_array_equal(out, x.astype(np.float32))
    x[1] = 0.0
    assert lib.tg_stage_rows_f32(*args, 1, 65504.0, bad, kind) == 0 and (bad[0], kind[0]) == (1, 2)
    assert lib.tg_stage_rows_f32(*args, 1, float("inf"), bad, kind) == 0 and (bad[0], kind[0]) == (-1, 0)
    x[0, 0] = 1e300                     # finite in float64, infinite in float32: not finite
    assert lib.tg_stage_rows_f32(*args, 1, float("inf"), bad, kind) == 0 and (bad[0], kind[0]) == (0, 1)
    assert lib.tg_stage_rows_f32(*args, 0, float("inf"), bad, kind) == 0 and kind[0] == 0   # no check
    assert lib.tg_stage_rows_f32(ffi.NULL, 1, 2, 3, 3, args[5], 1, 1.0, bad, kind) == lib.TG_EINVAL
    assert lib.tg_stage_rows_f32(args[0], 1, 2, 3, 2, args[5], 1, 1.0, bad, kind) == lib.TG_EINVAL
    assert lib.tg_stage_rows_f32(args[0], 1, -1, 3, 3, args[5], 1, 1.0, bad, kind) == lib.TG_EINVAL


def test_w8a16_small_kernel_refuses_unaligned_weight_rows(kr, mock, rng):
    m, n, k = 2, 16, 40
    a = kr.upload(rng.standard_normal((m, k)).astype(np.float16))
    b = kr.upload(rng.integers(-127, 128, (n, 48), dtype=np.int8))
    s, bias, c = kr.upload(np.ones(n, np.float32)), kr.upload(np.zeros(n, np.float32)), kr.empty((m, n), "float32")
    with pytest.raises(ValueError, match="stride_bn must be a multiple of 16"):
        kr.launch("quant_w8a16_f32_m8", None, [a, b, s, bias, c, m, n, k, k, 40, n])
    kr.launch("quant_w8a16_f32_m8", None, [a, b, s, bias, c, m, n, k, k, 48, n])
    assert mock.launches[-1]["grid"] == (1, 1, 1)


def test_quant_linear_single_token_and_tiles(kr, mock, rng):
    lin = QuantLinear(rng.standard_normal((130, 70)), rng.standard_normal(130), scheme="w16a8",
                      out_dtype="bfloat16", gelu=True)
    for m in (1, 64, 65, 200):
        x = rng.standard_normal((m, 70)).astype(np.float32)
        assert np.array_equal(_gpu.plan_for(lin, kr).run(x), lin.forward_cpu(x))
        last = mock.launches[-1]
        # 130 channels on 132 SMs: no grid of a larger tile fills its share, so the per-tick tile
        assert last["variant"] == "quant_gemm_w16a8_gelu_bf16_s"
        assert last["args"][11] == 80   # K padded to 16


def test_steady_state_allocates_nothing(kr, mock, rng):
    mlp = QuantMLP([(rng.standard_normal((32, 20)), None), (rng.standard_normal((4, 32)), None)], scheme="w8a8")
    plan = _gpu.plan_for(mlp, kr)
    x = rng.standard_normal((8, 20)).astype(np.float32)
    plan.run(x)
    plan.run(x)
    allocs = mock.counts["mem_alloc"]
    for _ in range(5):
        plan.run(x)
    assert mock.counts["mem_alloc"] == allocs
    assert kr.pool.in_use > 0 and not kr.pool.free   # weights and the step's buffers stay resident
    in_use = kr.pool.in_use
    plan.run(rng.standard_normal((3, 20)).astype(np.float32))   # another row count: a program of its own
    assert kr.pool.in_use > in_use
    del plan
    mlp._gpu_plan = None
    gc.collect()
    assert kr.pool.in_use == 0
    freed = kr.pool.trim()
    assert freed > 0 and not kr.pool.free and kr.pool.reserved == 0


def test_prepared_launch_repeats_without_repacking(kr, mock, rng):
    m, n, k = 4, 32, 16
    a = kr.upload(rng.integers(-127, 128, (m, k), dtype=np.int8))
    b = kr.upload(rng.integers(-127, 128, (n, k), dtype=np.int8))
    ones_m, ones_n = kr.upload(np.ones(m, np.float32)), kr.upload(np.ones(n, np.float32))
    rs, bias, c = kr.upload(np.zeros(m, np.int32)), kr.upload(np.zeros(n, np.float32)), kr.empty((m, n), "float32")
    p = kr.prepare("quant_gemm_w8a8_f32_s", None, [a, ones_m, rs, b, b, ones_n, ones_n, bias, c, m, n, k, k, k, n])
    with pytest.raises(ValueError, match="grid"):
        kr.prepare("quant_gemm_w8a8_f32_s", (3, 1, 1), [a, ones_m, rs, b, b, ones_n, ones_n, bias, c, m, n, k, k, k, n])
    for _ in range(3):
        p.launch()
    assert [ln["variant"] for ln in mock.launches[-3:]] == ["quant_gemm_w8a8_f32_s"] * 3
    want = kr.download(a).astype(np.int64) @ kr.download(b).astype(np.int64).T
    assert np.array_equal(kr.download(c), want.astype(np.float32))
    kr.write(a, np.zeros((m, k), np.int8))
    p.launch()
    assert not kr.download(c).any()
    with pytest.raises(ValueError, match="does not fit"):
        kr.write(a, np.zeros((m, k + 1), np.int8))


def test_buffer_pool_size_classes(mock):
    pool = BufferPool(mock)
    assert [pool.size_class(n) for n in (0, 1, 256, 257, 4096, 5000)] == [256, 256, 256, 512, 4096, 8192]
    p, s = pool.acquire(300)
    assert s == 512 and p % 256 == 0
    pool.release(p, s)
    assert pool.acquire(400) == (p, 512)   # reused, not allocated
    assert mock.counts["mem_alloc"] == 1


def test_download_and_upload_dtypes(kr):
    bits = np.array([0x3F80, 0xC000], np.uint16)            # bfloat16 1.0, -2.0
    buf = kr.upload_as(bits, "bfloat16")
    assert buf.dtype == "bfloat16" and np.array_equal(kr.download(buf), bits)
    with pytest.raises(TypeError, match="cannot hold"):
        kr.upload_as(np.zeros(2, np.float32), "bfloat16")
    with pytest.raises(TypeError, match="not supported"):
        kr.upload(np.zeros(2, np.complex64))
    assert kr.download(kr.upload(np.arange(6, dtype=np.int32).reshape(2, 3))).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert kr.download(kr.empty((0, 4), "float32")).shape == (0, 4)


def test_warmup_launches_every_quant_variant(ctx, mock):
    info = rt.warmup()
    quant = {k.variant for k in ctx.bundle.kernels.values() if k.spec.family == "quant"}
    launched = {ln["variant"] for ln in mock.launches}
    assert quant <= launched
    assert info["kernels"] == len(ctx.bundle.kernels)


def test_kernel_runtime_unavailable_without_gpu(monkeypatch):
    rt.reset()
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    from tickgpu.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="TICKGPU_DISABLE_GPU"):
        rt.kernel_runtime()
    rt.reset()


def test_small_batches_run_as_one_graph_on_mapped_memory(kr, ctx, mock, rng):
    """Up to GRAPH_MAX_ROWS rows a step is one graph replay (no launch, no copy call), its input and
    output in mapped host memory; above, launches as before. Same numbers either way."""
    mlp = QuantMLP([(rng.standard_normal((48, 20)), rng.standard_normal(48)), (rng.standard_normal((5, 48)), None)],
                   layernorm=(np.ones(20), np.zeros(20)), scheme="w8a8")
    plan = _gpu.plan_for(mlp, kr)
    for m in (1, _gpu.GRAPH_MAX_ROWS):
        x = rng.standard_normal((m, 20)).astype(np.float32)
        assert np.array_equal(plan.run(x), mlp.forward_cpu(x))
        prog = plan.programs[m]
        assert prog.graph is not None
        calls, counts = len(mock.calls), dict(mock.counts)
        for _ in range(3):
            x = rng.standard_normal((m, 20)).astype(np.float32)
            assert np.array_equal(plan.run(x), mlp.forward_cpu(x))
        step_calls = mock.calls[calls:]
        assert step_calls.count("cuGraphLaunch") == 3
        assert not {"cuLaunchKernel", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"} & set(step_calls)
        assert mock.counts == counts          # nothing allocated, captured or instantiated again
        assert prog.graph.replays >= 3
    m = _gpu.GRAPH_MAX_ROWS + 1
    x = rng.standard_normal((m, 20)).astype(np.float32)
    assert np.array_equal(plan.run(x), mlp.forward_cpu(x))
    assert plan.programs[m].graph is None
    # A scratch block that moved (another kernel's larger grid) makes the graph capture again.
    g = plan.programs[1].graph
    ctx.bundle.scratch_epoch += 1
    before = mock.counts["graph_instantiate"]
    x = rng.standard_normal((1, 20)).astype(np.float32)
    assert np.array_equal(plan.run(x), mlp.forward_cpu(x))
    assert mock.counts["graph_instantiate"] == before + 1 and g is plan.programs[1].graph


def test_a_launch_refused_during_capture_ends_the_capture(kr, mock, rng):
    """The step's graph is captured on the runtime's stream: a launch the driver refuses there must
    raise its own error and leave the stream out of capture mode (later work runs normally)."""
    from tickgpu.runtime.driver import CudaError

    mlp = QuantMLP([(rng.standard_normal((8, 20)), None)], scheme="w8a8")
    x = rng.standard_normal((4, 20)).astype(np.float32)
    graphs = set(mock.graphs)
    mock.fail["cuLaunchKernel"] = "CUDA_ERROR_LAUNCH_FAILED"
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        _gpu.plan_for(mlp, kr).run(x)
    assert not mock.captures and set(mock.graphs) == graphs   # capture ended, its graph destroyed
    del mock.fail["cuLaunchKernel"]
    mlp._gpu_plan = None
    assert np.array_equal(_gpu.plan_for(mlp, kr).run(x), mlp.forward_cpu(x))


@pytest.mark.parametrize("scheme,layernorm", [("w8a8", False), ("w16a8", True), ("w16a16", True), ("w8a16", True)])
def test_bound_step_follows_its_array(kr, ctx, mock, rng, scheme, layernorm):
    """model.bind(x): each call reads x's current contents and gives model(x) to the bit (fused and
    layer-by-layer steps, float32 and float64 arrays, a single token), the same error for a
    non-finite value, the same NaN rows without the check; and new output arrays every call."""
    for dims in ([12, 32, 32, 1], [20, 200, 40, 3]):       # one fused kernel; layer by layer
        layers = [(rng.standard_normal((o, i)), rng.standard_normal(o)) for i, o in zip(dims[:-1], dims[1:])]
        ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0])) if layernorm else None
        mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype="bfloat16", backend="gpu")
        for shape, dtype in (((5, dims[0]), np.float64), ((dims[0],), np.float32), ((64, dims[0]), np.float32)):
            x = rng.standard_normal(shape).astype(dtype)
            step = mlp.bind(x)
            first = step()
            for _ in range(2):
                x[...] = rng.standard_normal(shape)          # in place, as a tick loop does
                got = step()
                assert got.dtype == np.float32 and np.array_equal(got, mlp(x))
                assert np.array_equal(got, mlp.forward_cpu(np.atleast_2d(x).astype(np.float32)).reshape(got.shape))
            assert not np.array_equal(first, got) and not np.shares_memory(first, got)
        fused = _gpu.plan_for(mlp).programs[5].launches
        assert (len(fused) == 1 and fused[0][0].startswith("quant_mlp3_")) == (max(dims) <= 64)
        x = rng.standard_normal((7, dims[0])).astype(np.float32)
        strict, lax = mlp.bind(x), mlp.bind(x, check=False)
        x[3, 2] = np.nan
        with pytest.raises(ValueError) as bound:
            strict()
        with pytest.raises(ValueError) as plain:
            mlp(x)
        assert str(bound.value) == str(plain.value) and str(bound.value).startswith("x[3, 2]: must be finite")
        rows = lax()
        assert np.isnan(rows[3]).all() and np.array_equal(rows, mlp(x, check=False), equal_nan=True)


def test_bound_step_refuses_what_it_cannot_bind(kr, rng):
    mlp = QuantMLP([(rng.standard_normal((8, 6)), None), (rng.standard_normal((2, 8)), None)], backend="gpu")
    x = rng.standard_normal((4, 6)).astype(np.float32)
    with pytest.raises(TypeError, match="x: must be a NumPy array"):
        mlp.bind(x.tolist())
    with pytest.raises(TypeError, match="x: must be float32 or float64, got float16"):
        mlp.bind(x.astype(np.float16))
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        mlp.bind(np.asfortranarray(x))
    with pytest.raises(ValueError, match=r"x: must have shape \(tokens, 6\) or \(6,\), got \(4, 5\)"):
        mlp.bind(x[:, :5].copy())
    with pytest.raises(ValueError, match="1 to 64 rows.*got 65"):
        mlp.bind(np.zeros((65, 6), np.float32))
    with pytest.raises(ValueError, match="1 to 64 rows.*got 0"):
        mlp.bind(np.zeros((0, 6), np.float32))
    with pytest.raises(ValueError, match="backend is 'cpu'"):
        QuantMLP([(np.ones((2, 6)), None)], backend="cpu").bind(x)
    with pytest.raises(ValueError, match="w8a16.*float16 input"):
        QuantLinear(np.ones((2, 6)), scheme="w8a16", backend="gpu").bind(x)
    with pytest.raises(ValueError, match="'fp16' runs on the CPU only"):
        QuantMLP([(np.ones((2, 6)), None)], scheme="fp16", backend="gpu").bind(x)
    lin = QuantLinear(rng.standard_normal((3, 6)), scheme="w8a8", backend="gpu")
    step = lin.bind(x)
    assert np.array_equal(step(), lin(x))


def test_gpu_steps_import_neither_torch_nor_triton(tmp_path):
    """A fused step, a layer-by-layer step and a bound step on the kernel runtime (mock driver),
    in a process of their own: the run-time path never imports torch or triton."""
    import subprocess

    code = ("import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from pathlib import Path\n"
            "import numpy as np\n"
            "import tickgpu.runtime as rt\n"
            "from tickgpu.quant import QuantMLP\n"
            "from cuda_mock import MockDriver, default_entries, quant_entries, write_bundle\n"
            f"rt.init(driver=MockDriver(), bundle_dir=write_bundle(Path({str(tmp_path / 'b')!r}), "
            "default_entries() + quant_entries('sm_90')), staging_elements=64)\n"
            "ln = (np.ones(12), np.zeros(12))\n"
            "for dims in ([12, 32, 32, 1], [12, 200, 32, 1]):\n"
            "    layers = [(np.ones((o, i)), None) for i, o in zip(dims[:-1], dims[1:])]\n"
            "    for scheme in ('w8a8', 'w8a16'):\n"
            "        m = QuantMLP(layers, layernorm=ln, scheme=scheme, backend='gpu')\n"
            "        x = np.ones((3, 12), np.float32)\n"
            "        m(x); m.bind(x)()\n"
            "assert any(v.startswith('quant_mlp3_') for v in (l['variant'] for l in rt.context().driver.launches))\n"
            "bad = [k for k in ('torch', 'triton') if k in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("layernorm", [False, True])
def test_gpu_w8a16_hidden_float16_overflow_raises_like_the_cpu(kr, mock, rng, layernorm):
    """W8A16's hidden activations are float16 on the GPU too: with check=True the GPU call (staged
    or general path) and a bound step raise the CPU reference's error naming the layer; with
    check=False they give its NaN rows."""
    w0 = np.zeros((4, 3))
    w0[:, 2] = 300.0
    layers = [(w0, None), (np.eye(4), None), (rng.standard_normal((2, 4)), None)]
    ln = (np.full(3, 200.0), np.zeros(3)) if layernorm else None   # a constant row normalizes to 0
    gpu = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="gpu")
    cpu = QuantMLP(layers, layernorm=ln, scheme="w8a16", backend="cpu")
    x = np.full((3, 3), 0.01)
    x[1] = [1.0, 2.0, 300.0] if not layernorm else [1.0, 2.0, 3.0]  # 300 * 300, 300 * 245 > 65504
    with pytest.raises(ValueError) as want:
        cpu(x)
    assert str(want.value).startswith("layers[0] output[1, 0] (after GELU; the input of layers[1]): exceeds float16")
    for arr in (x, x.astype(np.float32)):
        with pytest.raises(ValueError) as got:
            gpu(arr)
        assert str(got.value) == str(want.value)
        lax = gpu(arr, check=False)
        assert np.isnan(lax[1]).all() and np.array_equal(lax, cpu(arr, check=False), equal_nan=True)
    fine = np.full((2, 3), 0.01)
    before = len(mock.launches)
    assert np.array_equal(gpu(fine), cpu(fine))
    assert len(mock.launches) > before             # the GPU path, not a CPU fallback
    if layernorm:                                   # bound steps read float32 only with a LayerNorm
        xb = np.ascontiguousarray(x, np.float32)
        strict, lax = gpu.bind(xb), gpu.bind(xb, check=False)
        with pytest.raises(ValueError) as bound:
            strict()
        assert str(bound.value) == str(want.value)
        assert np.isnan(lax()[1]).all()
        xb[1] = 0.01
        assert np.array_equal(strict(), cpu(xb))


def test_gpu_paths_name_a_float64_value_beyond_float32(kr, mock, rng):
    mlp = QuantMLP([(rng.standard_normal((5, 4)), None), (rng.standard_normal((2, 5)), None)],
                   layernorm=(np.ones(4), np.zeros(4)), scheme="w8a8", backend="gpu")
    x = rng.standard_normal((3, 4))
    x[2, 1] = 1e39
    for call in (lambda: mlp(x), lambda: mlp.bind(x)(), lambda: mlp.bind(x[2].copy())()):
        with pytest.raises(ValueError, match=r"x\[\d, 1\]: beyond float32's range \(\+-3.403e\+38\), got 1e\+39"):
            call()
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match=r"x\[2, 1\]: must be finite"):
        mlp.bind(x)()


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16"])
def test_gpu_float32_overflow_raises_like_the_cpu(kr, mock, rng, scheme):
    """Inputs beyond the model's safe bound whose products overflow float32: the staged call, the
    general (float16-free, more rows than a graph) path and a bound step raise the reference's
    error; within the bound nothing is looked at and the GPU result is the reference's."""
    layers = [(np.full((4, 4), 1e20), None), (np.ones((2, 4)), None)]
    gpu = QuantMLP(layers, scheme=scheme, backend="gpu")
    cpu = QuantMLP(layers, scheme=scheme, backend="cpu")
    x = np.full((3, 4), 1.0)
    x[1] = 1e19
    with pytest.raises(ValueError) as want:
        cpu(x)
    assert str(want.value).startswith("layers[0] output[1, 0]: not finite in float32")
    before = len(mock.launches)
    for arr in (x, x.astype(np.float32), np.asfortranarray(x)):
        with pytest.raises(ValueError) as got:
            gpu(arr)
        assert str(got.value) == str(want.value)
        assert np.array_equal(gpu(arr, check=False), cpu(arr, check=False), equal_nan=True)
    assert len(mock.launches) > before                 # the GPU ran, not a CPU fallback
    xb = np.ascontiguousarray(x, np.float32)
    strict, lax = gpu.bind(xb), gpu.bind(xb, check=False)
    with pytest.raises(ValueError) as bound:
        strict()
    assert str(bound.value) == str(want.value)
    assert not np.isfinite(lax()[1]).any()
    xb[1] = 2.0
    assert np.array_equal(strict(), cpu(xb))
