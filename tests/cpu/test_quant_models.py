"""QuantLinear / QuantMLP on the CPU backend: against float64 evaluations of the dequantized model,
against the float model, state dicts (NumPy and torch), bad input."""
import numpy as np
import pytest

from tickgpu.errors import BackendUnavailable
from tickgpu.quant import K_MAX, SCHEMES, QuantLinear, QuantMLP
from tickgpu.quant.schemes import quantize_activations


def _gelu64(y):
    from scipy.special import erf

    return 0.5 * y * (1 + erf(y / np.sqrt(2)))


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16"])
@pytest.mark.parametrize("m", [1, 16, 33])
def test_quant_linear_equals_dequantized_float64_math(rng, scheme, m):
    n, k = 45, 77
    w, b = rng.standard_normal((n, k)), rng.standard_normal(n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    lin = QuantLinear(w, b, scheme=scheme, gelu=True)
    act = quantize_activations(x, bits=16 if scheme == "w16a16" else 8)
    xd = act.q * act.scale.astype(np.float64)[:, None]
    want = _gelu64(xd @ lin.weight_q.dequantize().T + b.astype(np.float32))
    got = lin(x)
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=5e-6 * np.abs(want).max())


@pytest.mark.parametrize("scheme,tol", [("w8a8", 0.03), ("w16a8", 0.03), ("w8a16", 0.02),
                                        ("fp16", 2e-3), ("w16a16", 2e-4), ("fp32", 1e-6)])
def test_quant_linear_is_close_to_the_float_layer(rng, scheme, tol):
    w, b = rng.standard_normal((64, 96)), rng.standard_normal(64)
    x = rng.standard_normal((40, 96))
    want = x @ w.T + b
    got = QuantLinear(w, b, scheme=scheme)(x)
    assert np.abs(got - want).max() <= tol * np.abs(want).max()


def test_w16a8_weights_are_near_exact(rng):
    # activations exactly representable in int8: then only weight error remains, and int16 is tiny
    w = rng.standard_normal((20, 30)) + 2.0
    x = rng.integers(-127, 128, (9, 30)).astype(np.float32)
    x[:, 0] = 127  # absmax 127 -> scale exactly 1
    want = x.astype(np.float64) @ w.T
    e16 = np.abs(QuantLinear(w, scheme="w16a8")(x) - want).max()
    e8 = np.abs(QuantLinear(w, scheme="w8a8")(x) - want).max()
    assert e16 < e8 / 100


def test_w16a16_is_w16a8_without_the_activation_error(rng):
    """On the same float layer, W16A16's error is W16A8's divided by about the 257 finer activation
    steps; both are near-unbiased roundings, so the ratio is that of the steps."""
    w, b = rng.standard_normal((64, 96)) + rng.uniform(-1, 1, (64, 1)), rng.standard_normal(64)
    x = rng.standard_normal((200, 96)) * np.exp(rng.uniform(-3, 3, (200, 1)))
    want = x @ w.T + b
    e8 = np.abs(QuantLinear(w, b, scheme="w16a8")(x) - want).max(axis=1)
    e16 = np.abs(QuantLinear(w, b, scheme="w16a16")(x) - want).max(axis=1)
    ratio = np.median(e8 / e16)
    assert 100 < ratio < 400, ratio


def test_w16a16_refuses_k_past_its_int32_limit():
    from tickgpu.quant import K_MAX_A16

    with pytest.raises(ValueError, match="K_MAX_A16"):
        QuantLinear(np.zeros((1, K_MAX_A16 + 1), np.float32), scheme="w16a16")
    QuantLinear(np.zeros((1, K_MAX_A16 + 1), np.float32), scheme="w16a8")  # its own limit is K_MAX


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_out_dtypes(rng, out_dtype):
    lin = QuantLinear(rng.standard_normal((8, 12)), scheme="w8a8", out_dtype=out_dtype)
    x = rng.standard_normal((3, 12))
    y = lin(x)
    want = lin.forward_cpu(x.astype(np.float32), out_dtype="float32")
    assert y.dtype == (np.float16 if out_dtype == "float16" else np.float32)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2 ** -7, atol=1e-6)


