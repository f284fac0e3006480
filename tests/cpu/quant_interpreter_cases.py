"""Cases run by test_quant_kernels.py in a separate process: the Triton kernels of tickgpu.quant under
the Triton interpreter (TRITON_INTERPRET=1) against the NumPy reference, and the GPU plan's launches
end to end through an interpreted kernel runtime.

Needs triton and torch (test-time only: the interpreter takes torch CPU tensors); skipped without.
"""
import inspect
import os

import numpy as np
import pytest

# triton.jit and triton.language's own helpers pick compile-or-interpret when triton is imported, so
# this file runs in a process of its own (test_quant_kernels.py starts it) with the variable set first.
# TICKGPU_QUANT_CASES_DEVICE=cuda runs the same cases JIT-compiled on a GPU instead (needs torch+CUDA).
DEVICE = os.environ.get("TICKGPU_QUANT_CASES_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("triton")


def _interpreter_scalars_index_on_numpy_2_4():
    """Let the interpreter use a runtime int as a loop bound (``range(0, K, BLOCK_K)``) on NumPy >= 2.4.

    Triton 3.6's interpreter holds every scalar argument as a one-element 1-d array and gives
    ``tl.tensor`` an ``__index__`` of ``int(data)``; NumPy 2.4 turned that conversion of a 1-d array
    into a TypeError ("only 0-dimensional arrays can be converted to Python scalars"). Compiled kernels
    are unaffected (no NumPy involved), so the fix belongs here: wrap the interpreter's tensor patching
    and replace ``__index__`` with ``data.item()`` for one-element arrays (the same value).
    """
    try:
        int(np.array([1]))
        return  # older NumPy: nothing to do
    except TypeError:
        pass
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_tickgpu_index_fix", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0])
                       if np.size(self.handle.data) == 1 else int(self.handle.data))

    patch_lang_tensor._tickgpu_index_fix = True
    interpreter._patch_lang_tensor = patch_lang_tensor


if DEVICE == "cpu":
    _interpreter_scalars_index_on_numpy_2_4()

from tickgpu.kernels import quant as kq  # noqa: E402
from tickgpu.quant import QuantLinear, QuantMLP, gemm  # noqa: E402
from tickgpu.quant import _gpu  # noqa: E402
from tickgpu.quant.schemes import quantize_activations, quantize_weight, round_to_bfloat16  # noqa: E402

ODD_M = [1, 15, 16, 17, 33, 129]
_TORCH = {"int8": torch.int8, "int32": torch.int32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "float32": torch.float32}
_PTR = {"*i8": torch.int8, "*i32": torch.int32, "*fp16": torch.float16, "*bf16": torch.bfloat16,
        "*fp32": torch.float32}
VARIANTS = {v["variant"]: v for v in kq.QUANT_VARIANTS}


def test_plan_grid_tiles_are_the_compiled_tiles():
    """The GPU plan computes its grids from _gpu._TILE_M_N; the kernels are compiled from GEMM_TILES."""
    for scheme, tiles in kq.GEMM_TILES.items():
        for tile, bm, bn, *_ in tiles:
            assert _gpu._TILE_M_N[(scheme, tile)] == (bm, bn), (scheme, tile)
    assert set(_gpu._TILE_M_N) == {(s, t[0]) for s, ts in kq.GEMM_TILES.items() for t in ts}
    # The CUDA C small-batch W8A16 kernel: 8 * MT rows and 16 channels a block.
    assert {rows: (tile, rows, 16) for tile, rows, mt, *_ in kq.W8A16_SMALL} == _gpu.W8A16_SMALL_TILES
    assert all(rows == 8 * mt for _, rows, mt, *_ in kq.W8A16_SMALL)
    # The fused step: the plan names and sizes the variants the bundle compiles.
    assert _gpu.MLP3_BLOCK_M == kq.MLP3_BLOCK_M and _gpu.MLP3_WIDTHS == kq.MLP3_WIDTHS
    assert _gpu.MLP3_SCHEMES == {name: tuple(bool(ln) for ln in lns) for name, _, lns in kq.MLP3_SCHEMES}
    for scheme, lns in _gpu.MLP3_SCHEMES.items():
        for ln in lns:
            for width in _gpu.MLP3_WIDTHS:
                name = _gpu.mlp3_variant_name(scheme, ln, width)
                assert name == kq.mlp3_variant_name(scheme, ln, width) and name in VARIANTS


