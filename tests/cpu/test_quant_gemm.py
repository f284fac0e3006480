"""The NumPy integer reference against float64 evaluations of the same quantized math; limbs; edges;
int32 overflow limits."""
import numpy as np
import pytest

from tickgpu.quant import gemm
from tickgpu.quant.schemes import (
    EPS,
    ACT16_MAX,
    join_limbs,
    quantize_activations,
    quantize_weight,
    round_to_bfloat16,
    split_act_limbs,
    split_limbs,
)

ODD_M = [1, 15, 16, 17, 33, 129]
F32_EPS = float(np.finfo(np.float32).eps)


def _shapes(rng):
    # N, K deliberately not multiples of 64 (nor of 16 for most draws)
    return int(rng.integers(1, 200)), int(rng.integers(1, 300))


@pytest.mark.parametrize("m", ODD_M)
def test_int_gemm_exact_against_float64(rng, m):
    n, k = _shapes(rng)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)
    got = gemm.int_gemm(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64).T  # exact: |sums| << 2**53
    assert got.dtype == np.int32
    assert np.array_equal(got.astype(np.float64), want)


def test_int_gemm_rejects_bad_operands():
    a = np.zeros((2, 3), np.int8)
    with pytest.raises(TypeError, match="int8"):
        gemm.int_gemm(a.astype(np.int16), a)
    with pytest.raises(ValueError, match="do not match"):
        gemm.int_gemm(a, np.zeros((2, 4), np.int8))


def test_limbs_recombine_exactly_for_every_int16():
    q = np.arange(-32768, 32768, dtype=np.int64).astype(np.int16)
    hi, lo = split_limbs(q)
    assert hi.dtype == lo.dtype == np.int8
    assert np.array_equal(256 * hi.astype(np.int64) + lo.astype(np.int64) + 128, q.astype(np.int64))
    assert np.array_equal(join_limbs(hi, lo), q)


def test_limb_accumulators_recombine_to_the_int16_product(rng):
    m, n, k = 17, 23, 301
    xq = rng.integers(-127, 128, (m, k)).astype(np.int8)
    q = rng.integers(-32768, 32768, (n, k)).astype(np.int16)
    hi, lo = split_limbs(q)
    acc_hi, acc_lo = gemm.int_gemm(xq, hi), gemm.int_gemm(xq, lo)
    rowsum = xq.astype(np.int64).sum(axis=1)
    combined = 256 * acc_hi.astype(np.int64) + acc_lo + 128 * rowsum[:, None]
    want = xq.astype(np.float64) @ q.astype(np.float64).T
    assert np.array_equal(combined.astype(np.float64), want)


def test_activation_limbs_recombine_exactly_for_every_code():
    q = np.arange(-ACT16_MAX, ACT16_MAX + 1).astype(np.int16)
    hi, lo = split_act_limbs(q)
    assert hi.dtype == lo.dtype == np.int8
    assert hi.min() == -127 and hi.max() == 127 and lo.min() == -128 and lo.max() == 127
    assert np.array_equal(256 * hi.astype(np.int64) + lo.astype(np.int64), q.astype(np.int64))
    assert ACT16_MAX == 127 * 257
    with pytest.raises(ValueError, match=r"q\[1\]: must be within"):
        split_act_limbs(np.array([0, -ACT16_MAX - 1], np.int16))
    with pytest.raises(TypeError, match="int16"):
        split_act_limbs(np.zeros(3, np.int8))


def test_w16a16_accumulators_recombine_to_the_int16_product(rng):
    m, n, k = 17, 23, 301
    xq = rng.integers(-ACT16_MAX, ACT16_MAX + 1, (m, k)).astype(np.int16)
    q = rng.integers(-32768, 32768, (n, k)).astype(np.int16)
    xh, xl = split_act_limbs(xq)
    hi, lo = split_limbs(q)
    hh, mid, ll = gemm.limb_accumulators(xh, xl, hi, lo)
    assert hh.dtype == mid.dtype == ll.dtype == np.int32
    rowsum = xq.astype(np.int64).sum(axis=1)
    combined = 65536 * hh.astype(np.int64) + 256 * mid.astype(np.int64) + ll + 128 * rowsum[:, None]
    want = xq.astype(np.float64) @ q.astype(np.float64).T   # |sums| < 2**53: exact
    assert np.array_equal(combined.astype(np.float64), want)


