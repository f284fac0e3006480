"""SafeMinMaxObserver (torch.ao.quantization): causal, masked non-finite values, never a bad scale."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tickgpu.quant import MinMaxObserver, check_causal  # noqa: E402
from tickgpu.quant import SafeMinMaxObserver  # noqa: E402


def _trace(series, **kw):
    obs = SafeMinMaxObserver(**kw)
    scales, zps = [], []
    for x in series:
        obs(torch.from_numpy(np.asarray(x, np.float32)))
        s, z = obs.calculate_qparams()
        scales.append(s.numpy().copy())
        zps.append(z.numpy().copy())
    return np.array(scales), np.array(zps)


def test_safe_observer_is_causal(rng):
    series = rng.standard_t(3, (40, 6)) * np.repeat(np.exp(rng.uniform(-3, 3, 4)), 10)[:, None]
    check_causal(_trace, series, cuts=6)


def test_safe_observer_matches_tickgpu_ema(rng):
    series = rng.standard_normal((30, 5)) * 3 + 1
    s, z = _trace(series)
    ours = MinMaxObserver(alpha=0.99, bits=8).trace(series)
    lo = ours["lo"][:, 0]
    hi = ours["hi"][:, 0]
    want = (np.maximum(hi, 0) - np.minimum(lo, 0)) / 255
    np.testing.assert_allclose(s[:, 0], want, rtol=1e-5)


def test_safe_observer_degenerate_inputs():
    cases = [np.full((3, 4), 2.0), np.zeros((3, 4)), 1e-8 * np.arange(12.0).reshape(3, 4),
             np.array([[np.nan] * 4, [np.inf, 1.0, -np.inf, np.nan], [3e38, -3e38, 0, 1]])]
    for series in cases:
        s, z = _trace(series)
        assert np.all(np.isfinite(s)) and np.all(s > 0), series
        assert np.all((z >= 0) & (z <= 255))
    # NaN and inf masked and counted; state from the finite values only
    obs = SafeMinMaxObserver()
    obs(torch.tensor([np.nan, np.inf, 1.0, -2.0]))
    assert int(obs.n_nonfinite) == 2 and float(obs.min_val) == -2.0 and float(obs.max_val) == 1.0


def test_tiny_ranges_keep_their_resolution():
    from torch.ao.quantization.observer import MovingAverageMinMaxObserver

    x = torch.linspace(0, 1e-8, 101)
    safe, plain = SafeMinMaxObserver(), MovingAverageMinMaxObserver()
    safe(x)
    plain(x)
    s_safe, z_safe = safe.calculate_qparams()
    s_plain, z_plain = plain.calculate_qparams()
    codes_safe = torch.quantize_per_tensor(x, float(s_safe), int(z_safe), torch.quint8).int_repr()
    codes_plain = torch.quantize_per_tensor(x, float(s_plain), int(z_plain), torch.quint8).int_repr()
    assert len(torch.unique(codes_safe)) > 100   # all 101 values distinguished
    assert len(torch.unique(codes_plain)) == 1   # torch's 1.2e-7 floor collapses them


def test_usable_in_a_qconfig():
    from torch.ao.quantization import QConfig
    from torch.ao.quantization.observer import PerChannelMinMaxObserver

    qc = QConfig(activation=SafeMinMaxObserver.with_args(averaging_constant=0.05),
                 weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
    obs = qc.activation()
    obs(torch.randn(8, 3))
    assert obs.averaging_constant == 0.05


def test_finite_float64_beyond_float32_is_clamped_not_masked():
    obs = SafeMinMaxObserver()
    obs(torch.tensor([1e39, -1e300, 2.0, float("nan")], dtype=torch.float64))
    limit = float(torch.finfo(torch.float32).max) / 2
    assert int(obs.n_nonfinite) == 1                       # only the NaN
    assert float(obs.min_val) == -limit and float(obs.max_val) == limit
    s, _ = obs.calculate_qparams()
    assert torch.isfinite(s).all() and (s > 0).all()
    for dtype in (torch.float16, torch.bfloat16, torch.int32):   # narrower inputs still work
        obs = SafeMinMaxObserver()
        obs(torch.tensor([1, -2, 3]).to(dtype))
        assert (float(obs.min_val), float(obs.max_val), int(obs.n_nonfinite)) == (-2.0, 3.0, 0)


@pytest.mark.parametrize("c", [float("nan"), 0.0, -0.1, 2.0, float("inf")])
def test_averaging_constant_outside_0_1_is_refused(c):
    with pytest.raises(ValueError, match=r"averaging_constant: must be in \(0, 1\]"):
        SafeMinMaxObserver(averaging_constant=c)


def test_complex_and_bool_batches_and_a_bool_constant_are_refused():
    """A complex batch was observed by its real parts (torch only warned); a bool one as 0 / 1."""
    obs = SafeMinMaxObserver()
    for bad in (torch.tensor([1 + 5j, -3 + 0j]), torch.tensor([True, False])):
        with pytest.raises(TypeError, match=r"^x: must be real numbers, got torch\.(complex64|bool)"):
            obs(bad)
    assert obs.min_val == float("inf") and int(obs.n_nonfinite) == 0     # nothing was observed
    with pytest.raises(ValueError, match=r"averaging_constant: must be in \(0, 1\], got True"):
        SafeMinMaxObserver(averaging_constant=True)


def test_loads_a_moving_average_observers_state(rng):
    from torch.ao.quantization.observer import MovingAverageMinMaxObserver

    plain = MovingAverageMinMaxObserver(averaging_constant=0.05)
    for x in rng.standard_normal((10, 32)) * 3 + 1:
        plain(torch.from_numpy(x.astype(np.float32)))
    safe = SafeMinMaxObserver(averaging_constant=0.05)
    safe.load_state_dict(plain.state_dict())            # strict: n_nonfinite is not required
    assert float(safe.min_val) == float(plain.min_val) and float(safe.max_val) == float(plain.max_val)
    assert int(safe.n_nonfinite) == 0
    torch.testing.assert_close(safe.calculate_qparams(), plain.calculate_qparams(), rtol=0, atol=0)
    x = torch.from_numpy((rng.standard_normal(16) * 5).astype(np.float32))
    safe(x), plain(x)                                    # and both go on from the same state
    assert float(safe.min_val) == float(plain.min_val) and float(safe.max_val) == float(plain.max_val)
    # a fresh observer's state loads as fresh
    fresh = SafeMinMaxObserver()
    fresh.load_state_dict(MovingAverageMinMaxObserver().state_dict())
    assert float(fresh.min_val) == float("inf") and float(fresh.max_val) == float("-inf")
    # its own state round-trips, n_nonfinite included
    safe(torch.tensor([float("nan"), 1.0]))
    again = SafeMinMaxObserver(averaging_constant=0.05)
    again.load_state_dict(safe.state_dict())
    assert int(again.n_nonfinite) == 1 and float(again.max_val) == float(safe.max_val)


def test_refuses_a_poisoned_or_inconsistent_state():
    from torch.ao.quantization.observer import MovingAverageMinMaxObserver

    poisoned = MovingAverageMinMaxObserver()
    poisoned(torch.tensor([1.0, float("nan"), -1.0]))     # torch's observer keeps the NaN
    assert torch.isnan(poisoned.min_val) or torch.isnan(poisoned.max_val)
    safe = SafeMinMaxObserver()
    with pytest.raises(RuntimeError, match="min_val, max_val: NaN"):
        safe.load_state_dict(poisoned.state_dict())
    assert float(safe.min_val) == float("inf")            # nothing loaded
    bad = {"min_val": torch.tensor(2.0), "max_val": torch.tensor(1.0), "eps": torch.tensor([2.0 ** -100])}
    with pytest.raises(RuntimeError, match="min_val > max_val"):
        SafeMinMaxObserver().load_state_dict(bad)
    bad = {"min_val": torch.tensor(float("-inf")), "max_val": torch.tensor(1.0), "eps": torch.tensor([2.0 ** -100])}
    with pytest.raises(RuntimeError, match="infinite bound"):
        SafeMinMaxObserver().load_state_dict(bad)
    huge = {"min_val": torch.tensor(-3e38), "max_val": torch.tensor(3e38), "eps": torch.tensor([2.0 ** -100])}
    obs = SafeMinMaxObserver()
    obs.load_state_dict(huge)
    limit = float(torch.finfo(torch.float32).max) / 2
    assert (float(obs.min_val), float(obs.max_val)) == (-limit, limit)
    s, _ = obs.calculate_qparams()
    assert torch.isfinite(s).all() and (s > 0).all()