def test_single_token_and_nan_handling(rng):
    lin = QuantLinear(rng.standard_normal((5, 6)), rng.standard_normal(5))
    x = rng.standard_normal((4, 6))
    np.testing.assert_array_equal(lin(x[2]), lin(x)[2])
    x[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"x\[1, 3\]: must be finite"):
        lin(x)
    y = lin(x, check=False)
    assert np.all(np.isnan(y[1])) and np.all(np.isfinite(y[[0, 2, 3]]))
    # the other rows are exactly what they are without the bad row
    np.testing.assert_array_equal(y[[0, 2, 3]], lin(x[[0, 2, 3]]))


def test_bad_arguments(rng):
    with pytest.raises(ValueError, match="scheme"):
        QuantLinear(np.ones((2, 2)), scheme="w4a4")
    with pytest.raises(ValueError, match="out_dtype"):
        QuantLinear(np.ones((2, 2)), out_dtype="int8")
    with pytest.raises(ValueError, match="bias"):
        QuantLinear(np.ones((2, 2)), np.ones(3))
    with pytest.raises(ValueError, match=r"weight\[0, 1\]"):
        QuantLinear(np.array([[1.0, np.inf]]), scheme="fp32")
    with pytest.raises(ValueError, match="K_MAX"):
        QuantLinear(np.ones((1, K_MAX + 1), np.float32))
    lin = QuantLinear(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"shape \(tokens, 3\)"):
        lin(np.ones((2, 4)))
    with pytest.raises(ValueError, match="float16's range"):
        QuantLinear(np.ones((2, 3)), scheme="w8a16")(np.full(3, 1e5))
    with pytest.raises(ValueError, match="layers"):
        QuantMLP([])
    with pytest.raises(ValueError, match="does not match"):
        QuantMLP([(np.ones((4, 3)), None), (np.ones((2, 5)), None)])


def test_gpu_backend_refuses_cleanly_without_a_gpu(monkeypatch):
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    with pytest.raises(BackendUnavailable):
        QuantLinear(np.ones((2, 3)), backend="gpu")(np.ones(3))
    assert QuantLinear(np.ones((2, 3)), backend="auto")(np.ones(3)).shape == (2,)


def _float_mlp(x, layers, ln):
    h = x.astype(np.float64)
    if ln is not None:
        g, b = ln
        mu = h.mean(axis=1, keepdims=True)
        h = (h - mu) / np.sqrt(h.var(axis=1, keepdims=True) + 1e-5) * g + b
    for i, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if i < len(layers) - 1:
            h = _gelu64(h)
    return h


@pytest.mark.parametrize("scheme,tol", [("fp32", 1e-5), ("fp16", 5e-3), ("w8a16", 0.03),
                                        ("w16a8", 0.04), ("w8a8", 0.05), ("w16a16", 5e-4)])
def test_quant_mlp_close_to_float(rng, scheme, tol):
    dims = [11, 32, 24, 3]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 11), rng.standard_normal(11) * 0.1)
    x = rng.standard_normal((65, 11)) * 3 + 1
    want = _float_mlp(x, layers, ln)
    got = QuantMLP(layers, layernorm=ln, scheme=scheme)(x)
    assert got.shape == (65, 3)
    assert np.abs(got - want).max() <= tol * np.abs(want).max()