def test_w16a16_int32_accumulators_at_k_max_a16_hold_their_sums():
    """At K = K_MAX_A16, the codes that make each accumulator's steps largest (activation codes
    +-32639: limbs +-127; weight codes -32768 and 32766: limbs -128 / -128 and 127 / 126), summed
    in int32 registers in order as a GPU would, equal the exact sums; a longer layer is refused."""
    k = gemm.K_MAX_A16
    assert k == (2**31 - 1) // (127 * 128 + 128 * 128) == 65793
    wq = quantize_weight(np.stack([-np.ones(k), np.ones(k)]), "int16")
    act = quantize_activations(np.stack([np.ones(k), -np.ones(k)]).astype(np.float32), bits=16)
    (xh, xl), (hi, lo) = act.limbs, wq.limbs
    assert {int(xh.min()), int(xh.max()), int(xl.min()), int(xl.max())} == {-127, 127}
    assert {int(hi.min()), int(lo.min())} == {-128} and int(hi.max()) == 127
    hh, mid, ll = gemm.limb_accumulators(xh, xl, hi, lo)
    mid_steps = (xh[:, None, :].astype(np.int32) * lo[None, :, :] + xl[:, None, :].astype(np.int32) * hi[None, :, :])
    for acc, steps in ((mid, mid_steps), (hh, xh[:, None, :].astype(np.int32) * hi[None, :, :]),
                       (ll, xl[:, None, :].astype(np.int32) * lo[None, :, :])):
        running = np.cumsum(steps, axis=2, dtype=np.int32)[..., -1]      # what int32 registers hold
        exact = steps.astype(np.int64).sum(axis=2)
        assert np.array_equal(running.astype(np.int64), exact) and np.array_equal(acc.astype(np.int64), exact)
    assert int(np.abs(mid.astype(np.int64)).max()) == 32512 * k > 2 * 10**9
    assert np.abs(act.rowsum.astype(np.int64)).max() == ACT16_MAX * k
    with pytest.raises(ValueError, match="K_MAX_A16"):
        z = np.zeros((1, k + 1), np.int8)
        gemm.limb_accumulators(z, z, z, z)
    with pytest.raises(ValueError, match="row sums"):
        quantize_activations(np.ones((1, 65796), np.float32), bits=16)


def test_int_gemm_refuses_sums_that_could_pass_int32():
    """K_MAX bounds a step by 127 * 128; two -128 operands (W16A16's lo limbs) make 128 * 128, so
    past (2**31 - 1) // 16384 = 131071 such a product sum is refused, not wrapped."""
    a = np.full((1, 131072), -128, np.int8)
    with pytest.raises(ValueError, match="could overflow int32"):
        gemm.int_gemm(a, a)
    assert int(gemm.int_gemm(a[:, :131071], a[:, :131071])[0, 0]) == 131071 * 16384


def test_w16a16_extreme_codes_at_large_k_are_exact():
    """Every limb at its extreme over K = 65,536 (the middle accumulator reaches -2.13e9): the
    limb accumulators recombine to the exact int16 x int16 product sums."""
    k = 65536
    w = np.full((2, k), -1.0)
    w[1] = 1.0
    wq = quantize_weight(w, "int16")
    assert wq.q[0].min() == -32768 and wq.q[1].max() == 32766   # 65534 steps
    act = quantize_activations(np.stack([np.ones(k), -np.ones(k)]).astype(np.float32), bits=16)
    assert np.abs(act.q.astype(int)).min() == ACT16_MAX
    xh, xl = act.limbs
    hi, lo = wq.limbs
    hh, mid, ll = gemm.limb_accumulators(xh, xl, hi, lo)
    assert int(np.abs(mid.astype(np.int64)).max()) > 2 * 10**9
    combined = 65536 * hh.astype(np.int64) + 256 * mid.astype(np.int64) + ll + 128 * act.rowsum.astype(np.int64)[:, None]
    want = act.q.astype(np.int64) @ wq.q.astype(np.int64).T
    assert np.array_equal(combined, want)


