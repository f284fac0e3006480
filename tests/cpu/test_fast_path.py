"""The per-call fast paths give what the general path gives: the same numbers, the same errors.

`tickgpu.greeks`, `tickgpu.implied_vol` and `VolSurface.vol` answer NumPy arrays of one shape and
scalars without broadcasting or probing for GPU arrays (`_checks.host_shape`); lists, broadcast
shapes, GPU arrays and anything else take the general path. Each test here feeds the same values
once in the fast form (C-contiguous arrays) and once in a form only the general path takes (lists,
strided views, broadcast shapes) and requires identical outputs, or identical exceptions (type and
message). The GPU cases run on the mock driver (cuda_mock.py), which computes on the host.
"""
import warnings

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu import dispatch
from tickgpu.errors import BackendUnavailable
from tickgpu.finance import _checks
from tickgpu.finance.greeks import GREEK_NAMES


N = 37   # not a multiple of anything the kernels or blocks care about


def _inputs(rng, n, dtype):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype))


def _as_lists(d):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _same_greeks(a, b):
    for name in GREEK_NAMES:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)


def _same_error(f, *args_variants, **kw):
    """Every variant of the arguments raises, with one exception type and one message."""
    seen = []
    for args in args_variants:
        with pytest.raises(Exception) as e:
            f(**args, **kw)
        seen.append((type(e.value), str(e.value)))
    assert len(set(seen)) == 1, seen
    return seen[0]


# ---- host_shape ------------------------------------------------------------------------------------
def test_host_shape_agrees_with_broadcast_values(rng):
    """Where host_shape answers, broadcast_values gives the same shape; it declines everything that
    needs broadcasting, a list or an unknown type."""
    pool = [np.ones(5), np.ones(5, np.float32), np.ones((5,)), np.ones((2, 5)), np.ones(1), np.ones(()),
            np.ones((5, 1)), np.ones(4), 1.0, 2, True, np.float64(1.0), np.float32(2.0), np.bool_(True),
            [1.0] * 5, (1.0,) * 5, np.ones(10)[::2], np.asfortranarray(np.ones((2, 5)))]
    answered = 0
    for _ in range(3000):
        k = int(rng.integers(1, 8))
        values = tuple(pool[i] for i in rng.integers(0, len(pool), k))
        got = _checks.host_shape(values)
        try:
            want = _checks.broadcast_values(tuple(f"a{i}" for i in range(k)), values)
        except ValueError:
            assert got is None, values
            continue
        if got is not None:
            answered += 1
            assert got == want, values
        else:
            shapes = {np.shape(v) for v in values} - {()}
            assert len(shapes) > 1 or any(type(v) in (list, tuple) for v in values), values
    assert answered > 100


def test_host_shape_declines_non_numpy_types():
    class Boxed:
        shape = (5,)

    assert _checks.host_shape((np.ones(5), Boxed())) is None
    assert _checks.host_shape((np.ones(5), [1.0] * 5)) is None
    assert _checks.host_shape((np.ones(5), np.ones(4))) is None
    assert _checks.host_shape((np.ones(5), np.ones(1))) is None     # broadcast: general path
    assert _checks.host_shape((np.ones(()), np.ones(5), 1.0)) == (5,)
    assert _checks.host_shape((1.0, 2, True)) == ()


# ---- greeks --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_greeks_fast_inputs_match_general_path(rng, dtype):
    x = _inputs(rng, N, dtype)
    fast = tickgpu.greeks(**x, dtype=dtype, backend="cpu")
    _same_greeks(fast, tickgpu.greeks(**_as_lists(x), dtype=dtype, backend="cpu"))
    # Strided views, a broadcast (1,) array and the other dtype take the general path.
    strided = {k: np.repeat(v, 2)[::2] for k, v in x.items()}
    assert not strided["spot"].flags.c_contiguous
    _same_greeks(fast, tickgpu.greeks(**strided, dtype=dtype, backend="cpu"))
    other = np.float32 if dtype is np.float64 else np.float64
    wide = {k: v.astype(other) for k, v in x.items()}
    _same_greeks(tickgpu.greeks(**wide, dtype=dtype, backend="cpu"),
                 tickgpu.greeks(**_as_lists(wide), dtype=dtype, backend="cpu"))
    one = dict(x, rate=np.array([0.03], dtype))
    _same_greeks(tickgpu.greeks(**one, dtype=dtype, backend="cpu"),
                 tickgpu.greeks(**dict(x, rate=np.full(N, 0.03, dtype)), dtype=dtype, backend="cpu"))


