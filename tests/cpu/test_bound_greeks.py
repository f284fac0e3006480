"""tickgpu.runtime.bind_greeks on the mock driver: the staged path's plan and graph, bound once."""
import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.finance.greeks import GREEK_NAMES
from cuda_mock import expected_greeks   # tests/cpu is on sys.path (conftest.py)

# gpu_ctx: tests/cpu/conftest.py (the runtime on the mock driver, 64 staging elements)


def _chain(rng, n, dtype):
    return [rng.uniform(80, 120, n).astype(dtype), rng.uniform(80, 120, n).astype(dtype),
            rng.uniform(0.1, 2, n).astype(dtype), rng.uniform(0, 0.05, n).astype(dtype),
            rng.uniform(0.1, 0.5, n).astype(dtype), rng.uniform(0, 0.03, n).astype(dtype), rng.random(n) < 0.5]


def _emulated(x, dtype):
    """What the mock's greeks kernel computes from these inputs: its closed form, independent of any path."""
    want = expected_greeks(*(np.asarray(v, np.float64) for v in x[:6]), call=np.asarray(x[6]) != 0)
    return {k: v.astype(dtype) for k, v in want.items()}


def _same(a, b):
    for name in GREEK_NAMES:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 5, 16, 64])
def test_bound_call_equals_greeks_and_follows_in_place_updates(gpu_ctx, rng, dtype, n):
    x = _chain(rng, n, dtype)
    tick = rt.bind_greeks(*x, dtype=dtype)
    for _ in range(3):
        got = tick()
        assert got.price.shape == (n,) and got.price.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 2e-6
        for name, want in _emulated(x, dtype).items():
            np.testing.assert_allclose(getattr(got, name), want, rtol=tol, atol=tol, err_msg=name)
        _same(got, tickgpu.greeks(*x, dtype=dtype, backend="gpu"))
        for a, b in zip(x, _chain(rng, n, dtype)):
            a[:] = b                      # the loop's arrays, updated in place


def test_bound_calls_interleave_with_greeks_on_the_same_plan(gpu_ctx, rng):
    """A binding writes every input slot of the size's plan: a tickgpu.greeks call of single values
    on that plan afterwards must not take the slots for what it left there."""
    n = 16
    x = _chain(rng, n, np.float64)
    tick = rt.bind_greeks(*x)
    scalars = (100.0, x[1], 1.0, 0.01, 0.2, 0.0, True)
    want_tick = tickgpu.greeks(*x, backend="gpu")
    first = tickgpu.greeks(*scalars, backend="gpu")
    _same(tick(), want_tick)
    _same(tickgpu.greeks(*scalars, backend="gpu"), first)
    _same(tick(), want_tick)


def test_bound_call_survives_scratch_moving(gpu_ctx, rng):
    x = _chain(rng, 16, np.float64)
    tick = rt.bind_greeks(*x)
    before, plan = tick(), tick._plan
    gpu_ctx.bundle.scratch_epoch += 1          # as when a scratch block is replaced
    _same(tick(), before)
    # The staged path re-made the size's plan (its kernel arguments name the scratch); the binding
    # follows it rather than replaying the old one.
    assert tick._plan is not plan and tick._plan.epoch == gpu_ctx.bundle.scratch_epoch


def test_bad_bindings_say_which_input_and_why(gpu_ctx, rng):
    x = _chain(rng, 8, np.float64)
    with pytest.raises(TypeError, match="bind_greeks: vol must be of dtype float64, got float32"):
        rt.bind_greeks(*x[:4], x[4].astype(np.float32), *x[5:])
    with pytest.raises(TypeError, match="bind_greeks: call must be of dtype bool or uint8, got int64"):
        rt.bind_greeks(*x[:6], x[6].astype(np.int64))
    with pytest.raises(TypeError, match="bind_greeks: rate must be a NumPy array or a single number, got list"):
        rt.bind_greeks(*x[:3], [0.01] * 8, *x[4:])
    with pytest.raises(TypeError, match="bind_greeks: at least one input must be a NumPy array"):
        rt.bind_greeks(100.0, 100.0, 1.0, 0.01, 0.2, 0.0, True)
    with pytest.raises(ValueError, match="bind_greeks: strike must be one-dimensional and C-contiguous"):
        rt.bind_greeks(x[0], np.repeat(x[1], 2)[::2], *x[2:])
    with pytest.raises(ValueError, match="bind_greeks: t has 7 elements, spot has 8"):
        rt.bind_greeks(*x[:2], x[2][:7], *x[3:])
    big = _chain(rng, 65, np.float64)
    with pytest.raises(ValueError, match="spot has 65 elements; a binding takes 1 to 64"):
        rt.bind_greeks(*big)
    empty = [a[:0] for a in x]
    with pytest.raises(ValueError, match="spot has 0 elements"):
        rt.bind_greeks(*empty)