def test_limb_accumulators_refuse_hi_limbs_whose_middle_sums_could_wrap():
    """An activation hi limb of -128 (split_act_limbs never makes one) doubles the middle step to
    2 * 128 * 128: at K = K_MAX_A16 its sum, 2.16e9, would wrap int32 into a wrong value."""
    k = gemm.K_MAX_A16
    limb = np.full((1, k), -128, np.int8)
    with pytest.raises(ValueError, match=r"limb_accumulators: K = 65793 .*x_hi up to 128"):
        gemm.limb_accumulators(limb, limb, limb, limb)
    # the limbs split_act_limbs makes are accepted at the same K, and exact
    x_hi = np.full((1, k), -127, np.int8)
    hh, mid, ll = gemm.limb_accumulators(x_hi, limb, limb, limb)
    assert int(mid[0, 0]) == (127 * 128 + 128 * 128) * k


@pytest.mark.parametrize("m", ODD_M)
def test_w16a16_matches_float64_of_the_same_quantized_math(rng, m):
    n, k = _shapes(rng)
    x = (rng.standard_normal((m, k)) * np.exp(rng.uniform(-5, 5, (m, 1)))).astype(np.float32)
    w = rng.standard_normal((n, k)) + rng.uniform(-3, 3, (n, 1))  # off-centre rows: zero points != 0
    b = rng.standard_normal(n).astype(np.float32)
    act, wq = quantize_activations(x, bits=16), quantize_weight(w, "int16")
    xh, xl = act.limbs
    hi, lo = wq.limbs
    y = gemm.linear_w16a16(xh, xl, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset, b)
    centred = act.q.astype(np.float64) @ (wq.q.astype(np.float64) - wq.zero_point[:, None]).T
    main = centred * act.scale.astype(np.float64)[:, None] * wq.scale.astype(np.float64)[None, :]
    big = (65536 * np.abs(xh.astype(np.float64) @ hi.astype(np.float64).T)
           + np.abs(128.0 - wq.zero_point)[None, :] * np.abs(act.rowsum)[:, None]) \
        * act.scale[:, None] * wq.scale[None, :]
    assert np.all(np.abs(y - (main + b)) <= _fp32_bound(big, main + b))
    # and the layer approximates the float one to the two int16 quantizations' error
    y_float = x.astype(np.float64) @ w.T + b
    bound = (np.abs(x).max(axis=1, keepdims=True) / ACT16_MAX * np.abs(w).sum(axis=1)[None, :] / 2
             + np.abs(x).sum(axis=1, keepdims=True) * wq.scale[None, :] / 2) * 1.01
    assert np.all(np.abs(y - y_float) <= bound + _fp32_bound(big, main + b) + 1e-6)


def _fp32_bound(*terms):
    # a handful of float32 roundings, each at most half an ulp of the largest intermediate
    return 8 * F32_EPS * sum(np.abs(t) for t in terms) + 1e-30


@pytest.mark.parametrize("m", ODD_M)
def test_w8a8_matches_float64_of_the_same_quantized_math(rng, m):
    n, k = _shapes(rng)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.01, 100)).astype(np.float32)
    w = rng.standard_normal((n, k))
    b = rng.standard_normal(n)
    act, wq = quantize_activations(x), quantize_weight(w, "int8")
    y = gemm.linear_w8a8(act.q, act.scale, wq.q, wq.scale, b.astype(np.float32))
    acc = act.q.astype(np.float64) @ wq.q.astype(np.float64).T
    main = acc * act.scale.astype(np.float64)[:, None] * wq.scale.astype(np.float64)[None, :]
    want = main + b.astype(np.float32).astype(np.float64)
    assert np.all(np.abs(y - want) <= _fp32_bound(main, want))
    # and the quantized layer approximates the float one to the quantization error
    y_float = x.astype(np.float64) @ w.T + b
    bound = (np.abs(x).max(axis=1, keepdims=True) / 127 * np.abs(w).sum(axis=1)[None, :] / 2
             + np.abs(x).sum(axis=1, keepdims=True) * np.abs(w).max(axis=1)[None, :] / 127 / 2) * 1.01
    assert np.all(np.abs(y - y_float) <= bound + 1e-6)