def test_quant_mlp_from_numpy_state_dict(rng):
    sd = {
        "0.weight": rng.uniform(0.5, 1.5, 6), "0.bias": rng.standard_normal(6),
        "1.weight": rng.standard_normal((10, 6)), "1.bias": rng.standard_normal(10),
        "3.weight": rng.standard_normal((2, 10)), "3.bias": rng.standard_normal(2),
    }
    mlp = QuantMLP.from_state_dict(sd, scheme="fp32")
    x = rng.standard_normal((7, 6))
    want = _float_mlp(x, [(sd["1.weight"], sd["1.bias"]), (sd["3.weight"], sd["3.bias"])],
                      (sd["0.weight"], sd["0.bias"]))
    np.testing.assert_allclose(mlp(x), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="neither"):
        QuantMLP.from_state_dict({**sd, "4.weight": np.ones(2), "4.bias": np.ones(2)})


def test_quant_mlp_from_torch_module(rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(int(rng.integers(1 << 31)))
    model = torch.nn.Sequential(torch.nn.LayerNorm(9), torch.nn.Linear(9, 20), torch.nn.GELU(),
                                torch.nn.Linear(20, 20), torch.nn.GELU(), torch.nn.Linear(20, 4))
    x = rng.standard_normal((33, 9)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy().astype(np.float64)
    for scheme, tol in [("fp32", 1e-5), ("w16a16", 3e-4), ("w16a8", 0.03), ("w8a8", 0.05), ("w8a16", 0.03)]:
        got = QuantMLP.from_state_dict(model.state_dict(), scheme=scheme)(x)
        assert np.abs(got - want).max() <= tol * np.abs(want).max(), scheme


def test_all_schemes_listed():
    assert set(SCHEMES) == {"w8a8", "w16a8", "w16a16", "w8a16", "fp16", "fp32"}


def test_running_models_imports_neither_torch_nor_triton():
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from tickgpu.quant import QuantMLP, MinMaxObserver\n"
            "m = QuantMLP([(np.ones((4, 3)), None), (np.ones((2, 4)), None)], layernorm=(np.ones(3), np.zeros(3)))\n"
            "m(np.ones((2, 3))); MinMaxObserver().update(np.ones(3))\n"
            "bad = [k for k in ('torch', 'triton') if k in sys.modules]\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# -- values past float32 (and float16) -----------------------------------------------------------

@pytest.mark.parametrize("build,match", [
    (lambda: QuantLinear(np.array([[1e41, 1.0]])), r"weight\[0, 0\]: beyond float32's range"),
    (lambda: QuantLinear(np.array([[1.0, -1e39]]), scheme="w16a8"), r"weight\[0, 1\]: beyond float32"),
    (lambda: QuantLinear(np.array([[1e39, 1.0]]), scheme="fp32"), r"weight\[0, 0\]: beyond float32"),
    (lambda: QuantLinear(np.eye(2), np.array([0.0, 1e39])), r"bias\[1\]: beyond float32's range"),
    (lambda: QuantLinear(np.eye(2), np.array([0.0, 7e4]), scheme="fp16"), r"bias\[1\]: beyond float16's range"),
    (lambda: QuantLinear(np.full((2, 2), 7e4), scheme="fp16"), r"weight\[0, 0\]: beyond float16's range"),
    (lambda: QuantMLP([(np.eye(2), None)], layernorm=(np.array([1e39, 1.0]), np.zeros(2))),
     r"layernorm: gamma\[0\]: beyond float32's range"),
    (lambda: QuantMLP([(np.eye(2), None)], layernorm=(np.ones(2), np.array([0.0, -1e39]))),
     r"layernorm: beta\[1\]: beyond float32's range"),
    (lambda: QuantMLP([(np.eye(2), None)], layernorm=(np.ones(2), np.zeros(2), np.inf)), "eps"),
])
def test_parameters_beyond_float32_are_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("fmt", ["int8", "int16"])
def test_quantize_weight_refuses_weights_beyond_float32(fmt):
    from tickgpu.quant import quantize_weight

    with pytest.raises(ValueError, match=r"weight\[0, 1\]: beyond float32's range.*1e\+300"):
        quantize_weight(np.array([[1.0, 1e300], [0.0, 0.0]]), fmt)
    w = np.array([[3.4e38, -3.4e38, 1.0]])           # the edge itself is fine
    q = quantize_weight(w, fmt)
    assert np.isfinite(q.scale).all() and np.allclose(q.dequantize()[0, :2], w[0, :2], rtol=1e-2)


def test_float64_input_beyond_float32_names_the_range(rng):
    lin = QuantLinear(np.eye(2))
    with pytest.raises(ValueError, match=r"x\[0, 1\]: beyond float32's range \(\+-3.403e\+38\), got 1e\+39"):
        lin(np.array([1.0, 1e39]))
    with pytest.raises(ValueError, match=r"x\[0, 1\]: must be finite, got .*inf"):
        lin(np.array([1.0, np.inf]))


# -- float16 hidden activations ------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["w8a16", "fp16"])
def test_hidden_float16_overflow_raises_naming_the_layer(scheme):
    layers = [(np.full((2, 2), 300.0), None), (np.eye(2), None), (np.eye(2), None)]
    mlp = QuantMLP(layers, scheme=scheme)
    x = np.array([[1.0, 1.0], [200.0, 200.0]])
    with pytest.raises(ValueError, match=r"layers\[0\] output\[1, 0\] \(after GELU; the input of layers\[1\]\): "
                                         r"exceeds float16's range \(65504\).*got 120000\.0"):
        mlp(x)
    y = mlp(x, check=False)                        # documented: NaN for that row
    assert np.isnan(y[1]).all() and np.isfinite(y[0]).all()
    for int_scheme in ("w8a8", "w16a16"):          # float32 hidden activations: no overflow
        np.testing.assert_allclose(QuantMLP(layers, scheme=int_scheme)(x[1]), [120000.0] * 2, rtol=1e-3)
    # a LayerNorm whose output leaves float16 (the raw input is never rounded to float16 then)
    ln = QuantMLP([(np.eye(2), None)], layernorm=(np.full(2, 1e5), np.zeros(2)), scheme=scheme)
    with pytest.raises(ValueError, match=r"layernorm output\[0, 0\] \(the input of layers\[0\]\): exceeds float16"):
        ln(np.array([1.0, 2.0]))
    assert np.isnan(ln(np.array([1.0, 2.0]), check=False)).all()
    ok = QuantMLP([(np.eye(2), None)], layernorm=(np.full(2, 6e4), np.zeros(2)), scheme=scheme)
    np.testing.assert_allclose(ok(np.array([1e6, 3e6])), [-6e4, 6e4], rtol=2e-3)


# -- float32 overflow of huge inputs times huge weights ---------------------------------------------

@pytest.mark.parametrize("scheme,x0", [("w8a8", 1e22), ("w16a8", 1e27), ("w16a16", 1e30)])
def test_float32_overflow_raises_instead_of_nan(scheme, x0):
    """The row scale times the channel scale overflows float32 and the integer sum is 0 (x[1]
    quantizes to 0): 0 * inf would be NaN for an input and weights that are finite."""
    lin = QuantLinear([[0.0, 1e21]], scheme=scheme)
    x = np.array([x0, 1.0])
    with pytest.raises(ValueError, match=r"^output\[0, 0\]: not finite in float32 for finite input, got nan"):
        lin(x)
    assert np.isnan(lin(x, check=False)).all()      # documented for check=False
    np.testing.assert_allclose(lin(np.array([2.0, 1.0])), [1e21], rtol=1e-2)   # the same layer, ordinary input


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w16a16", "fp32"])
def test_hidden_float32_overflow_raises_naming_the_layer(scheme):
    mlp = QuantMLP([(np.full((4, 4), 1e20), None), (np.ones((2, 4)), None)], scheme=scheme)
    with pytest.raises(ValueError, match=r"^layers\[0\] output\[0, 0\]: not finite in float32 for finite input, got inf"):
        mlp(np.full(4, 1e19))
    assert not np.isfinite(mlp(np.full(4, 1e19), check=False)).any()
    assert np.isfinite(mlp(np.full(4, 1e10))).all()


def test_safe_input_bounds_every_layer(rng):
    """Inputs within the bound never overflow, whatever their pattern; a LayerNorm bounds any input;
    weights no input can keep in range make the bound 0 (every call with check=True looks)."""
    for _ in range(20):
        big = 10.0 ** rng.uniform(5, 15)
        layers = [(rng.standard_normal((6, 5)) * big, rng.standard_normal(6) * big),
                  (rng.standard_normal((3, 6)) * big, None)]
        for scheme in ("w8a8", "w16a16", "fp32"):
            mlp = QuantMLP(layers, scheme=scheme)
            assert 0 < mlp._safe_x < np.inf
            x = rng.choice([-1.0, 1.0], (8, 5)) * mlp._safe_x * rng.uniform(0.5, 1.0, (8, 5))
            assert np.isfinite(mlp.forward_cpu(x.astype(np.float32))).all()
            with pytest.raises(ValueError, match="not finite in float32"):
                mlp(np.full(5, 3e38) * np.sign(layers[0][0][np.argmax(np.abs(layers[0][0][:, 0])), 0]))
    ln = QuantMLP([(rng.standard_normal((4, 3)), None)], layernorm=(np.ones(3), np.zeros(3)), scheme="w8a16")
    assert ln._safe_x == np.inf
    assert QuantMLP([(np.full((2, 2), 3e38), None), (np.full((2, 2), 3e38), None)])._safe_x < 1e-38
    assert QuantMLP([(np.ones((2, 2)), np.full(2, 3e38)), (np.ones((2, 2)), None)])._safe_x == 0.0


# -- state dicts: unsupported modules, key order, dtypes -------------------------------------------

def _sd(rng, n_linear=2, ln=True, width=4):
    sd, i = {}, 0
    if ln:
        sd["0.weight"], sd["0.bias"] = rng.uniform(0.5, 1.5, width), rng.standard_normal(width)
        i = 1
    for _ in range(n_linear):
        sd[f"{i}.weight"], sd[f"{i}.bias"] = rng.standard_normal((width, width)), rng.standard_normal(width)
        i += 2
    return sd


def test_state_dict_modules_are_taken_in_index_order(rng):
    sd = _sd(rng, n_linear=6, ln=False)             # indices 0, 2, ..., 10
    assert "10.weight" in sd
    x = rng.standard_normal((3, 4))
    want = QuantMLP.from_state_dict(sd, scheme="fp32")(x)
    layers = [(sd[f"{i}.weight"], sd[f"{i}.bias"]) for i in range(0, 12, 2)]
    np.testing.assert_array_equal(want, QuantMLP(layers, scheme="fp32")(x))
    shuffled = dict(sorted(sd.items()))             # "10." before "2."
    np.testing.assert_array_equal(QuantMLP.from_state_dict(shuffled, scheme="fp32")(x), want)
    nested = {f"net.{k}": v for k, v in reversed(list(sd.items()))}
    np.testing.assert_array_equal(QuantMLP.from_state_dict(nested, scheme="fp32")(x), want)


@pytest.mark.parametrize("extra,match", [
    ({"1.weight_scale": np.ones(1)}, r"key '1.weight_scale': unsupported entry 'weight_scale'"),
    ({"0.running_mean": np.zeros(4)}, r"key '0.running_mean'"),
    ({"weight": np.ones((2, 4))}, r"key 'weight' has no module index"),
    ({"a.0.weight": np.ones((2, 4))}, "more than one module container"),
])
def test_state_dict_rejects_unknown_keys(rng, extra, match):
    with pytest.raises(ValueError, match=match):
        QuantMLP.from_state_dict({**_sd(rng), **extra})


def test_state_dict_rejects_batchnorm_and_normless_layernorm(rng):
    torch = pytest.importorskip("torch")
    bn = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)).eval()
    with pytest.raises(ValueError, match=r"'0.running_mean'.*BatchNorm"):
        QuantMLP.from_state_dict(bn.state_dict())
    plain = torch.nn.Sequential(torch.nn.LayerNorm(4, elementwise_affine=False), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"module '1' is a Linear, expected at index 0.*elementwise_affine=False"):
        QuantMLP.from_state_dict(plain.state_dict())
    gap = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Dropout(), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"module '3' is a Linear, expected at index 2"):
        QuantMLP.from_state_dict(gap.state_dict())
    no_bias = torch.nn.Sequential(torch.nn.LayerNorm(4, bias=False), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"module '0' has a 1-D weight and no bias"):
        QuantMLP.from_state_dict(no_bias.state_dict())


