"""QuantLinear / QuantMLP on the GPU against the CPU reference (which defines the results).

What is exact and what is not (tickgpu.quant.gemm): W8A8, W16A8 and W16A16 layers without GELU equal the
NumPy reference bit for bit in every output dtype (integer sums, IEEE float32 epilogue without FMA,
round-to-nearest-even narrowing). GELU's erf (libdevice) may differ from the host's by an ulp or
two, and W8A16's float32 sum order on the tensor cores is not the reference's, so those are
compared within bounds; in a multi-layer model such an ulp can move the next layer's activation
quantization by one step, so models are compared at the quantization's resolution.
"""
from importlib import resources

import numpy as np
import pytest

from tickgpu.quant import QuantLinear, QuantMLP

pytestmark = pytest.mark.gpu

# (M, N, K): one tile and many, K padded and not, K longer than one BLOCK_K, N not a multiple of the
# tile. At these widths the tile rule picks the per-tick tile "s"; test_every_tile_on_this_gpu
# finds shapes for the others.
SHAPES = [(1, 7, 5), (16, 64, 64), (17, 77, 301), (33, 130, 1000), (64, 1, 16), (65, 300, 96),
          (129, 257, 520), (1000, 64, 48)]


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16"])
@pytest.mark.parametrize("out", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_quant_linear_gpu_bit_exact_without_gelu(rng, scheme, out, m, n, k):
    w = rng.standard_normal((n, k)) * rng.uniform(0.1, 3, (n, 1)) + rng.uniform(-1, 1, (n, 1))
    lin = QuantLinear(w, rng.standard_normal(n), scheme=scheme, out_dtype=out, backend="gpu")
    x = (rng.standard_normal((m, k)) * rng.uniform(0.01, 10, (m, 1))).astype(np.float32)
    got, want = lin(x), lin.forward_cpu(x)
    assert got.dtype == want.dtype and got.shape == (m, n)
    bits = np.uint16 if out == "float16" else np.uint32
    assert np.array_equal(got.view(bits), want.view(bits))


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16"])
@pytest.mark.parametrize("m,n,k", [(1, 50, 40), (70, 130, 200)])
def test_quant_linear_gpu_gelu_within_ulps(rng, scheme, m, n, k):
    lin = QuantLinear(rng.standard_normal((n, k)), rng.standard_normal(n), scheme=scheme, gelu=True, backend="gpu")
    x = rng.standard_normal((m, k)).astype(np.float32)
    got, want = lin(x), lin.forward_cpu(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_w8a16_gpu_within_the_sum_order_bound(rng, m, n, k):
    lin = QuantLinear(rng.standard_normal((n, k)), rng.standard_normal(n), scheme="w8a16", backend="gpu")
    x = rng.standard_normal((m, k)).astype(np.float32)
    got, want = lin(x).astype(np.float64), lin.forward_cpu(x).astype(np.float64)
    wq = lin.weight_q
    x16 = np.abs(x.astype(np.float16).astype(np.float64))
    # float32 accumulation in any order: |error| <= k eps sum |x w|, times the channel scale
    bound = (k + 2) * np.finfo(np.float32).eps * (x16 @ np.abs(wq.q.astype(np.float64)).T) * wq.scale
    assert np.all(np.abs(got - want) <= bound + 1e-6 * np.abs(want).max())


def _shape_for_tile(scheme, tile, sm_count):
    """The smallest (m, n) of a few candidates for which the tile rule picks `tile` on this GPU."""
    from tickgpu.quant._gpu import gemm_tile

    cands = sorted(((m, n) for m in (40, 65, 130, 300, 512, 1024, 2048) for n in (1024, 4096, 8192)),
                   key=lambda mn: mn[0] * mn[1])
    return next(mn for mn in cands if gemm_tile(scheme, *mn, sm_count) == tile)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_every_tile_on_this_gpu(rng, scheme):
    """Each GEMM tile the bundle has, at a shape where the rule picks it on this GPU: the plan
    launches it, and the results are the reference's (bit for bit for the int8 activations)."""
    from tickgpu.quant import _gpu

    rt = _gpu.kernel_runtime()
    for tile in {t for s, t in _gpu._TILE_M_N if s == scheme}:
        m, n = _shape_for_tile(scheme, tile, rt.sm_count)
        k = 72
        lin = QuantLinear(rng.standard_normal((n, k)), rng.standard_normal(n), scheme=scheme, out_dtype="float16",
                          backend="gpu")
        x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
        got, want = lin(x), lin.forward_cpu(x)
        variant = _gpu.plan_for(lin).programs[m].launches[-1][0]
        assert variant.split("_f16_")[1].removesuffix("_a16") == tile, (scheme, m, n, variant)
        if scheme == "w8a16":
            wq = lin.weight_q
            x16 = np.abs(x.astype(np.float16).astype(np.float64))
            bound = (k + 2) * np.finfo(np.float32).eps * (x16 @ np.abs(wq.q.astype(np.float64)).T) * wq.scale
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            assert np.all(err <= bound + 2 * 2.0**-10 * np.abs(want.astype(np.float64)) + 1e-6), (tile, m, n)
        else:
            assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (tile, m, n)


_ULP = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@pytest.mark.parametrize("out", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("gelu", [False, True])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (3, 1000, 1000), (8, 33, 4100), (9, 17, 63), (13, 777, 1001),
                                   (16, 256, 256), (16, 5, 7), (17, 300, 4096), (25, 129, 77), (32, 64, 1000)])
def test_w8a16_small_batch_kernel(rng, m, n, k, gelu, out):
    """M <= 32: the CUDA C kernel (csrc/cuda/w8a16.cu), odd N and K, K past one block's share."""
    from tickgpu.quant import _gpu

    lin = QuantLinear(rng.standard_normal((n, k)), rng.standard_normal(n), scheme="w8a16", gelu=gelu,
                      out_dtype=out, backend="gpu")
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)
    got, want = lin(x).astype(np.float64), lin.forward_cpu(x).astype(np.float64)
    variant = _gpu.plan_for(lin).programs[m].launches[-1][0]
    tile = "m8" if m <= 8 else "m16" if m <= 16 else "m32"
    assert variant == f"quant_w8a16{'_gelu' if gelu else ''}_{_gpu._OUT_TAG[out]}_{tile}"
    wq = lin.weight_q
    x16 = np.abs(x.astype(np.float16).astype(np.float64))
    bound = (k + 2) * np.finfo(np.float32).eps * (x16 @ np.abs(wq.q.astype(np.float64)).T) * wq.scale
    # GELU's slope is at most 1.13; each side rounds once to the output type.
    tol = 1.2 * bound + 2 * _ULP[out] * np.abs(want) + 1e-6 * np.abs(want).max()
    assert np.all(np.abs(got - want) <= tol), float(np.max(np.abs(got - want) - tol))