@pytest.mark.parametrize("m", ODD_M)
def test_w16a8_matches_float64_of_the_same_quantized_math(rng, m):
    n, k = _shapes(rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)) + rng.uniform(-3, 3, (n, 1))  # off-centre rows: zero points != 0
    b = rng.standard_normal(n).astype(np.float32)
    act, wq = quantize_activations(x), quantize_weight(w, "int16")
    hi, lo = wq.limbs
    y = gemm.linear_w16a8(act.q, act.scale, act.rowsum, hi, lo, wq.scale, wq.limb_offset, b)
    centred = act.q.astype(np.float64) @ (wq.q.astype(np.float64) - wq.zero_point[:, None]).T
    main = centred * act.scale.astype(np.float64)[:, None] * wq.scale.astype(np.float64)[None, :]
    # intermediates reach 256*|acc_hi| + |(128-z) rowsum|: the float32 error is relative to those
    big = (256 * np.abs(act.q.astype(np.float64) @ hi.astype(np.float64).T)
           + np.abs(128.0 - wq.zero_point)[None, :] * np.abs(act.rowsum)[:, None]) \
        * act.scale[:, None] * wq.scale[None, :]
    assert np.all(np.abs(y - (main + b)) <= _fp32_bound(big, main + b))


@pytest.mark.parametrize("m", [1, 17, 129])
def test_w8a16_matches_float64(rng, m):
    n, k = _shapes(rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    wq = quantize_weight(rng.standard_normal((n, k)), "int8")
    y = gemm.linear_w8a16(x, wq.q, wq.scale)
    x16 = x.astype(np.float16).astype(np.float64)
    want = (x16 @ wq.q.astype(np.float64).T) * wq.scale.astype(np.float64)
    assert np.all(np.abs(y - want) <= _fp32_bound(want))


def test_weight_quantization_error_and_range(rng):
    w = rng.standard_normal((37, 91)) * np.exp(rng.uniform(-5, 5, (37, 1)))
    w[3] = 0.0           # all-zero channel
    w[4] = 2.5           # min == max, positive
    w[5, :] = 1e-8 * rng.standard_normal(91)  # tiny range
    w8 = quantize_weight(w, "int8")
    assert w8.q.dtype == np.int8 and np.abs(w8.q.astype(int)).max() <= 127
    assert np.all(np.isfinite(w8.scale)) and np.all(w8.scale > 0)
    assert np.all(np.abs(w8.dequantize() - w) <= 0.5 * w8.scale[:, None] * (1 + 1e-6))
    w16 = quantize_weight(w, "int16")
    assert w16.q.dtype == np.int16
    assert np.all((w16.zero_point >= -32768) & (w16.zero_point <= 32767))
    assert np.all(np.isfinite(w16.scale)) and np.all(w16.scale > 0)
    assert np.all(np.abs(w16.dequantize() - w) <= 0.5 * w16.scale[:, None] * (1 + 1e-6))
    # 0.0 is exactly representable (the zero point is a code)
    assert np.all(w16.dequantize()[3] == 0.0)
    # int16 is ~256x finer than int8 on the same channel
    assert np.abs(w16.dequantize() - w).max() < np.abs(w8.dequantize() - w).max() / 50


def test_weight_quantization_rejects_bad_weights():
    with pytest.raises(ValueError, match=r"weight\[1, 2\]: must be finite"):
        w = np.zeros((3, 4)); w[1, 2] = np.nan
        quantize_weight(w)
    with pytest.raises(ValueError, match="2-D"):
        quantize_weight(np.zeros(4))
    with pytest.raises(ValueError, match="format"):
        quantize_weight(np.zeros((2, 2)), "int4")


def test_activation_quantization_edges(rng):
    k = 19
    x = rng.standard_normal((8, k)).astype(np.float32)
    x[1] = 0.0                         # all-zero row
    x[2] = 3.0                         # min == max
    x[3] = 1e-8 * rng.standard_normal(k)   # a 1e-8 range
    x[4, 5] = np.nan                   # poisoned rows
    x[5, 0] = -np.inf
    x[6] = 3e38                        # near float32's max
    x[7] = 1e-40                       # subnormal
    act = quantize_activations(x)
    ok = np.array([0, 1, 2, 3, 6, 7])
    assert np.all(np.isfinite(act.scale[ok])) and np.all(act.scale[ok] > 0)
    assert np.isnan(act.scale[4]) and np.isnan(act.scale[5])
    assert np.all(act.q[[4, 5]] == 0) and np.all(act.rowsum[[4, 5]] == 0)
    assert np.all(act.q[1] == 0) and act.scale[1] == np.float32(EPS) / np.float32(127)
    assert np.all(act.q[2] == 127)
    assert np.abs(act.q.astype(int)).max() <= 127
    assert np.array_equal(act.rowsum, act.q.astype(np.int64).sum(axis=1))
    err = np.abs(act.q[ok] * act.scale[ok, None].astype(np.float64) - x[ok].astype(np.float64))
    assert np.all(err <= 0.5 * act.scale[ok, None] * (1 + 1e-5) + 1e-45)
    # the tiny row is quantized at its own resolution, not flushed
    assert np.abs(act.q[3]).max() == 127
    # 16-bit codes: the same rows, 257 times finer steps
    a16 = quantize_activations(x, bits=16)
    assert a16.q.dtype == np.int16 and np.abs(a16.q.astype(int)).max() <= ACT16_MAX
    assert np.all(np.isfinite(a16.scale[ok])) and np.all(a16.scale[ok] > 0)
    assert np.isnan(a16.scale[4]) and np.isnan(a16.scale[5])
    assert np.all(a16.q[[4, 5]] == 0) and np.all(a16.rowsum[[4, 5]] == 0)
    assert np.all(a16.q[1] == 0) and a16.scale[1] == np.float32(EPS) / np.float32(ACT16_MAX)
    assert np.all(a16.q[2] == ACT16_MAX) and np.abs(a16.q[3]).max() == ACT16_MAX
    assert np.array_equal(a16.rowsum, a16.q.astype(np.int64).sum(axis=1))
    err16 = np.abs(a16.q[ok] * a16.scale[ok, None].astype(np.float64) - x[ok].astype(np.float64))
    assert np.all(err16 <= 0.5 * a16.scale[ok, None] * (1 + 1e-5) + 1e-45)
    for bad in (4, 8.0, True, "8", np.float64(16)):
        with pytest.raises(ValueError, match="bits: must be the integer 8 or 16"):
            quantize_activations(x, bits=bad)
    assert np.array_equal(quantize_activations(x, bits=np.int64(8)).q, quantize_activations(x, bits=8).q)


def test_int32_overflow_limit_is_where_the_arithmetic_says():
    assert gemm.K_MAX == (2**31 - 1) // (127 * 128) == 132104
    for k, overflows in ((gemm.K_MAX, False), (gemm.K_MAX + 1, True)):
        # worst case: activations at +127 against limbs at -128
        prods = np.full(k, 127 * -128, np.int64)
        exact = prods.sum()
        wrapped = np.cumsum(prods.astype(np.int32), dtype=np.int32)[-1]  # what an int32 register holds
        assert (exact < -2**31) == overflows
        assert (wrapped != exact) == overflows
    # the scheme refuses such layers instead of wrapping silently
    with pytest.raises(ValueError, match="K_MAX"):
        gemm.int_gemm(np.zeros((1, gemm.K_MAX + 1), np.int8), np.zeros((1, gemm.K_MAX + 1), np.int8))


def test_int32_accumulation_at_k_max_with_extreme_values_is_exact():
    k = gemm.K_MAX
    xq = np.full((2, k), 127, np.int8)
    xq[1] = -127
    hi = np.full((3, k), -128, np.int8)
    hi[1] = 127
    hi[2, ::2] = -128
    hi[2, 1::2] = 127
    acc = gemm.int_gemm(xq, hi)
    want = xq.astype(np.float64) @ hi.astype(np.float64).T
    assert np.array_equal(acc.astype(np.float64), want)
    # also the int32 running sum a GPU would form, in order
    prods = (xq[0].astype(np.int32) * hi[0].astype(np.int32))
    assert np.cumsum(prods, dtype=np.int32)[-1] == want[0, 0]


def test_simpler_schemes_would_overflow_much_sooner():
    # one int32 accumulator for int8 x int16 products: 127 * 32768 * K
    assert 127 * 32768 * 516 <= 2**31 - 1 < 127 * 32768 * 517
    # zero point folded into the weights: |q - z| <= 65535
    assert 127 * 65535 * 258 <= 2**31 - 1 < 127 * 65535 * 259


def test_round_to_bfloat16(rng):
    x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * 1e3,
                        np.array([1.0, 1.00390625, 1.01171875, -0.0, np.inf, -np.inf, np.nan], np.float32)])
    r = round_to_bfloat16(x)
    bits = r.view(np.uint32)
    assert np.all(bits[np.isfinite(r)] & 0xFFFF == 0)
    fin = np.isfinite(x) & (x != 0)  # the bit-neighbours of +-0 are not its value neighbours
    # nearest: no other bfloat16 value is closer (neighbours are +-1 in the top 16 bits)
    up = (bits[fin] + 0x10000).view(np.float32)
    down = (bits[fin] - 0x10000).view(np.float32)
    d = np.abs(r[fin].astype(np.float64) - x[fin])
    assert np.all(d <= np.abs(up.astype(np.float64) - x[fin]))
    assert np.all(d <= np.abs(down.astype(np.float64) - x[fin]))
    # ties to even: 1 + 2**-8 lies halfway between 1 and 1 + 2**-7 -> 1 (even mantissa)
    assert r[10000] == 1.0 and r[10001] == 1.0 and r[10002] == np.float32(1.015625)
    assert np.isnan(r[-1]) and r[-2] == -np.inf and r[-3] == np.inf