def test_bfloat16_state_dict(rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(int(rng.integers(1 << 31)))
    model = torch.nn.Sequential(torch.nn.LayerNorm(6), torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    sd16 = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    exact = {k: v.float().numpy() for k, v in sd16.items()}   # bfloat16 -> float32 is exact
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for scheme in ("fp32", "w8a8"):
        np.testing.assert_array_equal(QuantMLP.from_state_dict(sd16, scheme=scheme)(x),
                                      QuantMLP.from_state_dict(exact, scheme=scheme)(x))


def test_model_errors_name_the_layer_or_module():
    w = np.ones((4, 4))
    bad = w.copy()
    bad[1, 2] = np.nan
    with pytest.raises(TypeError, match=r"^layers\[0\]: must be a \(weight, bias\) pair"):
        QuantMLP([np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"^layers\[1\]: weight\[1, 2\]: must be finite"):
        QuantMLP([(w, None), (bad, None)])
    with pytest.raises(ValueError, match=r"^layers\[0\]: bias: must have shape \(4,\)"):
        QuantMLP([(w, np.ones(3))])
    with pytest.raises(TypeError, match=r"^layernorm: eps must be a number, got 'abc'"):
        QuantMLP([(w, None)], layernorm=(np.ones(4), np.zeros(4), "abc"))
    with pytest.raises(TypeError, match=r"^layernorm: must be \(gamma, beta\) or \(gamma, beta, eps\), got 4 items"):
        QuantMLP([(w, None)], layernorm=(np.ones(4), np.zeros(4), 1e-5, 3))
    sd = {"net.0.weight": np.ones(4), "net.0.bias": np.zeros(4), "net.1.weight": w, "net.3.weight": bad}
    with pytest.raises(ValueError, match=r"^state_dict: module 'net.3': weight\[1, 2\]: must be finite"):
        QuantMLP.from_state_dict(sd)
    sd = {"0.weight": np.full(4, np.nan), "0.bias": np.zeros(4), "1.weight": w}
    with pytest.raises(ValueError, match=r"^state_dict: module '0' \(the LayerNorm\): gamma\[0\]: must be finite"):
        QuantMLP.from_state_dict(sd)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_every_scheme_refuses_an_empty_weight(scheme, shape):
    with pytest.raises(ValueError, match=rf"^weight: must not be empty, got shape \({shape[0]}, {shape[1]}\)"):
        QuantLinear(np.zeros(shape), scheme=scheme)


@pytest.mark.parametrize("gelu", ["no", 1, None, np.float64(0.0)])
def test_gelu_must_be_a_bool(gelu):
    with pytest.raises(TypeError, match=r"^gelu: must be a bool"):
        QuantLinear(np.ones((2, 3)), gelu=gelu)
    assert QuantLinear(np.ones((2, 3)), gelu=np.bool_(True)).gelu is True


@pytest.mark.parametrize("bad", [np.ones(3) + 2j, np.ones(3, bool), np.array(["1", "1", "1"])])
def test_layernorm_parameters_must_be_real(bad):
    w = np.ones((2, 3))
    with pytest.raises(TypeError, match=r"^layernorm: gamma: must be a real float array"):
        QuantMLP([(w, None)], layernorm=(bad, np.zeros(3)))
    with pytest.raises(TypeError, match=r"^layernorm: beta: must be a real float array"):
        QuantMLP([(w, None)], layernorm=(np.ones(3), bad))
    # lists of numbers are fine, and give the model arrays do
    a = QuantMLP([(w, None)], layernorm=([1.0, 2.0, 3.0], [0, 0, 1]))
    b = QuantMLP([(w, None)], layernorm=(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0])))
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(a(x), b(x))


@pytest.mark.parametrize("keys", [("0.weight", "00.weight"), ("net.2.weight", "net.02.bias"),
                                  ("00.weight", "0.bias")])
def test_state_dict_refuses_two_spellings_of_one_module_index(rng, keys):
    sd = {keys[0]: rng.standard_normal((2, 3)), keys[1]: rng.standard_normal((2, 3) if "weight" in keys[1] else 2)}
    if keys[0].startswith("net.2"):
        sd = {"net.0.weight": rng.standard_normal((3, 3)), **sd}
    with pytest.raises(ValueError, match=rf"^state_dict: keys '{keys[0]}' and '{keys[1]}' both name module"):
        QuantMLP.from_state_dict(sd)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_state_dict_entries_torch_cannot_hand_over_are_named(rng):
    """A meta, sparse or quantized tensor raised torch's own error, which names no key; a key whose
    index is a digit int() refuses ('²') raised int()'s error; a list of pairs, AttributeError."""
    torch = pytest.importorskip("torch")
    w = torch.ones(2, 3)
    for bad in (torch.ones(2, 3, device="meta"), w.to_sparse(), torch.quantize_per_tensor(w, 0.1, 0, torch.qint8)):
        with pytest.raises(TypeError, match=r"^state_dict: '2.weight' cannot be read as a dense array"):
            QuantMLP.from_state_dict({"0.weight": torch.ones(3, 4), "2.weight": bad})
    with pytest.raises(ValueError, match=r"^state_dict: key '\u00b2.weight' has no module index"):
        QuantMLP.from_state_dict({"\u00b2.weight": np.ones((2, 2))})
    with pytest.raises(TypeError, match=r"^state_dict: must be a mapping of keys to arrays.*got list"):
        QuantMLP.from_state_dict([("0.weight", np.ones((2, 2)))])


def test_layers_container_is_checked_and_any_iterable_of_pairs_is_taken(rng):
    w1, w2 = rng.standard_normal((4, 3)), rng.standard_normal((2, 4))
    for bad in (np.ones((2, 2, 2)), "w", {"0": (w1, None)}, 3):
        with pytest.raises(TypeError, match=r"^layers: must be a list of \(weight, bias\) pairs"):
            QuantMLP(bad)
    x = rng.standard_normal((3, 3))
    want = QuantMLP([(w1, None), (w2, None)])(x)
    np.testing.assert_array_equal(QuantMLP(((w, None) for w in (w1, w2)))(x), want)
    np.testing.assert_array_equal(QuantMLP(((w1, None), (w2, None)))(x), want)


@pytest.mark.parametrize("scheme", ["w8a8", "w16a16", "w8a16"])
def test_a_non_finite_row_through_the_layernorm_is_nan_without_warnings(scheme, recwarn):
    """check=False: a row holding inf or NaN comes out NaN, as documented, and the CPU reference's
    LayerNorm says nothing about the arithmetic it did on it (a warning is an error under -W error)."""
    rng = np.random.default_rng(7)
    layers = [(rng.standard_normal((6, 4)), None), (rng.standard_normal((2, 6)), None)]
    mlp = QuantMLP(layers, layernorm=(np.ones(4), np.zeros(4)), scheme=scheme)
    x = rng.standard_normal((3, 4))
    x[1, 2] = np.inf
    x[2, 0] = np.nan
    y = mlp(x, check=False)
    assert np.isnan(y[1:]).all() and np.isfinite(y[0]).all()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]