@pytest.mark.parametrize("call", [True, False, 1, 0, np.bool_(False), "bool", "uint8", "int64", "list"])
def test_greeks_call_flags_and_scalars_match_general_path(rng, call):
    x = _inputs(rng, N, np.float64)
    flags = rng.random(N) < 0.5
    call = {"bool": flags, "uint8": flags.astype(np.uint8), "int64": flags.astype(np.int64),
            "list": flags.tolist()}.get(call, call) if isinstance(call, str) else call
    for div in (0.01, 0, np.float64(0.01), np.array(0.01), np.full(N, 0.01)):
        fast = tickgpu.greeks(**x, div=div, call=call, backend="cpu")
        ref = tickgpu.greeks(**_as_lists(x), div=np.broadcast_to(div, N).tolist(),
                             call=np.broadcast_to(call, N).tolist(), backend="cpu")
        _same_greeks(fast, ref)


def test_greeks_scalars_and_0d_arrays_give_0d_results():
    a = tickgpu.greeks(100.0, 95, 0.5, 0.01, 0.2, backend="cpu")
    b = tickgpu.greeks(np.array(100.0), np.array(95.0), np.float64(0.5), 0.01, np.array(0.2), backend="cpu")
    c = tickgpu.greeks([100.0], [95.0], [0.5], [0.01], [0.2], backend="cpu")
    _same_greeks(a, b)
    assert a.price.shape == () and c.price.shape == (1,)
    np.testing.assert_array_equal(a.price, c.price[0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_greeks_errors_match_general_path(rng, dtype):
    x = _inputs(rng, N, dtype)
    bad_vol = dict(x, vol=x["vol"].copy())
    bad_vol["vol"][3] = -0.25
    kind, msg = _same_error(tickgpu.greeks, bad_vol, _as_lists(bad_vol), dtype=dtype, backend="cpu", strict=True)
    assert kind is ValueError and msg == "vol[3]: must be > 0, got -0.25"
    nan_spot = dict(x, spot=x["spot"].copy())
    nan_spot["spot"][5] = np.nan
    kind, msg = _same_error(tickgpu.greeks, nan_spot, _as_lists(nan_spot), dtype=dtype, backend="cpu", strict=True)
    assert kind is ValueError and msg == "spot[5]: must be finite, got nan"
    # Without strict both give NaN there and nothing else changes.
    _same_greeks(tickgpu.greeks(**nan_spot, dtype=dtype, backend="cpu"),
                 tickgpu.greeks(**_as_lists(nan_spot), dtype=dtype, backend="cpu"))
    short = dict(x, t=x["t"][:-1])
    kind, msg = _same_error(tickgpu.greeks, short, _as_lists(short), dtype=dtype, backend="cpu")
    assert kind is ValueError and msg.startswith("shape mismatch: t has shape (36,)")
    flags = dict(x, call=np.arange(N) % 3)
    kind, msg = _same_error(tickgpu.greeks, flags, dict(_as_lists(x), call=(np.arange(N) % 3).tolist()),
                            dtype=dtype, backend="cpu")
    assert kind is ValueError and msg == "call[2]: must be True/False (or 1/0), got 2"
    kind, msg = _same_error(tickgpu.greeks, dict(x, call=np.ones(N)), dict(_as_lists(x), call=[1.0] * N),
                            dtype=dtype, backend="cpu")
    assert kind is TypeError and msg == "call: must be bool or an array of bool, got float64"
    kind, msg = _same_error(tickgpu.greeks, x, _as_lists(x), dtype=np.int32, backend="cpu")
    assert kind is TypeError and msg == "dtype: must be float64 or float32, got int32"
    kind, msg = _same_error(tickgpu.greeks, x, _as_lists(x), dtype=dtype, backend="tpu")
    assert kind is ValueError and msg == "backend: must be one of ('auto', 'cpu', 'gpu'), got 'tpu'"


# ---- implied vol and the surface -----------------------------------------------------------------------
def _same_implied_vols(args, dtype, backend):
    """Vols and statuses from arrays (the fast path) equal those from lists (the general path)."""
    v1, s1 = tickgpu.implied_vol(**args, dtype=dtype, backend=backend, return_status=True)
    v2, s2 = tickgpu.implied_vol(**_as_lists(args), dtype=dtype, backend=backend, return_status=True)
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(s1, s2)
    assert v1.dtype == v2.dtype
    return v1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_implied_vol_fast_inputs_match_general_path(rng, dtype):
    x = _inputs(rng, N, dtype)
    call = rng.random(N) < 0.5
    price = tickgpu.greeks(**x, call=call, dtype=dtype, backend="cpu").price
    args = dict(price=price, spot=x["spot"], strike=x["strike"], t=x["t"], rate=x["rate"], call=call)
    v1 = _same_implied_vols(args, dtype, "cpu")
    assert v1.dtype == dtype
    bad = dict(args, t=args["t"].copy())
    bad["t"][4] = 0.0
    kind, msg = _same_error(tickgpu.implied_vol, bad, _as_lists(bad), dtype=dtype, backend="cpu", strict=True)
    assert kind is ValueError and msg == "t[4]: must be > 0, got 0.0"
    short = dict(args, rate=args["rate"][:3])
    kind, msg = _same_error(tickgpu.implied_vol, short, _as_lists(short), dtype=dtype, backend="cpu")
    assert kind is ValueError and msg.startswith("shape mismatch: rate has shape (3,)")


def test_surface_fast_inputs_match_general_path(rng):
    s = tickgpu.VolSurface([80.0, 100.0, 120.0], [0.25, 1.0], [[0.3, 0.2, 0.25], [0.28, 0.21, 0.22]])
    k, t = rng.uniform(60, 140, N), rng.uniform(0, 2, N)
    np.testing.assert_array_equal(s.vol(k, t, backend="cpu"), s.vol(k.tolist(), t.tolist(), backend="cpu"))
    np.testing.assert_array_equal(s.variance(k, 0.5, backend="cpu"), s.variance(k.tolist(), [0.5] * N, backend="cpu"))
    t_bad = t.copy()
    t_bad[6] = -1.0
    kind, msg = _same_error(lambda **a: s.vol(**a, strict=True, backend="cpu"),
                            dict(strike=k, t=t_bad), dict(strike=k.tolist(), t=t_bad.tolist()))
    assert kind is ValueError and msg == "t[6]: must be >= 0, got -1.0"
    kind, msg = _same_error(lambda **a: s.vol(**a, backend="cpu"), dict(strike=k, t=t[:5]),
                            dict(strike=k.tolist(), t=t[:5].tolist()))
    assert kind is ValueError and msg.startswith("shape mismatch")


# ---- the GPU path on the mock driver ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gpu_fast_inputs_match_general_path(gpu_ctx, rng, dtype):
    x = _inputs(rng, N, dtype)
    call = rng.random(N) < 0.5
    _same_greeks(tickgpu.greeks(**x, call=call, dtype=dtype, backend="gpu"),
                 tickgpu.greeks(**_as_lists(x), call=call.tolist(), dtype=dtype, backend="gpu"))
    price = tickgpu.greeks(**x, call=call, dtype=dtype, backend="cpu").price
    args = dict(price=price, spot=x["spot"], strike=x["strike"], t=x["t"], rate=x["rate"], call=call)
    _same_implied_vols(args, dtype, "gpu")
    bad = dict(x, vol=x["vol"].copy())
    bad["vol"][1] = np.inf
    kind, msg = _same_error(tickgpu.greeks, bad, _as_lists(bad), dtype=dtype, backend="gpu", strict=True)
    assert kind is ValueError and msg == "vol[1]: must be finite, got inf"
    if dtype is np.float64:
        s = tickgpu.VolSurface([80.0, 100.0, 120.0], [0.25, 1.0], np.full((2, 3), 0.2))
        k, t = rng.uniform(60, 140, N), rng.uniform(0, 2, N)
        np.testing.assert_array_equal(s.vol(k, t, backend="gpu"), s.vol(k.tolist(), t.tolist(), backend="gpu"))


def test_disable_gpu_takes_effect_between_calls(gpu_ctx, monkeypatch):
    """TICKGPU_DISABLE_GPU is read on every call: set, the GPU refuses; cleared, it runs again."""
    x = dict(spot=np.full(8, 100.0), strike=np.full(8, 100.0), t=np.full(8, 1.0), rate=np.full(8, 0.01),
             vol=np.full(8, 0.2))
    assert dispatch.gpu_available()
    tickgpu.greeks(**x, backend="gpu")
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    assert not dispatch.gpu_available()
    with pytest.raises(BackendUnavailable):
        tickgpu.greeks(**x, backend="gpu")
    assert dispatch.choose("greeks", 1 << 20, "auto") == "cpu"
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "")     # empty: not set, as os.environ.get read it
    assert dispatch.gpu_available()
    monkeypatch.delenv("TICKGPU_DISABLE_GPU")
    assert dispatch.gpu_available()
    tickgpu.greeks(**x, backend="gpu")


# ---- quantized models' input check ------------------------------------------------------------------------
def test_quant_input_check_finds_the_first_bad_element(rng):
    from tickgpu.quant import QuantLinear

    lin = QuantLinear(rng.standard_normal((4, 6)))
    x = rng.standard_normal((3, 6)).astype(np.float32)
    for bad, want in ((np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")):
        y = x.copy()
        y[1, 2] = bad
        y[2, 0] = np.nan
        y[1, 4] = -bad
        # No floating-point warning on the way (one would turn into the error under -W error).
        with warnings.catch_warnings(), pytest.raises(ValueError) as e:
            warnings.simplefilter("error")
            lin(y)
        msg = str(e.value)
        assert msg.startswith("x[1, 2]: must be finite, got ") and f"{want})" in msg, msg
    # Finite values whose products overflow float32 pass the input check, as each one is finite;
    # the result's overflow is then named (check=False: inf or NaN there).
    big = np.full((2, 6), 3e38, np.float32)
    with warnings.catch_warnings(), pytest.raises(ValueError, match=r"^output\[0, \d\]: not finite in float32"):
        warnings.simplefilter("error")
        lin(big)
    assert not np.isfinite(lin(big, check=False)).all()
    np.testing.assert_array_equal(lin(x), lin(x.astype(np.float64)))
    np.testing.assert_array_equal(lin(x), lin(x.tolist()))
    np.testing.assert_array_equal(lin(np.arange(6)), lin(np.arange(6.0)))
    assert lin(np.zeros((0, 6), np.float32)).shape == (0, 4)
    with pytest.raises(TypeError, match="real float array, got bool"):
        lin(np.ones(6, bool))
    half = QuantLinear(rng.standard_normal((4, 6)), scheme="w8a16")
    y = x.copy()
    y[2, 3] = -7e4
    with pytest.raises(ValueError, match=r"x\[2, 3\]: exceeds float16's range"):
        half(y)
    assert half(np.full((2, 6), 65504.0, np.float32)).shape == (2, 4)


# ---- the CPU calls' per-thread argument frames ---------------------------------------------------------------
def test_cpu_calls_from_many_threads_match_one_thread(rng):
    """Each thread binds into frames of its own (the C call releases the GIL): concurrent calls
    with different inputs each get their own results."""
    import threading

    jobs = [(_inputs(rng, int(rng.integers(1, 300)), dt), dt) for dt in (np.float64, np.float32) for _ in range(4)]
    want = [tickgpu.greeks(**x, dtype=dt, backend="cpu") for x, dt in jobs]
    want_iv = [tickgpu.implied_vol(g.price, x["spot"], x["strike"], x["t"], x["rate"], dtype=dt, backend="cpu")
               for g, (x, dt) in zip(want, jobs)]
    errors = []

    def work(i):
        x, dt = jobs[i]
        try:
            for _ in range(200):
                _same_greeks(tickgpu.greeks(**x, dtype=dt, backend="cpu"), want[i])
                np.testing.assert_array_equal(
                    tickgpu.implied_vol(want[i].price, x["spot"], x["strike"], x["t"], x["rate"], dtype=dt,
                                        backend="cpu"), want_iv[i])
        except Exception as e:   # reported below, with the job
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_frames_are_not_shared_by_nested_calls():
    from tickgpu.finance import greeks as g

    a = g.take_frame()
    b = g.take_frame()          # a call starting while `a` is bound (a signal handler's) gets another
    assert a is not b
    g.give_frame(b)
    g.give_frame(a)
    assert g.take_frame() is a  # and frames are reused after
    g.give_frame(a)