def test_round_to_bfloat16_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x = (rng.standard_normal(4096) * 10 ** rng.uniform(-30, 30, 4096)).astype(np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(round_to_bfloat16(x), want)


def test_gelu_matches_float64(rng):
    import math

    y = (rng.standard_normal(2000) * 4).astype(np.float32)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in y.astype(np.float64)])
    got = gemm.gelu(y)
    assert got.dtype == np.float32
    assert np.all(np.abs(got - want) <= 4 * F32_EPS * (np.abs(want) + np.abs(y)) + 1e-30)


# -- argument shapes at the public entry points: nothing is broadcast ----------------------------------

def _w8a8_operands(rng, m=3, n=4, k=5):
    a = quantize_activations(rng.standard_normal((m, k)).astype(np.float32))
    wq = quantize_weight(rng.standard_normal((n, k)))
    return a, wq


def test_w8a8_refuses_scales_and_bias_of_the_wrong_length(rng):
    a, wq = _w8a8_operands(rng)
    with pytest.raises(ValueError, match=r"^x_scale: must have shape \(3,\), one value per token, got shape \(1,\)"):
        gemm.linear_w8a8(a.q, a.scale[:1], wq.q, wq.scale[:1], np.ones(1))
    with pytest.raises(ValueError, match=r"^w_scale: must have shape \(4,\), one value per output channel, got shape \(1,\)"):
        gemm.linear_w8a8(a.q, a.scale, wq.q, wq.scale[:1])
    with pytest.raises(ValueError, match=r"^bias: must have shape \(4,\), one value per output channel, got shape \(1,\)"):
        gemm.linear_w8a8(a.q, a.scale, wq.q, wq.scale, np.ones(1))
    with pytest.raises(ValueError, match=r"^bias: must have shape \(4,\).*got shape \(2, 4\)"):
        gemm.linear_w8a8(a.q, a.scale, wq.q, wq.scale, np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"^xq, wq: the reduction dimension K differs: shapes \(3, 4\) \(M, K\) "
                                         r"and \(4, 5\) \(N, K\)"):
        gemm.linear_w8a8(a.q[:, :4], a.scale, wq.q, wq.scale)
    with pytest.raises(TypeError, match=r"^xq: must be int8 codes, got dtype int64"):
        gemm.linear_w8a8(a.q.astype(np.int64), a.scale, wq.q, wq.scale)


