"""QuantLinear / QuantMLP on the GPU against the CPU reference (which defines the results)."""
import numpy as np
import pytest

from tickgpu.quant import QuantLinear, QuantMLP

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("scheme", ["w8a8", "w16a8", "w8a16"])
@pytest.mark.parametrize("m", [1, 15, 16, 17, 33, 129, 1000])
def test_quant_mlp_gpu_matches_cpu(rng, scheme, m):
    dims = [13, 64, 48, 3]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1)
              for i, o in zip(dims[:-1], dims[1:])]
    for layernorm in (None, (rng.uniform(0.5, 1.5, 13), rng.standard_normal(13) * 0.1)):
        for out in ("float32", "float16", "bfloat16"):
            mlp = QuantMLP(layers, layernorm=layernorm, scheme=scheme, out_dtype=out, backend="gpu")
            x = (rng.standard_normal((m, 13)) * 2).astype(np.float32)
            got = mlp(x).astype(np.float64)
            want = mlp.forward_cpu(x).astype(np.float64)
            if layernorm is None and scheme != "w8a16":
                # exact up to GELU's erf (libdevice vs host): an ulp or two, then the output rounding
                np.testing.assert_allclose(got, want, rtol=2e-3 if out != "float32" else 1e-5,
                                           atol=1e-5 * np.abs(want).max())
            else:
                np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02 * np.abs(want).max())


@pytest.mark.parametrize("fmt", ["w8a8", "w16a8"])
def test_quant_linear_gpu_bit_exact_without_gelu(rng, fmt):
    lin = QuantLinear(rng.standard_normal((77, 301)), rng.standard_normal(77), scheme=fmt, backend="gpu")
    x = rng.standard_normal((33, 301)).astype(np.float32)
    assert np.array_equal(lin(x).view(np.uint32), lin.forward_cpu(x).view(np.uint32))