@pytest.mark.parametrize("m", [1, 5, 16])
def test_w8a16_small_batch_unaligned_activation_rows(rng, m):
    """Hidden widths whose rows are not 16-byte multiples: the kernel's element loads."""
    dims = [13, 33, 7, 3]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    mlp = QuantMLP(layers, scheme="w8a16", backend="gpu")
    x = rng.standard_normal((m, dims[0])).astype(np.float32)
    got, want = mlp(x).astype(np.float64), mlp.forward_cpu(x).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_poisoned_rows_stay_nan_on_the_gpu(rng):
    lin = QuantLinear(rng.standard_normal((20, 30)), scheme="w8a8", backend="gpu")
    x = rng.standard_normal((5, 30)).astype(np.float32)
    x[2, 7] = np.nan
    y = lin(x, check=False)
    assert np.isnan(y[2]).all() and np.isfinite(np.delete(y, 2, axis=0)).all()
    assert np.array_equal(np.delete(y, 2, axis=0), np.delete(lin.forward_cpu(x), 2, axis=0))


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
@pytest.mark.parametrize("m", [1, 15, 16, 17, 33, 129, 1000])
@pytest.mark.parametrize("dims", [[13, 64, 48, 3], [64, 256, 256, 4]], ids=["odd", "aligned"])
def test_quant_mlp_gpu_matches_cpu(rng, scheme, m, dims):
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    for layernorm in (None, (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)):
        for out in ("float32", "float16", "bfloat16"):
            mlp = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out, backend="gpu")
            for _ in range(2):   # the step's buffers are reused: a second input must not see the first
                x = (rng.standard_normal((m, dims[0])) * 2).astype(np.float32)
                got = mlp(x).astype(np.float64)
                want = mlp.forward_cpu(x).astype(np.float64)
                assert got.shape == (m, dims[-1])
                # An erf ulp upstream may move a hidden activation's code by one step (an int16
                # step is 257 times finer).
                tol = (8e-3 if out == "bfloat16" else 1e-3) if scheme == "w16a16" else 0.02   # bfloat16: 2 ulps
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_shipped_signal_model_on_the_gpu():
    with resources.files("tickgpu").joinpath("data/quant_signal_mlp.npz").open("rb") as f:
        sd = dict(np.load(f))
    x = sd.pop("test_x").astype(np.float32)
    ref = sd.pop("test_fp32").astype(np.float64)
    for scheme in ("w8a8", "w16a8", "w16a16", "w8a16"):
        mlp = QuantMLP.from_state_dict(sd, scheme=scheme, backend="gpu")
        got = mlp(x).astype(np.float64)
        np.testing.assert_allclose(got, mlp.forward_cpu(x), rtol=0.02, atol=0.02 * np.abs(ref).max())
        # and the quantized model still tracks the float one
        assert np.abs(got - ref).max() <= 0.1 * np.abs(ref).max(), scheme