def test_entry_points_take_array_likes_with_the_same_result(rng):
    a, wq = _w8a8_operands(rng)
    bias = rng.standard_normal(4).astype(np.float32)
    want = gemm.linear_w8a8(a.q, a.scale, wq.q, wq.scale, bias)
    got = gemm.linear_w8a8(a.q, a.scale.tolist(), wq.q, wq.scale.tolist(), bias.tolist())
    np.testing.assert_array_equal(got, want)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    want = gemm.linear_w8a16(x, wq.q, wq.scale, bias)
    np.testing.assert_array_equal(gemm.linear_w8a16(x.tolist(), wq.q, wq.scale.tolist(), bias.tolist()), want)
    acc = gemm.int_gemm(a.q, wq.q)
    np.testing.assert_array_equal(gemm.epilogue_w8a8(acc.tolist(), a.scale.tolist(), wq.scale.tolist()),
                                  gemm.epilogue_w8a8(acc, a.scale, wq.scale))


def test_limb_entry_points_check_every_shape(rng):
    m, n, k = 3, 4, 6
    x = rng.standard_normal((m, k)).astype(np.float32)
    w16 = quantize_weight(rng.standard_normal((n, k)), "int16")
    hi, lo = w16.limbs
    a8 = quantize_activations(x)
    a16 = quantize_activations(x, bits=16)
    xh, xl = a16.limbs
    args8 = dict(xq=a8.q, x_scale=a8.scale, rowsum=a8.rowsum, w_hi=hi, w_lo=lo, w_scale=w16.scale,
                 limb_offset=w16.limb_offset, bias=np.ones(n))
    args16 = dict(x_hi=xh, x_lo=xl, x_scale=a16.scale, rowsum=a16.rowsum, w_hi=hi, w_lo=lo,
                  w_scale=w16.scale, limb_offset=w16.limb_offset, bias=np.ones(n))
    gemm.linear_w16a8(**args8)
    gemm.linear_w16a16(**args16)
    for name, bad, match in [("rowsum", a8.rowsum[:1], r"^rowsum: must have shape \(3,\), one value per token"),
                             ("x_scale", a8.scale[:2], r"^x_scale: must have shape \(3,\)"),
                             ("limb_offset", w16.limb_offset[:1], r"^limb_offset: must have shape \(4,\)"),
                             ("w_scale", np.ones(5), r"^w_scale: must have shape \(4,\)"),
                             ("bias", np.ones(3), r"^bias: must have shape \(4,\)"),
                             ("w_lo", lo[:, :5], r"^w_hi, w_lo: must have one shape, got \(4, 6\) and \(4, 5\)")]:
        with pytest.raises(ValueError, match=match):
            gemm.linear_w16a8(**{**args8, name: bad})
        key = name if name != "xq" else "x_hi"
        with pytest.raises(ValueError, match=match):
            gemm.linear_w16a16(**{**args16, key: bad})
    with pytest.raises(ValueError, match=r"^x_hi, x_lo: must have one shape"):
        gemm.linear_w16a16(**{**args16, "x_lo": xl[:2]})
    with pytest.raises(ValueError, match=r"^xq, w_hi: the reduction dimension K differs"):
        gemm.linear_w16a8(**{**args8, "xq": a8.q[:, :5]})
    with pytest.raises(ValueError, match=r"^acc_hh, acc_mid: must have one shape"):
        gemm.epilogue_w16a16(np.zeros((3, 4), np.int32), np.zeros((3, 5), np.int32), np.zeros((3, 4), np.int32),
                             a16.rowsum, a16.scale, w16.scale, w16.limb_offset)