class InterpretedRuntime:
    """The kernel-runtime interface of tickgpu.quant._gpu, running bundle variants in the interpreter.

    It checks every launch against the variant's signature (argument count, pointer dtypes, ints),
    its alignment promise (aligned pointers, multiple_of_16 values) and its grid rule, as the GPU
    runtime does.
    """

    sm_count = 132   # an H200's: model plans choose the tiles they would there (gemm_tile)

    def __init__(self):
        self.launches = []

    def upload(self, array):
        a = np.ascontiguousarray(array)
        return torch.from_numpy(a.copy()).to(DEVICE)

    def empty(self, shape, dtype):
        fill = 77 if dtype in ("int8", "int32") else float("nan")
        return torch.full(shape, fill, dtype=_TORCH[dtype], device=DEVICE)

    def write(self, buf, array):
        a = np.ascontiguousarray(array)
        assert tuple(buf.shape) == a.shape and buf.element_size() == a.dtype.itemsize, (buf.shape, a.shape)
        buf.copy_(torch.from_numpy(a.copy()).to(DEVICE))

    def download(self, buf):
        buf = buf.cpu()
        if buf.dtype == torch.bfloat16:
            return buf.view(torch.int16).numpy().view(np.uint16).copy()
        return buf.numpy().copy()

    def launch(self, variant, grid, args):
        v = VARIANTS[variant]
        params = [k for k, t in v["signature"].items() if t != "constexpr"]
        assert len(args) == len(params), (variant, len(args), params)
        for name, arg in zip(params, args):
            kind = v["signature"][name]
            if kind.startswith("*"):
                assert isinstance(arg, torch.Tensor) and arg.dtype == _PTR[kind], (variant, name, kind, arg.dtype)
            elif kind == "i32":
                assert isinstance(arg, int) and -2**31 <= arg < 2**31, (variant, name, arg)
            else:
                assert isinstance(arg, float), (variant, name, arg)
            if v["aligned16"]:
                if kind.startswith("*"):
                    assert arg.data_ptr() % 16 == 0, (variant, name)
                elif name in v["multiple_of_16"]:
                    assert arg % 16 == 0, (variant, name, arg)
        vals = dict(zip(params, args))
        if v["grid"] == "rows":
            want = (vals["M"], 1, 1)
        else:
            want = (-(-vals["M"] // v["block_m"]) * -(-vals["N"] // v["block_n"]), 1, 1)
        assert tuple(grid) == want, (variant, grid, want)
        self.launches.append(variant)
        if DEVICE == "cpu":
            # The interpreter runs no PTX: the W8A16 widening takes its plain form (same values).
            v["kernel"][grid](*args, **{**v["constexprs"], **({"FAST_CVT": 0} if "FAST_CVT" in v["constexprs"] else {})})
        else:
            # JIT-compiled as the bundle compiles it: same warps, stages and options (no FMA
            # contraction in the epilogue, which the bit-exact checks rely on).
            v["kernel"][grid](*args, **v["constexprs"], num_warps=v["num_warps"], num_stages=v["num_stages"],
                              **v["options"])


@pytest.fixture
def rt():
    return InterpretedRuntime()


def _act(rt, x, has_ln=False, gamma=None, beta=None, eps=1e-5, bk=None, a16=False):
    """The activation kernel's variant for rows of k (the plan's rule, or BLOCK_K `bk`); `a16`: the
    int16 variant, whose limbs come back joined (``256 hi + lo``, int16)."""
    m, k = x.shape
    k_pad = -(-k // 16) * 16
    row = 2 * k_pad if a16 else k_pad
    xb = rt.upload(x.astype(np.float32))
    g = rt.upload(np.ones(k, np.float32) if gamma is None else gamma.astype(np.float32))
    b = rt.upload(np.zeros(k, np.float32) if beta is None else beta.astype(np.float32))
    xq, s, rs = rt.empty((m, row), "int8"), rt.empty((m,), "float32"), rt.empty((m,), "int32")
    bk = _gpu._row_block(k) if bk is None else bk
    rt.launch(f"quant_act{'16' if a16 else ''}{'_ln' if has_ln else ''}_k{bk}", (m, 1, 1),
              [xb, g, b, xq, s, rs, m, k, k, row, eps])
    q = rt.download(xq)
    if a16:
        hi, lo = q[:, :k].astype(np.int32), q[:, k_pad:k_pad + k].astype(np.int32)
        assert (np.abs(hi) <= 127).all()
        q = (256 * hi + lo).astype(np.int16)
    else:
        q = q[:, :k]
    return q, rt.download(s), rt.download(rs)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("m", ODD_M)
def test_act_quant_kernel_is_bit_exact(rt, rng, m, bits):
    k = int(rng.choice([7, 50, 64, 65, 200, 700]))
    x = (rng.standard_normal((m, k)) * 10 ** rng.uniform(-9, 3, (m, 1))).astype(np.float32)
    if m > 3:
        x[1] = 0.0
        x[2, k // 2] = np.nan
        x[3, 0] = np.inf
    if m > 5:
        x[4, :] = -x[4, :] ** 2  # a row at -absmax: the code -32639 (hi -127, lo -127)
    ref = quantize_activations(x, bits=bits)
    # the plan's variant (rows up to 1,024 read once) and the chunked one, which serves any K
    for bk in (None, 512):
        q, s, rs = _act(rt, x, bk=bk, a16=bits == 16)
        assert np.array_equal(q, ref.q)
        assert np.array_equal(s.view(np.uint32), ref.scale.view(np.uint32))  # NaN rows included
        assert np.array_equal(rs, ref.rowsum)


def test_row_kernel_variants_follow_the_row_length():
    assert [_gpu._row_block(k) for k in (1, 64, 65, 1024, 1025, 5000)] == [64, 64, 1024, 1024, 512, 512]
    for name in ("quant_act_k64", "quant_act_ln_k1024", "quant_layernorm_f16_k64", "quant_layernorm_f32_k1024"):
        assert VARIANTS[name]["constexprs"]["SINGLE"] == 1, name
    assert VARIANTS["quant_act_ln_k512"]["constexprs"]["SINGLE"] == 0


def test_act_quant_kernel_with_layernorm(rt, rng):
    m, k = 33, 70
    x = (rng.standard_normal((m, k)) * 5 + 3).astype(np.float32)
    g, b = rng.uniform(0.5, 2, k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    mlp = QuantMLP([(np.ones((1, k)), None)], layernorm=(g, b, 1e-5))
    ref = quantize_activations(mlp.normalize_cpu(x))
    for bk in (None, 512):
        q, s, rs = _act(rt, x, True, g, b, bk=bk)
        assert np.abs(q.astype(int) - ref.q).max() <= 1  # rounding-boundary ties only
        assert (q != ref.q).mean() < 0.01
        np.testing.assert_allclose(s, ref.scale, rtol=1e-5)
        assert np.array_equal(rs, q.astype(np.int64).sum(axis=1))
    # rows up to 64 (the 64-wide variant, read once) against the same reference
    x60, g60, b60 = x[:, :60].copy(), g[:60].copy(), b[:60].copy()
    ref = quantize_activations(QuantMLP([(np.ones((1, 60)), None)], layernorm=(g60, b60, 1e-5)).normalize_cpu(x60))
    q, s, rs = _act(rt, x60, True, g60, b60)
    assert np.abs(q.astype(int) - ref.q).max() <= 1 and (q != ref.q).mean() < 0.01
    np.testing.assert_allclose(s, ref.scale, rtol=1e-5)
    assert np.array_equal(rs, q.astype(np.int64).sum(axis=1))


def _gemm(rt, act, w_q, out, gelu, tile):
    """The GEMM kernel of the scheme `act` and `w_q` make (int16 activations: W16A16)."""
    m, k = act.q.shape
    n = w_q.shape[0]
    k_pad = -(-k // 16) * 16
    a16 = act.q.dtype == np.int16
    # The kernels run over the padded K; the activations' padding may hold anything (the weights'
    # is zero), as it does on the GPU where nothing writes it.
    garbage = np.arange(k_pad - k, dtype=np.int8) * 37 - 100
    if a16:   # a row: the hi limbs, then the lo limbs, each padded to k_pad
        a_host = np.concatenate([_gpu._pad_rows(limb, k_pad) for limb in act.limbs], axis=1)
        a_host[:, k:k_pad] = garbage
        a_host[:, k_pad + k:] = garbage
    else:
        a_host = _gpu._pad_rows(act.q, k_pad)
        a_host[:, k:] = garbage
    a = rt.upload(a_host)
    s, rs = rt.upload(act.scale), rt.upload(act.rowsum)
    bias = np.linspace(-1, 1, n).astype(np.float32)
    if w_q.format == "int16":
        hi, lo = w_q.limbs
        b, b2 = rt.upload(_gpu._pad_rows(hi, k_pad)), rt.upload(_gpu._pad_rows(lo, k_pad))
        off = rt.upload(w_q.limb_offset)
        name = "w16a16" if a16 else "w16a8"
    else:
        b = b2 = rt.upload(_gpu._pad_rows(w_q.q, k_pad))
        off = rt.upload(w_q.scale)
        name = "w8a8"
    c = rt.empty((m, n), out)
    bm, bn = _gpu._TILE_M_N[(name, tile)]
    rt.launch(f"quant_gemm_{name}{'_gelu' if gelu else ''}_{_gpu._OUT_TAG[out]}_{tile}",
              (-(-m // bm) * -(-n // bn), 1, 1),
              [a, s, rs, b, b2, rt.upload(w_q.scale), off, rt.upload(bias), c, m, n, k_pad, a_host.shape[1], k_pad, n])
    y = rt.download(c)
    if out == "bfloat16":
        y = (y.astype(np.uint32) << 16).view(np.float32)
    return y, bias


# (weight format, activation bits) of the int8-GEMM schemes W8A8, W16A8 and W16A16
_INT_SCHEMES = {"w8a8": ("int8", 8), "w16a8": ("int16", 8), "w16a16": ("int16", 16)}


def _int_reference(scheme, act, wq, bias, **kw):
    """The NumPy reference of an int8-GEMM scheme's layer."""
    if scheme == "w8a8":
        return gemm.linear_w8a8(act.q, act.scale, wq.q, wq.scale, bias, **kw)
    hi, lo = wq.limbs
    if scheme == "w16a8":
        return gemm.linear_w16a8(act.q, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset, bias, **kw)
    xh, xl = act.limbs
    return gemm.linear_w16a16(xh, xl, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset, bias, **kw)


@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("scheme", list(_INT_SCHEMES))
def test_quant_gemm_kernel_is_bit_exact(rt, rng, m, scheme):
    fmt, bits = _INT_SCHEMES[scheme]
    n, k = int(rng.integers(1, 150)), int(rng.integers(1, 200))
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, 0] = np.nan  # a poisoned row travels through as NaN
    act = quantize_activations(x, bits=bits)
    wq = quantize_weight(rng.standard_normal((n, k)) + rng.uniform(-2, 2, (n, 1)), fmt)
    out = str(rng.choice(["float32", "float16", "bfloat16"]))
    y, bias = _gemm(rt, act, wq, out, False, _gpu.gemm_tile(scheme, m, n, 1))
    ref = _int_reference(scheme, act, wq, bias, out_dtype=out)
    ref_f32 = _int_reference(scheme, act, wq, bias)
    ref = np.asarray(ref, np.float32)
    assert np.isnan(y[0]).all()
    got = y.astype(np.float32).view(np.uint32)
    if out == "bfloat16":
        # The interpreter narrows float32 to bfloat16 by truncation where the GPU rounds to nearest
        # even (cvt.rn): there, accept either rounding of the bit-exact float32 result, nothing else.
        ref32 = np.asarray(ref_f32, np.float32).view(np.uint32)
        ok = (got == ref.view(np.uint32)) | np.isnan(ref)
        if DEVICE == "cpu":
            ok |= got == (ref32 & 0xFFFF0000)
        assert ok.all()
    else:
        # A NaN row is NaN whatever its payload (a float16 NaN widened keeps its own bits).
        both_nan = np.isnan(ref) & np.isnan(y.astype(np.float32))
        assert ((got == ref.view(np.uint32)) | both_nan).all()


@pytest.mark.parametrize("scheme", list(_INT_SCHEMES))
def test_quant_gemm_kernel_gelu(rt, rng, scheme):
    fmt, bits = _INT_SCHEMES[scheme]
    m, n, k = 17, 70, 90
    act = quantize_activations(rng.standard_normal((m, k)).astype(np.float32), bits=bits)
    wq = quantize_weight(rng.standard_normal((n, k)), fmt)
    y, bias = _gemm(rt, act, wq, "float32", True, "s")
    ref = _int_reference(scheme, act, wq, bias, apply_gelu=True)
    # For y << 0, 1 + erf(y / sqrt 2) cancels: one float32 ulp of erf near -1 (6e-8) becomes
    # 0.5 |y| * 6e-8 absolute, ~1.3e-7 at |y| ~ 4.5 where GELU is still above float32's floor
    # (seen on the GPU: CUDA's erff and the reference differ by that ulp). Allow two such ulps.
    np.testing.assert_allclose(y, ref, rtol=4e-7, atol=3e-7)


_INT8_TILES = [(scheme, t[0]) for scheme in _INT_SCHEMES for t in kq.GEMM_TILES[scheme]]


@pytest.mark.parametrize("scheme,tile", _INT8_TILES)
def test_every_gemm_tile_is_bit_exact(rt, rng, scheme, tile):
    """Each compiled tile over a partial second tile of rows and of columns, against the reference."""
    fmt, bits = _INT_SCHEMES[scheme]
    bm, bn = _gpu._TILE_M_N[(scheme, tile)]
    m, n, k = 2 * bm - 3, 2 * bn - 5, int(rng.integers(100, 300))
    act = quantize_activations(rng.standard_normal((m, k)).astype(np.float32), bits=bits)
    wq = quantize_weight(rng.standard_normal((n, k)) + rng.uniform(-2, 2, (n, 1)), fmt)
    y, bias = _gemm(rt, act, wq, "float32", False, tile)
    ref = _int_reference(scheme, act, wq, bias)
    assert np.array_equal(y.view(np.uint32), np.asarray(ref, np.float32).view(np.uint32))


@pytest.mark.parametrize("m,tile", [(1, "s"), (17, "s")] + [(None, t[0]) for t in kq.GEMM_TILES["w8a16"]])
def test_w8a16_kernel(rt, rng, m, tile):
    bm, bn = _gpu._TILE_M_N[("w8a16", tile)]
    if m is None:   # each tile over a partial second tile of rows and of columns
        m, n = 2 * bm - 3, 2 * bn - 5
    else:
        n = int(rng.integers(1, 150))
    k = int(rng.integers(1, 200))
    x = rng.standard_normal((m, k)).astype(np.float32)
    wq = quantize_weight(rng.standard_normal((n, k)), "int8")
    k_pad = -(-k // 16) * 16
    bias = rng.standard_normal(n).astype(np.float32)
    c = rt.empty((m, n), "float32")
    rt.launch(f"quant_w8a16_f32_{tile}", (-(-m // bm) * -(-n // bn), 1, 1),
              [rt.upload(x.astype(np.float16)), rt.upload(_gpu._pad_rows(wq.q, k_pad)), rt.upload(wq.scale),
               rt.upload(bias), c, m, n, k, k, k_pad, n])
    ref = gemm.linear_w8a16(x, wq.q, wq.scale, bias)
    x16 = x.astype(np.float16).astype(np.float64)
    bound = 4 * k * np.finfo(np.float32).eps * (np.abs(x16) @ np.abs(wq.q.astype(np.float64)).T) * wq.scale
    assert np.all(np.abs(rt.download(c) - ref) <= bound + 1e-6)


@pytest.mark.parametrize("m,tile", [(3, "s"), (70, "s"), (70, "m"), (70, "w"), (70, "l")])
def test_w8a16_aligned_variant(rt, rng, m, tile):
    n, k = int(rng.integers(1, 300)), 16 * int(rng.integers(1, 8))
    x = rng.standard_normal((m, k)).astype(np.float32)
    wq = quantize_weight(rng.standard_normal((n, k)), "int8")
    bias = rng.standard_normal(n).astype(np.float32)
    c = rt.empty((m, n), "float16")
    bm, bn = _gpu._TILE_M_N[("w8a16", tile)]
    rt.launch(f"quant_w8a16_f16_{tile}_a16", (-(-m // bm) * -(-n // bn), 1, 1),
              [rt.upload(x.astype(np.float16)), rt.upload(wq.q), rt.upload(wq.scale), rt.upload(bias), c,
               m, n, k, k, k, n])
    ref = gemm.linear_w8a16(x, wq.q, wq.scale, bias)
    np.testing.assert_allclose(rt.download(c).astype(np.float64), ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


def test_layernorm_kernel(rt, rng):
    m, k = 15, 600
    x = (rng.standard_normal((m, k)) * 3 + 1).astype(np.float32)
    g, b = rng.uniform(0.5, 2, k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    ref = QuantMLP([(np.ones((1, k)), None)], layernorm=(g, b, 1e-5)).normalize_cpu(x)
    for bk in (512, 1024):          # chunks of 512; the whole row read once
        y = rt.empty((m, k), "float16")
        rt.launch(f"quant_layernorm_f16_k{bk}", (m, 1, 1), [rt.upload(x), rt.upload(g), rt.upload(b), y, m, k, k, k, 1e-5])
        np.testing.assert_allclose(rt.download(y).astype(np.float64), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
@pytest.mark.parametrize("m", [1, 17, 65])
@pytest.mark.parametrize("dims", [[13, 40, 24, 3], [32, 48, 16, 5]], ids=["odd", "aligned"])
def test_gpu_plan_runs_the_mlp_like_the_cpu(rt, rng, scheme, m, dims):
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    k0 = dims[0]
    ln = (rng.uniform(0.5, 1.5, k0), rng.standard_normal(k0) * 0.1)
    for layernorm in (None, ln):
        for out in ("float32", "bfloat16"):
            mlp = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out)
            x = (rng.standard_normal((m, k0)) * 2).astype(np.float32)
            got = _gpu.plan_for(mlp, rt).run(x)
            want = mlp.forward_cpu(x)
            assert got.shape == want.shape == (m, dims[-1])
            if layernorm is None and scheme != "w8a16" and out == "float32" and DEVICE == "cpu":
                # GELU's erf is the only inexact step here
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
            elif layernorm is None and scheme == "w16a16" and out == "float32":
                # On a GPU, libdevice's erf may differ from the host's by an ulp, which can move a
                # hidden activation's int16 code by one step (3e-5 of its row's largest): the
                # resolution of that step, as tests/gpu/test_quant_gpu.py allows
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
            else:
                np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02 * np.abs(want).max())
    assert rt.launches  # something really ran
    if scheme == "w8a16" and dims[0] % 16 == 0:
        assert any(v.endswith("_a16") for v in rt.launches)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "w8a16"])
@pytest.mark.parametrize("dims", [[12, 32, 32, 1], [20, 50, 40, 3], [64, 64, 64, 4]], ids=["h32", "h64-odd", "h64"])
def test_fused_step_is_the_layer_by_layer_step(rt, rng, scheme, dims):
    """The fused 3-layer step against the CPU reference: the only launch of a step of up to 64
    rows; bit for bit where the layer kernels are (int8 schemes without LayerNorm, float32 out);
    a row holding NaN comes out NaN and leaves the other rows alone."""
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    k0 = dims[0]
    ln = (rng.uniform(0.5, 1.5, k0), rng.standard_normal(k0) * 0.1)
    width = next(w for w in _gpu.MLP3_WIDTHS if max(dims) <= w)
    for layernorm in ((ln,) if scheme == "w8a16" else (None, ln)):
        for out in ("float32", "float16", "bfloat16"):
            mlp = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out)
            for m in (1, 17, 64):
                x = (rng.standard_normal((m, k0)) * 2).astype(np.float32)
                bad = m // 2 if m > 1 else None     # a row holding NaN, beside finite rows
                if bad is not None:
                    x[bad, k0 // 3] = np.nan
                rt.launches.clear()
                got = _gpu.plan_for(mlp, rt).run(x)
                assert rt.launches == [kq.mlp3_variant_name(scheme, layernorm is not None, width)]
                want = mlp.forward_cpu(x)
                assert got.dtype == want.dtype and got.shape == want.shape == (m, dims[-1])
                keep = np.arange(m) != bad
                if bad is not None:
                    assert np.isnan(got[bad]).all() and np.isnan(want[bad]).all()
                assert np.isfinite(got[keep]).all()
                got, want = got[keep].astype(np.float64), want[keep].astype(np.float64)
                if layernorm is None and scheme != "w8a16" and out == "float32":
                    if DEVICE == "cpu":   # compiled, GELU's erf (libdevice) may differ by an ulp
                        assert np.array_equal(got, want), np.abs(got - want).max()
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
                else:
                    np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02 * np.abs(want).max())


def test_fused_step_leaves_other_models_layer_by_layer(rt, rng):
    """Four layers, a width past 64, W8A16 without LayerNorm, more than 64 rows: layer by layer."""
    def mlp(dims, **kw):
        return QuantMLP([(rng.standard_normal((o, i)), None) for i, o in zip(dims[:-1], dims[1:])], **kw)

    ln = (np.ones(8), np.zeros(8))
    for model, m in ((mlp([8, 16, 16, 16, 2]), 4), (mlp([8, 65, 16, 2]), 4),
                     (mlp([8, 16, 16, 2], scheme="w8a16"), 4), (mlp([8, 16, 16, 2], layernorm=ln), 65)):
        plan = _gpu.plan_for(model, rt)
        assert plan.fused_variant(m) is None
        rt.launches.clear()
        x = rng.standard_normal((m, 8)).astype(np.float32)
        np.testing.assert_allclose(plan.run(x), model.forward_cpu(x), rtol=0.02, atol=0.05)
        assert len(rt.launches) >= 3 and not any("mlp3" in v for v in rt.launches)


def test_gpu_plan_quant_linear(rt, rng):
    lin = QuantLinear(rng.standard_normal((30, 20)), rng.standard_normal(30), scheme="w8a8", out_dtype="float16")
    x = rng.standard_normal((5, 20)).astype(np.float32)
    got = _gpu.plan_for(lin, rt).run(x)
    assert got.dtype == np.float16
    assert np.array_equal(got, lin.forward_cpu(x))


def test_variant_table_matches_the_kernels():
    names = [v["variant"] for v in kq.QUANT_VARIANTS]
    assert len(names) == len(set(names))
    for v in kq.QUANT_VARIANTS:
        fn = v["kernel"].fn if hasattr(v["kernel"], "fn") else v["kernel"]
        params = list(inspect.signature(fn).parameters)
        assert list(v["signature"]) == params, v["variant"]
        cexpr = [k for k, t in v["signature"].items() if t == "constexpr"]
        assert sorted(cexpr) == sorted(v["constexprs"]), v["variant"]
        assert v["options"] == {"enable_fp_fusion": False}
        assert v["family"] == "quant"