# ---- bind_implied_vol ------------------------------------------------------------------------------
def _quotes(rng, n, dtype):
    return [rng.uniform(1, 20, n).astype(dtype), rng.uniform(80, 120, n).astype(dtype),
            rng.uniform(80, 120, n).astype(dtype), rng.uniform(0.1, 2, n).astype(dtype),
            rng.uniform(0, 0.05, n).astype(dtype), rng.uniform(0, 0.03, n).astype(dtype), rng.random(n) < 0.5]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 5, 16, 64])
def test_bound_implied_vol_equals_implied_vol_and_follows_in_place_updates(gpu_ctx, rng, dtype, n):
    from cuda_mock import expected_iv

    x = _quotes(rng, n, dtype)
    ivs = rt.bind_implied_vol(*x, dtype=dtype)
    assert "BoundImpliedVol" in repr(ivs) and ivs.n == n
    for _ in range(3):
        vol, status = ivs()
        assert vol.shape == (n,) and vol.dtype == dtype and status.shape == (n,) and status.dtype == np.int8
        want_vol, want_status = expected_iv(*(np.asarray(v, np.float64) for v in x[:6]), call=x[6])
        tol = 1e-12 if dtype == np.float64 else 2e-6
        np.testing.assert_allclose(vol, want_vol.astype(dtype), rtol=tol, atol=tol)
        np.testing.assert_array_equal(status, want_status)
        g_vol, g_status = tickgpu.implied_vol(*x, dtype=dtype, backend="gpu", return_status=True)
        np.testing.assert_array_equal(vol, g_vol)
        np.testing.assert_array_equal(status, g_status)
        for a, b in zip(x, _quotes(rng, n, dtype)):
            a[:] = b                      # the loop's arrays, updated in place


def test_bound_greeks_and_implied_vols_share_nothing_they_should_not(gpu_ctx, rng):
    """A greeks binding and an implied-vol binding of one size, called in turn with the ops on
    single values in between, each keep giving their own answers."""
    n = 16
    g_in, iv_in = _chain(rng, n, np.float64), _quotes(rng, n, np.float64)
    tick, ivs = rt.bind_greeks(*g_in), rt.bind_implied_vol(*iv_in)
    want_g = tickgpu.greeks(*g_in, backend="gpu")
    want_iv = tickgpu.implied_vol(*iv_in, backend="gpu", return_status=True)
    for _ in range(2):
        _same(tick(), want_g)
        tickgpu.implied_vol(5.0, 100.0, iv_in[2], 1.0, 0.01, backend="gpu")
        vol, status = ivs()
        np.testing.assert_array_equal(vol, want_iv[0])
        np.testing.assert_array_equal(status, want_iv[1])


def test_bad_implied_vol_bindings_say_which_input_and_why(gpu_ctx, rng):
    x = _quotes(rng, 8, np.float64)
    with pytest.raises(TypeError, match="bind_implied_vol: price must be of dtype float64, got float32"):
        rt.bind_implied_vol(x[0].astype(np.float32), *x[1:])
    with pytest.raises(TypeError, match="bind_implied_vol: rate must be a NumPy array or a single number, got str"):
        rt.bind_implied_vol(*x[:4], "0.01", *x[5:])
    with pytest.raises(ValueError, match="bind_implied_vol: strike has 7 elements, price has 8"):
        rt.bind_implied_vol(*x[:2], x[2][:7], *x[3:])
    big = _quotes(rng, 65, np.float64)
    with pytest.raises(ValueError, match=r"price has 65 elements; a binding takes 1 to 64 \(tickgpu.implied_vol"):
        rt.bind_implied_vol(*big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_single_values_are_fixed_at_binding(gpu_ctx, rng, dtype):
    """Numbers bind as arrays of their own: the results are tickgpu's with the same single values,
    to the bit, while the arrays among the inputs are still read at each call."""
    n = 24
    spot, strike, t = (rng.uniform(80, 120, n).astype(dtype), rng.uniform(80, 120, n).astype(dtype),
                       rng.uniform(0.1, 2, n).astype(dtype))
    tick = rt.bind_greeks(spot, strike, t, 0.03, np.float64(0.2), 0.0, True, dtype=dtype)
    for _ in range(2):
        _same(tick(), tickgpu.greeks(spot, strike, t, 0.03, 0.2, 0.0, True, dtype=dtype, backend="gpu"))
        spot[:] = rng.uniform(80, 120, n)
    price = rng.uniform(1, 20, n).astype(dtype)
    ivs = rt.bind_implied_vol(price, 100.0, strike, t, 0.03, 0.01, False, dtype=dtype)
    want = tickgpu.implied_vol(price, 100.0, strike, t, 0.03, 0.01, False, dtype=dtype, backend="gpu",
                               return_status=True)
    vol, status = ivs()
    np.testing.assert_array_equal(vol, want[0])
    np.testing.assert_array_equal(status, want[1])


@pytest.mark.parametrize("call,err", [(2, ValueError), (-1, ValueError), (np.int64(3), ValueError),
                                      (np.float32(0.5), TypeError), (1.0, TypeError)])
def test_a_single_call_flag_is_a_bool_as_greeks_takes_it(gpu_ctx, call, err):
    s = np.linspace(80, 120, 5)
    with pytest.raises(err, match=r"^bind_greeks: call: must be"):
        rt.bind_greeks(s, 100.0, 1.0, 0.03, 0.2, 0.01, call)
    with pytest.raises(err, match=r"^bind_implied_vol: call: must be"):
        rt.bind_implied_vol(np.linspace(1, 10, 5), 100.0, s, 1.0, 0.03, 0.01, call)
    for ok in (1, 0, True, np.bool_(False)):
        got = rt.bind_greeks(s, 100.0, 1.0, 0.03, 0.2, 0.01, ok)()
        _same(got, tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, 0.01, bool(ok), backend="gpu"))


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "array"])
@pytest.mark.parametrize("n", [5, 40, 200])   # a tick, a larger tick bucket, a pipeline (64 staged)
def test_gpu_paths_refuse_booleans_as_numbers(gpu_ctx, value, n):
    """The staged tick, the pipeline and the bindings refuse a boolean in a number's place, as the
    CPU backend does, naming it; call flags take them."""
    s = np.linspace(80, 120, n)
    v = np.arange(n) % 2 == 0 if isinstance(value, str) else value
    for backend in ("cpu", "gpu"):
        with pytest.raises(TypeError, match=r"^div: must be a real number"):
            tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, v, backend=backend)
        with pytest.raises(TypeError, match=r"^rate: must be a real number"):
            tickgpu.implied_vol(np.full(n, 5.0), s, 100.0, 1.0, v, 0.01, backend=backend)
    if n <= 64:
        with pytest.raises(TypeError, match=r"^bind_greeks: div:? must be"):
            rt.bind_greeks(s, 100.0, 1.0, 0.03, 0.2, v, True)
    got = tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, 0.0, v, backend="gpu")
    _same(got, tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, 0.0, np.broadcast_to(np.asarray(v), (n,)).astype(bool),
                              backend="gpu"))