def test_w8a16_and_float_baseline_check_k_and_scales(rng):
    wq = quantize_weight(rng.standard_normal((4, 3)))
    with pytest.raises(ValueError, match=r"^x, wq: the reduction dimension K differs: shapes \(2, 5\)"):
        gemm.linear_w8a16(np.ones((2, 5)), wq.q, wq.scale)
    with pytest.raises(ValueError, match=r"^w_scale: must have shape \(4,\)"):
        gemm.linear_w8a16(np.ones((2, 3)), wq.q, wq.scale[:1])
    with pytest.raises(TypeError, match=r"^x: must hold real numbers, got dtype complex128"):
        gemm.linear_w8a16(np.ones((2, 3)) + 1j, wq.q, wq.scale)
    with pytest.raises(ValueError, match=r"^x, weight: the reduction dimension K differs"):
        gemm.linear_float(np.ones((2, 5)), np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"^bias: must have shape \(4,\)"):
        gemm.linear_float(np.ones((2, 3)), np.ones((4, 3)), np.ones(1))


def test_join_limbs_refuses_limbs_out_of_int8_range():
    with pytest.raises(ValueError, match=r"^hi\[0\]: must be an int8 limb in \[-128, 127\], got 200"):
        join_limbs(np.array([200]), np.array([0]))
    with pytest.raises(ValueError, match=r"^lo\[1\]: must be an int8 limb"):
        join_limbs(np.array([0, 0], np.int16), np.array([0, -129], np.int16))
    with pytest.raises(TypeError, match=r"^hi: must be int8 limbs, got dtype float64"):
        join_limbs(np.array([1.0]), np.array([0], np.int8))
    with pytest.raises(ValueError, match=r"^hi, lo: must have one shape"):
        join_limbs(np.zeros(2, np.int8), np.zeros(3, np.int8))
    # values in range of a wider integer dtype join as int8 limbs do
    q = np.array([-32768, -1, 0, 12345, 32767], np.int16)
    hi, lo = split_limbs(q)
    np.testing.assert_array_equal(join_limbs(hi.astype(np.int64), lo.astype(np.int32)), q)