def test_warmup_launches_the_quant_kernels():
    import tickgpu.runtime
    from tickgpu.runtime import context

    info = tickgpu.runtime.warmup()
    ctx = context()
    quant = [k for k in ctx.bundle.kernels.values() if k.spec.family == "quant"]
    assert quant and all(k.variant in ctx.launchers for k in quant)
    assert info["kernels"] == len(ctx.bundle.kernels)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
@pytest.mark.parametrize("dims", [[12, 32, 32, 1], [20, 50, 40, 3], [64, 64, 64, 4]], ids=["h32", "h64-odd", "h64"])
def test_fused_step_on_the_gpu(rng, scheme, dims):
    """A 3-layer step of up to 64 rows is one fused kernel. Without LayerNorm the int8 schemes give
    the layer-by-layer kernels' results bit for bit (same operations, same libdevice erf); every
    scheme is within the quantization's resolution of the CPU reference, and a NaN row stays
    NaN without touching the others."""
    from tickgpu.quant import _gpu

    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
    for layernorm in ((ln,) if scheme == "w8a16" else (None, ln)):
        for out in ("float32", "bfloat16"):
            fused = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out, backend="gpu")
            split = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out, backend="gpu")
            _gpu.plan_for(split).fused_variant = lambda m: None
            for m in (1, 16, 17, 64):
                x = (rng.standard_normal((m, dims[0])) * 2).astype(np.float32)
                if m > 1:
                    x[m - 2, 0] = np.nan
                got, ref = fused(x, check=False), split(x, check=False)
                variant = _gpu.plan_for(fused).programs[m].launches
                assert len(variant) == 1 and variant[0][0].startswith("quant_mlp3_"), variant
                assert len(_gpu.plan_for(split).programs[m].launches) >= 4
                want = fused.forward_cpu(x)
                assert got.dtype == want.dtype and got.shape == (m, dims[-1])
                keep = np.arange(m) != (m - 2 if m > 1 else -1)
                if m > 1:
                    assert np.isnan(got[m - 2]).all()
                assert np.isfinite(got[keep]).all()
                if layernorm is None and scheme != "w8a16":
                    assert np.array_equal(got[keep], ref[keep]), (scheme, out, m)
                g, w = got[keep].astype(np.float64), want[keep].astype(np.float64)
                tol = (8e-3 if out == "bfloat16" else 1e-3) if scheme == "w16a16" else 0.02   # bfloat16: 2 ulps
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max())
                np.testing.assert_allclose(g, ref[keep].astype(np.float64), rtol=tol, atol=tol * np.abs(w).max())


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_programmatic_step_gives_the_plain_steps_bits(rng, scheme):
    """On sm_90 a layer-by-layer step's graph chains its kernels by programmatic dependent launch
    (each waits for its predecessor itself). Its results equal those of the same graph with plain
    edges, to the bit, over repeated steps and batch sizes."""
    from tickgpu.quant import _gpu
    from tickgpu.runtime import context, kernel_runtime

    rt = kernel_runtime()
    dims = [64, 256, 256, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
    chained = QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype="float16", backend="gpu")
    plain = QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype="float16", backend="gpu")
    try:
        for m in (1, 7, 16, 33, 64):
            for _ in range(3):
                x = (rng.standard_normal((m, 64)) * 2).astype(np.float32)
                rt.programmatic = True
                a = chained(x)
                rt.programmatic = False
                b = plain(x)
                assert np.array_equal(a, b), (scheme, m)
            prog = _gpu.plan_for(chained).programs[m]
            assert len(prog.prepared) >= 4
            assert all(p.pdl for p in prog.prepared) == (context().arch == "sm_90")
    finally:
        rt.programmatic = True


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
def test_bound_step_on_the_gpu(rng, scheme):
    """model.bind(x) on the GPU: after in-place updates of x, each call equals model(x) to the bit
    (fused and layer-by-layer models, float32 and float64 arrays, a single token)."""
    for dims in ([12, 32, 32, 1], [64, 256, 256, 4]):
        layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
                  for i, o in zip(dims[:-1], dims[1:])]
        ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
        mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype="float16", backend="gpu")
        for shape, dtype in (((1, dims[0]), np.float32), ((dims[0],), np.float64), ((64, dims[0]), np.float32)):
            x = (rng.standard_normal(shape) * 2).astype(dtype)
            step = mlp.bind(x)
            for _ in range(3):
                x[...] = rng.standard_normal(shape) * 2
                got = step()
                assert got.dtype == np.float16 and np.array_equal(got, mlp(x))
                want = mlp.forward_cpu(np.atleast_2d(x).astype(np.float32)).reshape(got.shape).astype(np.float64)
                np.testing.assert_allclose(got.astype(np.float64), want, rtol=0.02, atol=0.02 * np.abs(want).max())