@pytest.mark.parametrize("value", [np.timedelta64(100, "ns"), np.datetime64(1, "D")])
def test_gpu_path_refuses_dates_as_the_cpu_does(gpu_ctx, value):
    for backend in ("cpu", "gpu"):
        with pytest.raises(TypeError, match=r"^strike: must be a real number"):
            tickgpu.greeks(np.linspace(80, 120, 5), value, 1.0, 0.03, 0.2, backend=backend)


@pytest.mark.parametrize("scalar", [np.float16(0.25), np.longdouble(0.25), np.float32(0.25), np.int8(1),
                                    np.uint16(1), np.uint64(1), np.int16(1)])
def test_single_values_of_any_real_numpy_type_bind(gpu_ctx, rng, scalar):
    """A single value may be any real NumPy scalar, as tickgpu.greeks takes it; complex is refused."""
    n = 12
    s, k = rng.uniform(80, 120, n), rng.uniform(80, 120, n)
    want = tickgpu.greeks(s, k, 1.0, 0.03, scalar, 0.0, True, backend="gpu")
    _same(rt.bind_greeks(s, k, 1.0, 0.03, scalar, 0.0, True)(), want)
    _same(want, tickgpu.greeks(s, k, 1.0, 0.03, float(scalar), 0.0, True, backend="gpu"))
    price = rng.uniform(1, 20, n)
    vol, status = rt.bind_implied_vol(price, 100.0, k, scalar, 0.03, 0.0, True)()
    want = tickgpu.implied_vol(price, 100.0, k, float(scalar), 0.03, 0.0, True, backend="gpu", return_status=True)
    np.testing.assert_array_equal(vol, want[0])
    np.testing.assert_array_equal(status, want[1])
    with pytest.raises(TypeError, match="vol"):
        rt.bind_greeks(s, k, 1.0, 0.03, np.complex128(0.2), 0.0, True)


def test_a_dropped_binding_and_its_arrays_are_freed(gpu_ctx, rng):
    """The runner whose staging a binding's call filled does not keep the binding (nor its arrays)."""
    import gc
    import weakref

    x = _chain(rng, 16, np.float64)
    tick = rt.bind_greeks(*x)
    tick()
    gone = weakref.ref(tick)
    del tick
    gc.collect()
    assert gone() is None
    x[0].resize(8, refcheck=True)                   # nothing else refers to the array now


def test_single_values_beyond_float64_are_named(gpu_ctx, rng):
    x = _chain(rng, 8, np.float64)
    with pytest.raises(ValueError, match="bind_greeks: rate: an integer beyond float64's range"):
        rt.bind_greeks(*x[:3], 10 ** 400, *x[4:])


@pytest.mark.parametrize("bad", [0, 8, 17, -16, 1.5, True, "64.0", "x"])
def test_staging_elements_must_be_a_multiple_of_16(tmp_path, bad):
    from cuda_mock import MockDriver, default_entries, write_bundle

    with pytest.raises(ValueError, match="staging_elements .* must be a positive multiple of 16"):
        rt.init(driver=MockDriver(), bundle_dir=write_bundle(tmp_path / "bundle", default_entries()),
                staging_elements=bad)
    rt.reset()