@pytest.mark.parametrize("x", [np.array([[1 + 5j, 2]]), np.array([[True, False]]), np.array([["1", "2"]]),
                               np.array([[1.0, 2.0]], dtype=object)])
def test_quantize_activations_refuses_values_that_are_not_real(x):
    with pytest.raises(TypeError, match=r"^x: must be a real float array, got"):
        quantize_activations(x)


@pytest.mark.filterwarnings("error")
def test_quantize_activations_poisons_a_float64_row_past_float32_without_a_warning():
    # the float32 rounding made inf with NumPy's "overflow encountered in cast" warning
    act = quantize_activations(np.array([[1e39, 1.0], [1.0, 2.0]]))
    assert np.isnan(act.scale[0]) and act.rowsum[0] == 0 and not act.q[0].any()
    assert act.scale[1] == np.float32(2.0) / np.float32(127)


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_apply_gelu_must_be_a_bool(rng, bad):
    """The string 'no' was true: GELU applied where the caller meant none."""
    x = rng.standard_normal((2, 8)).astype(np.float32)
    w = rng.integers(-127, 128, (3, 8)).astype(np.int8)
    with pytest.raises(TypeError, match=r"^apply_gelu: must be a bool"):
        gemm.linear_w8a16(x, w, np.ones(3, np.float32), apply_gelu=bad)
    np.testing.assert_array_equal(gemm.linear_w8a16(x, w, np.ones(3, np.float32), apply_gelu=np.bool_(False)),
                                  gemm.linear_w8a16(x, w, np.ones(3, np.float32)))