def test_w16a16_extreme_codes_at_large_k(rng):
    """W16A16 at K = 65,536 with every limb at its extreme (activation codes +-32639, weight codes
    -32768 and 32766): the int32 accumulators hold the exact sums (the middle one reaches -2.13e9)
    and the GPU equals the CPU reference bit for bit."""
    k = 65536
    w = np.full((4, k), -1.0)
    w[1] = 1.0
    w[2, ::2], w[2, 1::2] = -1.0, 1.0
    w[3] = rng.uniform(-1, 1, k)
    lin = QuantLinear(w, scheme="w16a16", backend="gpu")
    assert lin.weight_q.q[0].min() == -32768 and lin.weight_q.q[1].max() == 32766   # 65534 steps
    x = np.ones((3, k), np.float32)
    x[1] = -1.0
    x[2] = rng.uniform(-1, 1, k)
    got, want = lin(x), lin.forward_cpu(x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4 * k)


def test_surrogate_in_w16a16_on_the_gpu_is_within_1e4_of_float32():
    """The shipped Black-Scholes surrogate in W16A16 on the GPU: every output within 1e-4 of its
    largest magnitude of the float32 model, over 20,000 points; and the CPU reference's result
    to within what erf ulps upstream can move (a few int16 activation codes a layer: measured
    1.2e-5 / 2.1e-5 of the outputs' magnitudes)."""
    from tickgpu.app import surrogate

    sd = surrogate.shipped_state_dict()
    n = 20_000
    x = surrogate.scale_inputs(surrogate.sample_inputs(np.random.default_rng(surrogate.TEST_SEED), n))
    want = QuantMLP.from_state_dict(sd, scheme="fp32")(x).astype(np.float64)
    span = np.abs(want).max(axis=0)
    mlp = QuantMLP.from_state_dict(sd, scheme="w16a16", backend="gpu")
    for rows in (1, 64, n):      # one graph step, and the general path
        got = mlp(x[:rows]).astype(np.float64)
        assert np.all(np.abs(got - want[:rows]).max(axis=0) <= 1e-4 * span), rows
        cpu = mlp.forward_cpu(x[:rows]).astype(np.float64)
        assert np.all(np.abs(got - cpu).max(axis=0) <= 5e-5 * span), rows


def test_random_step_sequences_repeat_their_bits(rng):
    """Models of every scheme, fused and layer by layer, called in random order with batches of
    1-129 rows (plans and graphs per batch size, staging shared), bound steps of their own arrays
    in between: each result is within the quantization's resolution of the CPU reference, and an
    input seen before gives the same bits again, whatever ran in between."""
    models = []
    for scheme in ("w8a8", "w16a8", "w16a16", "w8a16"):
        for dims in ([12, 32, 32, 1], [20, 96, 70, 3]):
            layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
                      for i, o in zip(dims[:-1], dims[1:])]
            ln = (rng.uniform(0.5, 1.5, dims[0]), rng.standard_normal(dims[0]) * 0.1)
            out = ("float32", "float16", "bfloat16")[len(models) % 3]
            models.append((QuantMLP(layers, layernorm=ln, scheme=scheme, out_dtype=out, backend="gpu"), dims))
    seen, bound = [], []
    for step in range(300):
        mlp, dims = models[rng.integers(len(models))]
        r = rng.random()
        if seen and r < 0.2:
            mlp, x, first = seen[rng.integers(len(seen))]
            assert np.array_equal(mlp(x), first), f"step {step}: {mlp!r} gave other bits for an input seen before"
            continue
        if bound and r < 0.35:
            mlp, x, tick = bound[rng.integers(len(bound))]
            x[...] = rng.standard_normal(x.shape) * 2
            got = tick()
            assert np.array_equal(got, mlp(x)), f"step {step}: a bound step's bits differ from the call's"
            continue
        m = int((1, 2, 15, 16, 17, 33, 64, 65, 129)[rng.integers(9)])
        x = (rng.standard_normal((m, dims[0])) * 2).astype(np.float32)
        got = mlp(x)
        want = mlp.forward_cpu(x).astype(np.float64)
        assert got.shape == (m, dims[-1]), step
        tol = (8e-3 if mlp.out_dtype == "bfloat16" else 1e-3) if mlp.scheme == "w16a16" else 0.02
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max(),
                                   err_msg=f"step {step}: {mlp!r} m={m}")
        if len(seen) < 40:
            seen.append((mlp, x, got.copy()))
        if len(bound) < 8 and rng.random() < 0.1:
            xb = (rng.standard_normal((int(rng.integers(1, 65)), dims[0])) * 2).astype(np.float32)
            bound.append((mlp, xb, mlp.bind(xb)))
    assert seen and bound
