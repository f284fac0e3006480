"""Every GPU operation against the CPU backend, on the GPU machine (``pytest -m gpu``).

The CPU backend is itself tested against QuantLib, vollib and the oracle files; here the GPU
results must agree with it on fresh random inputs and at the edges: float64 within 1e-12 and
float32 within 1e-5, relative (with the same bound, scaled by the array's magnitude, for
elements near zero where relative error is meaningless). Every kernel variant in the bundle is
run, as are NumPy, CuPy and PyTorch inputs, non-contiguous and misaligned ones.
"""
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.special import erfc

import tickgpu
import tickgpu.runtime as rt
# tests/ (pyproject: pythonpath)
from greeks_tolerance import cancelling_scale, check_tail_prices_never_negative, tail_conditioning

pytestmark = pytest.mark.gpu

GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
SIZES = (1, 17, 2**20 + 3)


@pytest.fixture(scope="module")
def ctx():
    # The shipped bundle, whatever TICKGPU_BUNDLE says (the plumbing tests use their own).
    c = rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle")
    rt.warmup()
    yield c
    rt.reset()


def _tol(dtype):
    return 1e-12 if np.dtype(dtype) == np.float64 else 1e-5


def _agree(gpu, cpu, dtype, what, floor=None, each=False, kappa=None):
    """Within tol relative, or tol times the array's largest magnitude (or, where given, tol times
    ``floor``: the element's own resolution, for results that cancel; see cancelling_scale).
    ``each``: element by element, tol times the element's own magnitude (or its floor) in place of
    the array's largest: for arrays of edge cases whose magnitudes span hundreds of decades.
    ``kappa``: per element, how much the rounding of d1 is magnified in the result (see
    tail_conditioning); 8 ulps of the working precision times it are allowed besides, relative."""
    gpu, cpu = np.asarray(gpu, dtype=np.float64), np.asarray(cpu, dtype=np.float64)
    assert gpu.shape == cpu.shape, what
    np.testing.assert_array_equal(np.isnan(gpu), np.isnan(cpu), err_msg=f"{what}: NaN positions differ")
    finite = np.isfinite(cpu)
    np.testing.assert_array_equal(gpu[~finite & ~np.isnan(cpu)], cpu[~finite & ~np.isnan(cpu)], err_msg=what)
    if finite.any():
        tol = _tol(dtype)
        scale = np.abs(cpu[finite]) if each else np.max(np.abs(cpu[finite]))
        if floor is not None:
            scale = np.maximum(scale, np.broadcast_to(np.asarray(floor, dtype=np.float64), cpu.shape)[finite])
        g, c = gpu[finite], cpu[finite]
        allowed = tol * np.abs(c) + tol * scale
        if kappa is not None:
            ulp = np.finfo(dtype).eps / 2
            allowed = allowed + 8 * ulp * np.broadcast_to(kappa, cpu.shape)[finite] * np.abs(c)
        bad = np.flatnonzero(~(np.abs(g - c) <= allowed))
        assert bad.size == 0, (f"{what}: {bad.size} of {c.size} beyond rtol {tol} (atol {tol} x scale): "
                               f"gpu {g[bad[:5]]}, cpu {c[bad[:5]]}")


def _bsm(rng, n, dtype):
    return dict(spot=rng.uniform(20, 200, n).astype(dtype), strike=rng.uniform(20, 200, n).astype(dtype),
                t=rng.uniform(0.001, 3, n).astype(dtype), rate=rng.uniform(-0.01, 0.08, n).astype(dtype),
                vol=rng.uniform(0.03, 1.2, n).astype(dtype), div=rng.uniform(0, 0.05, n).astype(dtype),
                call=rng.random(n) < 0.5)


def _edges(dtype):
    """T -> 0, t = 0 (at, in, out of the money), deep OTM/ITM (|d1| up to 37), tiny and huge vol,
    |d1| ~ 1e159 (d1^2 overflows; a call and a put), NaN, bad inputs; t = -0.0, S/K far from 1,
    an infinite d1, a huge sigma, discounting out of range (NaN) and large r t, q t in range, a
    subnormal t with positive total variance; each side of the fast path's bounds on S, sigma, t
    and r t (float64 and float32)."""
    below = lambda x, bits: x * (1 - 2.0**-bits)   # noqa: E731 - the float just under a power of two
    spot = [100, 100, 100, 100, 100, 1, 1000, 100, 100, np.nan, 100, -1, 100, 100, 42, 1, 100, 100,
            110, 90, 100, 1e-15, 1, 6.2, 1e300, 1e6, 100, 100, 100, 100, 100, 100, 100, 100,
            2.0**50, below(2.0**50, 53), 100, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    strike = [100, 90, 110, 100, 100, 1000, 1, 100, 100, 100, np.nan, 100, 0, 100, 1, 40.8, 110, 110,
              100, 100, 100, 100, 100, 100, 1e-10, 1, 100, 100, 100, 100, 100, 100, 100, 100,
              2.0**50, below(2.0**50, 53), 100, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    t = [1e-12, 0, 0, 0, 1e-6, 1, 1, 5, 1, 1, 1, 1, 1, -1, 1, 1, 1, 1,
         -0.0, -0.0, -0.0, 1, 1, 0.5, 1, 1, 1, 1, 1, 1, 2, 2, 1e-310, 1e-40,
         1, 1, 1, 1, 1, 1, 2.0**1000, below(2.0**1000, 53), 2.0**-100, below(2.0**-100, 24), 2, 2]
    vol = [0.2, 0.2, 0.2, 0.2, 1e-8, 0.2, 0.2, 5.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1, 1e-160, 1e-160,
           0.2, 0.2, 0.2, 0.2, 0.5, 0.3, 0.2, 1e-308, 1e200, 0.2, 0.2, 0.2, 0.2, 0.2, 1.0, 1.0,
           0.2, 0.2, 2.0**-500, below(2.0**-500, 53), 2.0**-60, below(2.0**-60, 24), 2.0**-499, 2.0**-499, 1, 1,
           0.2, 0.2]
    n = len(spot)
    rate = ([0.03] * 26 + [0.05, -1000.0, 800.0, 0.0, 200.0, 30.0, 0.03, 0.03]
            + [0.01, 0.01, 0, 0, 0, 0, 0, 0, 0, 0, 175.0, 175.0 * (1 + 2.0**-52)])
    div = [0.01] * 26 + [0.0, 0.0, 0.0, -1000.0, 0.0, 25.0, 0.01, 0.01] + [0.0] * 12
    with np.errstate(over="ignore"):       # float32: 2^1000 is inf (bad input, NaN out)
        return dict(spot=np.array(spot, dtype), strike=np.array(strike, dtype), t=np.array(t, dtype),
                    rate=np.array(rate, dtype), vol=np.array(vol, dtype), div=np.array(div, dtype),
                    call=np.arange(n) % 2 == 0)


def _greeks_both(args, dtype):
    g = tickgpu.greeks(**args, dtype=dtype, backend="gpu")
    c = tickgpu.greeks(**{k: (np.asarray(v) if not rt.is_device_array(v) else _to_host(v)) for k, v in args.items()},
                       dtype=dtype, backend="cpu")
    return g, c


def _to_host(x):
    if type(x).__module__.split(".")[0] in ("jax", "jaxlib"):
        return np.asarray(x)
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    from tickgpu.runtime.arrays import DeviceArray

    assert isinstance(x, DeviceArray)
    return x.get()


# ---- greeks -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", SIZES)
def test_greeks_numpy(ctx, rng, dtype, n):
    args = _bsm(rng, n, dtype)
    g, c = _greeks_both(args, dtype)
    floors = cancelling_scale(args)
    kappa = tail_conditioning(args)
    for name in GREEKS:
        assert isinstance(getattr(g, name), np.ndarray) and getattr(g, name).dtype == dtype
        _agree(getattr(g, name), getattr(c, name), dtype, f"{name} n={n}", floors.get(name), kappa=kappa)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", (1, 17, 1024))
def test_bound_greeks_follow_their_arrays(ctx, rng, dtype, n):
    """rt.bind_greeks: the CPU backend's greeks of the arrays' contents at each call, and the same
    bits as tickgpu.greeks on the GPU."""
    args = _bsm(rng, n, dtype)
    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    tick = rt.bind_greeks(*(args[k] for k in names), dtype=dtype)
    for _ in range(2):
        g, c = _greeks_both(args, dtype)
        b = tick()
        floors = cancelling_scale(args)
        kappa = tail_conditioning(args)
        for name in GREEKS:
            np.testing.assert_array_equal(getattr(b, name), getattr(g, name), err_msg=f"bound {name} n={n}")
            _agree(getattr(b, name), getattr(c, name), dtype, f"bound {name} n={n}", floors.get(name), kappa=kappa)
        for k, v in _bsm(rng, n, dtype).items():
            args[k][:] = v


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bound_greeks_with_single_values(ctx, rng, dtype):
    """Numbers bound as fixed values: tickgpu.greeks's bits with the same numbers, and the CPU
    backend's greeks, while the arrays are read at each call."""
    n = 300
    args = _bsm(rng, n, dtype)
    args.update(rate=0.02, div=0.0, call=False)
    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    tick = rt.bind_greeks(*(args[k] for k in names), dtype=dtype)
    for _ in range(2):
        g, c = _greeks_both(args, dtype)
        b = tick()
        for name in GREEKS:
            np.testing.assert_array_equal(getattr(b, name), getattr(g, name), err_msg=f"bound {name}")
            _agree(getattr(b, name), getattr(c, name), dtype, f"bound {name}", cancelling_scale(args).get(name))
        args["spot"][:] = rng.uniform(50, 150, n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_greeks_edges_and_broadcast(ctx, rng, dtype):
    edges = _edges(dtype)
    g, c = _greeks_both(edges, dtype)
    floors, kappa = cancelling_scale(edges), tail_conditioning(edges)
    for name in GREEKS:
        _agree(getattr(g, name), getattr(c, name), dtype, f"edge {name}", floors.get(name), each=True, kappa=kappa)
    args = dict(spot=rng.uniform(80, 120, (5, 1)), strike=rng.uniform(80, 120, (1, 7)), t=0.5, rate=0.02,
                vol=0.25, div=0.0, call=False)
    g, c = _greeks_both(args, dtype)
    assert g.price.shape == (5, 7)
    for name in GREEKS:
        _agree(getattr(g, name), getattr(c, name), dtype, f"broadcast {name}")
    g, c = _greeks_both(dict(spot=100.0, strike=105.0, t=0.3, rate=0.01, vol=0.3, div=0.0, call=True), dtype)
    assert g.price.shape == ()
    _agree(g.price, c.price, dtype, "scalar price")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("t", [1e-40, 1e-12, 1e-8, 1 / 365])
def test_greeks_at_the_money_is_at_the_money(ctx, dtype, t):
    """S == K: ln(S/K) is exactly 0, as on the CPU, so near expiry delta is 1/2 and gamma huge (not
    the limits of an option an ulp off the money). Every integer strike to 1,000 and every cent to
    50: for ~15% of them S times a rounded reciprocal of K is 1 - 2^-53 (49, 98, 103, ...)."""
    K = np.concatenate([np.arange(1.0, 1001.0), np.round(np.arange(1.0, 50.0, 0.01), 2)]).astype(dtype)
    g, c = _greeks_both(dict(spot=K, strike=K, t=t, rate=0.0, vol=0.2, div=0.0, call=True), dtype)
    tol = _tol(dtype)
    for name in ("delta", "gamma", "vega", "vanna", "volga", "charm"):
        np.testing.assert_allclose(getattr(g, name), getattr(c, name), rtol=4 * tol, atol=0, err_msg=f"t={t} {name}")
    # Price and theta are differences of two legs of ~K/2 each: known to the legs' rounding.
    for name, leg in (("price", K), ("theta", K * 0.2 / np.sqrt(np.float64(t)))):
        assert np.all(np.abs(getattr(g, name) - getattr(c, name)) <= 4 * tol * leg), (t, name)


@pytest.mark.parametrize("n", (5, 1024, 300_001))   # a mapped tick, a copied tick, a pipeline
def test_booleans_are_not_numbers_on_the_gpu(ctx, n):
    """``greeks(S, K, t, r, vol, False)`` meant as a put: refused naming div, as on the CPU, from
    NumPy and from a GPU array's call (a host value mixed in); the call flag takes booleans."""
    s = np.linspace(80, 120, n)
    for v in (False, np.bool_(True), np.arange(n) % 2 == 0):
        with pytest.raises(TypeError, match=r"^div: must be a real number"):
            tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, v, backend="gpu")
        with pytest.raises(TypeError, match=r"^rate: must be a real number"):
            tickgpu.implied_vol(np.full(n, 5.0), s, 100.0, 1.0, v, 0.0, backend="gpu")
    for name, to_device in _device_libs()[:1]:
        with pytest.raises(TypeError, match=r"^div: must be a real number"):
            tickgpu.greeks(to_device(s), 100.0, 1.0, 0.03, 0.2, False)
    got = tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, 0.0, np.bool_(False), backend="gpu")
    _agree(got.price, tickgpu.greeks(s, 100.0, 1.0, 0.03, 0.2, 0.0, False, backend="cpu").price, np.float64,
           "put price")


def _odd_value(rng, n, base):
    """One argument of a call as a careless or hostile caller might pass it, around a valid array
    `base` of n: bad elements (NaN, infinities, zeros of both signs, negatives, subnormals, huge),
    another length or a shape that does not broadcast, an empty array, integers (huge ones too),
    and what is not a number at all."""
    kind = int(rng.integers(16))
    if kind <= 3:
        return base
    if kind == 4:
        x = base.copy()
        idx = rng.integers(0, n, max(1, n // 4))
        with np.errstate(over="ignore"):   # float32: 1e308 is inf
            x[idx] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 5e-324, 1e308, 3e38, 1e-45],
                                idx.size)
        return x
    if kind == 5:
        return float(rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, -2.5, 5e-324, 1e308, 1e-40]))
    if kind == 6:
        return base[: max(0, n - 1)] if n > 1 else np.ones(3)      # another length
    if kind == 7:
        return base.reshape(n, 1) if rng.integers(2) else np.ones((2, 3))
    if kind == 8:
        return np.empty(0)
    if kind == 9:
        return np.round(base).astype(np.int64)
    if kind == 10:
        return (10**400, 2**63, -(2**63), 2**64)[int(rng.integers(4))]
    if kind == 11:
        return ("100", None, 1 + 2j, [1.0, "x"], object())[int(rng.integers(5))]
    if kind == 12:
        return np.array(base, dtype=object)
    if kind == 13:
        return np.float16(base[0])
    if kind == 14:
        return base.astype(np.float32)
    return np.array([])[:, None]


def _outcome(fn):
    """What a call gave: ("raised", type, message) or ("returned", value)."""
    try:
        return ("returned", fn())
    except Exception as e:   # noqa: BLE001 - the exception itself is the outcome compared
        return ("raised", type(e), str(e))


def test_odd_arguments_meet_the_same_answer_on_both_backends(ctx, rng):
    """Arguments with bad elements, wrong shapes, wrong types and out-of-range integers, on
    `tickgpu.greeks` and `tickgpu.implied_vol` (strict and not, both dtypes): the GPU backend raises
    what the CPU backend raises, with the same message, or returns what it returns (NaN where it
    gives NaN, the same statuses, values within the usual tolerance)."""
    cases = {"raised": 0, "returned": 0}
    for case in range(400):
        dtype = (np.float64, np.float32)[int(rng.integers(2))]
        strict = bool(rng.random() < 0.3)
        n = int((1, 3, 17, 1024)[rng.integers(4)])
        iv = bool(rng.integers(2))
        base = _iv_inputs(rng, n, dtype) if iv else _bsm(rng, n, dtype)
        names = list(base)
        args = {k: (base[k] if k == "call" or rng.random() < 0.6 else _odd_value(rng, n, base[k])) for k in names}
        if iv:
            call = lambda b: tickgpu.implied_vol(**args, dtype=dtype, backend=b, strict=strict,   # noqa: E731
                                                 return_status=True)
        else:
            call = lambda b: tickgpu.greeks(**args, dtype=dtype, backend=b, strict=strict)   # noqa: E731
        with np.errstate(all="ignore"):
            c = _outcome(lambda: call("cpu"))
            g = _outcome(lambda: call("gpu"))
        what = f"case {case} {'iv' if iv else 'greeks'} {np.dtype(dtype).name} strict={strict} " + \
            str({k: (type(v).__name__, getattr(v, "shape", None)) for k, v in args.items()})
        assert g[0] == c[0], f"{what}: gpu {g[:3]} cpu {c[:3]}"
        cases[c[0]] += 1
        if c[0] == "raised":
            assert g[1:] == c[1:], what
            continue
        if iv:
            # statuses and vols as every implied-vol test compares them: the vol to what its
            # price's rounding allows (an ill-conditioned vol has fewer digits to agree on)
            shape = np.shape(c[1][0])
            read = {k: np.broadcast_to(np.asarray(v).astype(bool if k == "call" else dtype), shape)
                    for k, v in args.items()}
            _iv_agree(read, g[1], c[1], dtype, what)
        else:
            for name in GREEKS:
                a, b = np.asarray(getattr(g[1], name)), np.asarray(getattr(c[1], name))
                assert a.shape == b.shape and a.dtype == b.dtype, (what, name)
                np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what} {name}")
    assert cases["raised"] >= 40 and cases["returned"] >= 40, cases


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_prices_far_out_of_the_money_are_never_negative_on_the_gpu(ctx, rng, dtype):
    """As on the CPU: a price whose two tails round below zero is 0, never negative nor -0.0, and
    implied_vol takes every one of them."""
    check_tail_prices_never_negative(rng, dtype, "gpu")


def test_greeks_non_contiguous_numpy(ctx, rng):
    a = _bsm(rng, 2000, np.float64)
    strided = {k: (v[::2] if k != "call" else v[::2]) for k, v in a.items()}
    g, c = _greeks_both(strided, np.float64)
    _agree(g.vega, c.vega, np.float64, "strided vega")


def test_every_variant(ctx, rng, monkeypatch):
    """Each kernel variant of the bundle, forced in turn, on the staged host path."""
    d = tickgpu.runtime.context()
    checked = set()
    # The quant family has its own argument lists and tests (tests/gpu/test_quant_gpu.py).
    mine = {v: k for v, k in d.bundle.kernels.items() if k.spec.family in ("greeks", "implied_vol", "surface")}
    for variant, k in sorted(mine.items()):
        monkeypatch.setattr(d.bundle, "select", lambda *a, _k=k, **kw: _k)
        d.reset_plans()       # staged plans chose their kernels at warm-up: make them choose again
        dtype = np.float64 if k.spec.dtype == "f64" else np.float32
        n = 3 * k.spec.elements_per_block + 5
        if k.spec.family == "greeks":
            args = _bsm(rng, n, dtype)
            g, c = _greeks_both(args, dtype)
            floors = cancelling_scale(args)
            kappa = tail_conditioning(args)
            for name in GREEKS:
                _agree(getattr(g, name), getattr(c, name), dtype, f"{variant} {name}", floors.get(name), kappa=kappa)
        elif k.spec.family == "implied_vol":
            args = _iv_inputs(rng, n, dtype)
            _iv_agree(args, *_iv_both(args, dtype), dtype, variant)
        else:
            surf, k_, t_ = _surface(rng, n)
            _agree(surf.vol(k_, t_, backend="gpu"), surf.vol(k_, t_, backend="cpu"), np.float64, variant)
        checked.add(variant)
    monkeypatch.undo()
    d.reset_plans()
    tickgpu.runtime.warmup()
    assert checked == set(mine) and {k.spec.family for k in mine.values()} == {"greeks", "implied_vol", "surface"}


# ---- implied vol ------------------------------------------------------------------------------
def _iv_inputs(rng, n, dtype):
    a = _bsm(rng, n, np.float64)
    price = tickgpu.greeks(**a, backend="cpu").price
    a.pop("vol")
    return {"price": price.astype(dtype), **{k: (v.astype(dtype) if k != "call" else v) for k, v in a.items()}}


# The solver's no-arbitrage band (csrc/cpu/lbr_core.h, TG_LBR_INTRINSIC_BAND): in the money, a price
# within 2^-50 max(S e^{-qt}, K e^{-rt}) of the intrinsic value is AT_INTRINSIC on both backends.
INTRINSIC_BAND = 2.0**-50


def _iv_agree(args, gpu, cpu, dtype, what):
    """GPU and CPU implied vols agree: the same status and the vol within tolerance, except where
    the inputs themselves cannot decide.

    * Status: the intrinsic value S e^{-qt} - K e^{-rt} comes from exp, whose CUDA and libm
      versions differ by up to an ulp, so the backends' intrinsic values differ by up to ~4 units of
      2^-52 max(S e^{-qt}, K e^{-rt}) (see lbr_core.h). A price within that of the edge of the
      AT_INTRINSIC band (2^-50 of the same scale) can fall on either side of it: there, and only
      there (8 units either side of the edge, as this host's NumPy exp is a third opinion), OK /
      BELOW_INTRINSIC / AT_INTRINSIC may differ (and the vols with them). Everywhere else the
      statuses must be identical.
    * Vol: within tol relative, plus what the price's rounding allows. Both backends solve a price
      whose two legs, S e^{-qt} N(w d1) and K e^{-rt} N(w d2), each carry a few ulps; the vol of a
      price moved by 16 eps (|leg1| + |leg2|) moves by that over vega. For a healthy option (vega
      ~10 on a spot of 100) that is ~3e-14 absolute, below the 1e-12 relative tolerance; it only
      opens up where vega is tiny against the legs (deep in the money, a time value of a few ulps),
      where the vol has no more digits than that to agree on.
    """
    (vg, sg), (vc, sc) = gpu, cpu
    vg, vc = np.asarray(vg, dtype=np.float64), np.asarray(vc, dtype=np.float64)
    sg, sc = np.asarray(sg), np.asarray(sc)
    a = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), sc.shape) for k, v in args.items()}
    w = np.where(a["call"] > 0, 1.0, -1.0)
    with np.errstate(all="ignore"):
        fwd, disc_strike = a["spot"] * np.exp(-a["div"] * a["t"]), a["strike"] * np.exp(-a["rate"] * a["t"])
        intrinsic = np.maximum(w * (fwd - disc_strike), 0.0)
        at_band_edge = (intrinsic > 0) & (np.abs(np.abs(a["price"] - intrinsic)
                                                 - INTRINSIC_BAND * np.maximum(fwd, disc_strike))
                                          <= 2.0**-49 * np.maximum(fwd, disc_strike))
    undecided = {int(tickgpu.IVStatus.OK), int(tickgpu.IVStatus.BELOW_INTRINSIC), int(tickgpu.IVStatus.AT_INTRINSIC)}
    differ = sg != sc
    excused = differ & at_band_edge & np.isin(sg, list(undecided)) & np.isin(sc, list(undecided))
    assert not (differ & ~excused).any(), (
        f"{what}: statuses differ at {np.flatnonzero(differ & ~excused)[:5]}: gpu {sg[differ & ~excused][:5]}, "
        f"cpu {sc[differ & ~excused][:5]}, price - intrinsic {(a['price'] - intrinsic)[differ & ~excused][:5]}")
    # The window above holds every price the CPU finds exactly at the intrinsic value (they are
    # common: deep in the money near expiry); the band exists so that they agree, and they should
    # all but always: at most 1% of the at-intrinsic options may be excused.
    at = int(np.count_nonzero(sc == int(tickgpu.IVStatus.AT_INTRINSIC)))
    assert excused.sum() <= max(2, at // 100), f"{what}: {excused.sum()} statuses differ near the intrinsic value"
    same = ~differ
    np.testing.assert_array_equal(np.isnan(vg[same]), np.isnan(vc[same]), err_msg=f"{what}: NaN positions differ")
    ok = same & np.isfinite(vc) & (vc > 0)
    np.testing.assert_array_equal(vg[same & (vc == 0)], 0.0, err_msg=f"{what}: vol at intrinsic")
    if ok.any():
        sig = vc[ok]
        t, S, K, r, q = (a[k][ok] for k in ("t", "spot", "strike", "rate", "div"))
        sst = sig * np.sqrt(t)
        d1 = (np.log(S / K) + (r - q) * t) / sst + 0.5 * sst
        legs = (S * np.exp(-q * t) * 0.5 * erfc(-w[ok] * d1 / np.sqrt(2))
                + K * np.exp(-r * t) * 0.5 * erfc(-w[ok] * (d1 - sst) / np.sqrt(2)))
        vega = S * np.exp(-q * t - 0.5 * d1 * d1) / np.sqrt(2 * np.pi) * np.sqrt(t)
        with np.errstate(divide="ignore"):
            allowed = _tol(dtype) * sig + 16 * 2.0**-52 * legs / vega
        err = np.abs(vg[ok] - sig)
        bad = np.flatnonzero(err > allowed)
        assert bad.size == 0, (f"{what}: {bad.size} vols beyond tolerance, e.g. gpu {vg[ok][bad[:3]]} "
                               f"cpu {sig[bad[:3]]} allowed {allowed[bad[:3]]}")


def _iv_both(args, dtype):
    host = {k: (_to_host(v) if rt.is_device_array(v) else v) for k, v in args.items()}
    g = tickgpu.implied_vol(**args, dtype=dtype, backend="gpu", return_status=True)
    c = tickgpu.implied_vol(**host, dtype=dtype, backend="cpu", return_status=True)
    return g, c


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", SIZES)
def test_implied_vol_numpy(ctx, rng, dtype, n):
    args = _iv_inputs(rng, n, dtype)
    (vg, sg), (vc, sc) = _iv_both(args, dtype)
    assert vg.dtype == dtype and sg.dtype == np.int8
    _iv_agree(args, (vg, sg), (vc, sc), dtype, f"iv n={n}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", (1, 17, 1024))
def test_bound_implied_vols_follow_their_arrays(ctx, rng, dtype, n):
    """rt.bind_implied_vol: the CPU backend's vols and statuses of the arrays' contents at each
    call, and the same bits as tickgpu.implied_vol on the GPU."""
    args = _iv_inputs(rng, n, dtype)
    names = ("price", "spot", "strike", "t", "rate", "div", "call")
    ivs = rt.bind_implied_vol(*(args[k] for k in names), dtype=dtype)
    for _ in range(2):
        g, c = _iv_both(args, dtype)
        vol, status = ivs()
        np.testing.assert_array_equal(vol, g[0], err_msg=f"bound vol n={n}")
        np.testing.assert_array_equal(status, g[1], err_msg=f"bound status n={n}")
        _iv_agree(args, (vol, status), c, dtype, f"bound iv n={n}")
        for k, v in _iv_inputs(rng, n, dtype).items():
            args[k][:] = v


def _presented(rng, x, dtype, flag):
    """`x` (an array of n) as a caller might pass it: in place, of another dtype, a strided or
    reversed view, a list, or one of its values as a Python, NumPy or 0-d number (flags: a bool,
    bool / uint8 / int64 arrays)."""
    kind = int(rng.integers(7))
    if flag:
        return (bool(x[0]), x, x.astype(np.uint8), x.astype(np.int64), np.bool_(x[0]), x, x)[kind]
    if kind == 0:
        return x
    if kind == 1:
        return x.astype(np.float32 if np.dtype(dtype) == np.float64 else np.float64)
    if kind == 2:
        wide = np.empty((x.size, 3), x.dtype)
        wide[:, 1] = x
        return wide[:, 1]
    if kind == 3:
        return x[::-1].copy()[::-1]
    if kind == 4:
        return x.tolist()
    return (float(x[0]), np.array(x[0]))[kind - 5]


def test_random_call_sequences_agree_with_the_cpu(ctx, rng):
    """Staged calls in random order -- greeks and implied vols, both dtypes, sizes sharing a bucket,
    crossing buckets and taking the pipeline, inputs in place, converted, strided or single values
    that change and repeat -- with bindings made and called in between on arrays changed in place:
    each call agrees with the CPU backend on the same arguments, so nothing one call leaves in
    staging (a slot's single value, a binding's arrays, a pipeline's chunks) shows in another's."""
    sizes = (1, 2, 16, 17, 31, 32, 1000, 1024, 1100, 4096, 131_073)
    names = {"greeks": ("spot", "strike", "t", "rate", "vol", "div", "call"),
             "iv": ("price", "spot", "strike", "t", "rate", "div", "call")}
    bindings = []
    for step in range(240):
        dtype = (np.float64, np.float32)[int(rng.integers(2))]
        n = int(sizes[rng.integers(len(sizes))])
        if n > 4096 and rng.random() < 0.8:
            n = 33
        if bindings and rng.random() < 0.2:
            op, tick, arrays, bdtype = bindings[int(rng.integers(len(bindings)))]
            fresh = _bsm(rng, arrays["call"].size, bdtype) if op == "greeks" else _iv_inputs(rng, arrays["call"].size, bdtype)
            for k, v in fresh.items():
                arrays[k][:] = v                              # in place: the binding reads them anew
            if op == "greeks":
                b, c = tick(), tickgpu.greeks(**arrays, dtype=bdtype, backend="cpu")
                floors, kappa = cancelling_scale(arrays), tail_conditioning(arrays)
                for name in GREEKS:
                    _agree(getattr(b, name), getattr(c, name), bdtype, f"step {step} bound {name}", floors.get(name),
                           kappa=kappa)
            else:
                c = tickgpu.implied_vol(**arrays, dtype=bdtype, backend="cpu", return_status=True)
                _iv_agree(arrays, tick(), c, bdtype, f"step {step} bound iv")
            continue
        op = ("greeks", "iv")[int(rng.integers(2))]
        canonical = _bsm(rng, n, dtype) if op == "greeks" else _iv_inputs(rng, n, dtype)
        args = {k: _presented(rng, canonical[k], dtype, k == "call") for k in names[op]}
        shape = np.broadcast_shapes(*(np.shape(v) for v in args.values()))   # () where all are single values
        read = {k: np.broadcast_to(np.asarray(v).astype(bool if k == "call" else dtype), shape) for k, v in args.items()}
        what = f"step {step} {op} n={n} {np.dtype(dtype).name} {[type(v).__name__ for v in args.values()]}"
        if op == "greeks":
            g, c = _greeks_both(args, dtype)
            # Far tails (a rho of -1e-15 in float32) are known only to their d1's conditioning.
            floors, kappa = cancelling_scale(read), tail_conditioning(read)
            for name in GREEKS:
                assert getattr(g, name).shape == shape and getattr(g, name).dtype == dtype, what
                _agree(getattr(g, name), getattr(c, name), dtype, f"{what} {name}", floors.get(name), kappa=kappa)
        else:
            g, c = _iv_both(args, dtype)
            assert g[0].shape == shape and g[0].dtype == dtype, what
            _iv_agree(read, g, c, dtype, what)
        if n <= 4096 and rng.random() < 0.1:
            arrays = {k: np.array(v) for k, v in canonical.items()}
            bind = rt.bind_greeks if op == "greeks" else rt.bind_implied_vol
            bindings.append((op, bind(*(arrays[k] for k in names[op]), dtype=dtype), arrays, dtype))
    assert len(bindings) >= 3


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mapped_bindings_compute_in_place(ctx, rng, dtype):
    """bind_greeks / bind_implied_vol with out=: NumPy arrays in mapped pinned memory, read and
    written in place by the kernel; the CPU backend's values of the arrays' contents at each call
    (updated in place between), and tickgpu.greeks's bits where it runs the same variant (1,024)."""
    from tickgpu.memory import mapped_array

    def mapped_copy(host):
        m = {}
        for k, v in host.items():
            m[k] = mapped_array(v.shape, v.dtype)
            m[k][:] = v
        return m

    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    iv_names = ("price", "spot", "strike", "t", "rate", "div", "call")
    for n in (1, 17, 1024):
        a = _bsm(rng, n, dtype)
        m = mapped_copy(a)
        out = mapped_array((10, n), dtype)
        tick = rt.bind_greeks(*(m[k] for k in names), dtype=dtype, out=out)
        ivargs = _iv_inputs(rng, n, dtype)
        mi = mapped_copy(ivargs)
        iv_out = (mapped_array(n, dtype), mapped_array(n, np.int8))
        ivs = rt.bind_implied_vol(*(mi[k] for k in iv_names), dtype=dtype, out=iv_out)
        for step in range(2):
            b = tick()
            g, c = _greeks_both(a, dtype)
            floors = cancelling_scale(a)
            kappa = tail_conditioning(a)
            for i, name in enumerate(GREEKS):
                assert np.shares_memory(getattr(b, name), out[i])
                _agree(getattr(b, name), getattr(c, name), dtype, f"mapped {name} n={n} step {step}", floors.get(name), kappa=kappa)
                if n == 1024:
                    np.testing.assert_array_equal(getattr(b, name), getattr(g, name), err_msg=f"mapped {name}")
            vol, status = ivs()
            (vg, sg), (vc, sc) = _iv_both(ivargs, dtype)
            _iv_agree(ivargs, (vol, status), (vc, sc), dtype, f"mapped iv n={n}")
            if n == 1024:
                np.testing.assert_array_equal(vol, vg, err_msg="mapped vol")
                np.testing.assert_array_equal(status, sg, err_msg="mapped status")
            a = _bsm(rng, n, dtype)
            for k, v in a.items():
                m[k][:] = v
            ivargs = _iv_inputs(rng, n, dtype)
            for k, v in ivargs.items():
                mi[k][:] = v


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_implied_vol_edges(ctx, dtype):
    # below intrinsic, above maximum, at intrinsic, t = 0, NaN, negative price, ordinary
    price = np.array([0.5, 150.0, 10.0, 5.0, np.nan, -1.0, 8.0])
    spot = np.array([110.0, 100.0, 110.0, 100.0, 100.0, 100.0, 100.0])
    strike = np.full(7, 100.0)
    t = np.array([1.0, 1.0, 1e-9, 0.0, 1.0, 1.0, 0.5])
    args = dict(price=price.astype(dtype), spot=spot.astype(dtype), strike=strike.astype(dtype),
                t=t.astype(dtype), rate=0.0, div=0.0, call=True)
    (vg, sg), (vc, sc) = _iv_both(args, dtype)
    np.testing.assert_array_equal(sg, sc)      # no price here is near a bound's rounding
    _agree(vg, vc, dtype, "iv edges")


# ---- surface ----------------------------------------------------------------------------------
def _surface(rng, n, interpolation="variance"):
    strikes = np.sort(rng.uniform(50, 150, 12))
    expiries = np.sort(rng.uniform(0.05, 3, 6))
    vols = rng.uniform(0.1, 0.6, (6, 12))
    surf = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
    # strikes and times inside, outside and at the grid's edges
    k = rng.uniform(30, 170, n)
    t = rng.uniform(0, 4, n)
    k[: min(n, 3)] = strikes[0]
    t[: min(n, 2)] = 0.0
    return surf, k, t


@pytest.mark.parametrize("interpolation", ["variance", "vol"])
@pytest.mark.parametrize("n", SIZES)
def test_surface_numpy(ctx, rng, n, interpolation):
    surf, k, t = _surface(rng, n, interpolation)
    _agree(surf.vol(k, t, backend="gpu"), surf.vol(k, t, backend="cpu"), np.float64, "vol")
    _agree(surf.variance(k, t, backend="gpu"), surf.variance(k, t, backend="cpu"), np.float64, "variance")
    _agree(surf.vol(k[0], 0.7, backend="gpu"), surf.vol(k[0], 0.7, backend="cpu"), np.float64, "scalar")


def test_surface_flat_vol_for_huge_t(ctx, rng):
    """Beyond the last expiry, where w(T_last) t overflows, as the CPU: the last row's vol, and the
    variance w (t / T_last) where that is finite."""
    strikes = np.sort(rng.uniform(50, 150, 12))
    expiries = np.sort(rng.uniform(0.05, 3, 6))
    vols = rng.uniform(0.1, 0.6, (6, 12))
    vols[-1] = rng.uniform(1.0, 3.0, 12)
    surf = tickgpu.VolSurface(strikes, expiries, vols)
    t = np.tile([1e100, 1e300, 1e307, 4e307, 1e308, np.finfo(np.float64).max, 2 * expiries[-1]], 40)
    k = rng.uniform(30, 170, t.size)
    for f in (surf.vol, surf.variance):
        gpu, cpu = f(k, t, backend="gpu"), f(k, t, backend="cpu")
        np.testing.assert_array_equal(np.isinf(gpu), np.isinf(cpu))
        _agree(gpu, cpu, np.float64, f.__name__)
    assert np.all(np.isfinite(surf.vol(k, t, backend="gpu")))


# ---- GPU arrays ----------------------------------------------------------------------------------
def _device_libs():
    libs = []
    try:
        import cupy

        libs.append(("cupy", cupy.asarray))
    except Exception:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            libs.append(("torch", lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()))
    except Exception:
        pass
    return libs


def _device_libs_or_skip():
    libs = _device_libs()
    if not libs:
        pytest.skip("neither CuPy nor a CUDA PyTorch is installed")
    return libs


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gpu_array_inputs_give_gpu_outputs(ctx, rng, dtype):
    libs = _device_libs_or_skip()
    for name, to_dev in libs:
        for n in (1, 17, 100_003):
            a = _bsm(rng, n, dtype)
            dev = {k: to_dev(v) for k, v in a.items()}
            dev["rate"] = 0.015                                    # a scalar rides along
            g, c = _greeks_both(dev, dtype)
            assert type(g.price).__module__.split(".")[0] == name
            floors = cancelling_scale({**a, "rate": 0.015})
            kappa = tail_conditioning({**a, "rate": 0.015})
            for gname in GREEKS:
                _agree(_to_host(getattr(g, gname)), getattr(c, gname), dtype, f"{name} {gname} n={n}",
                       floors.get(gname), kappa=kappa)
            ivargs = _iv_inputs(rng, n, dtype)
            dev_iv = {k: to_dev(v) for k, v in ivargs.items()}
            (vg, sg), (vc, sc) = _iv_both(dev_iv, dtype)
            _iv_agree(ivargs, (_to_host(vg), _to_host(sg)), (vc, sc), dtype, f"{name} iv")
            surf, k, t = _surface(rng, n)
            _agree(_to_host(surf.vol(to_dev(k), to_dev(t))), surf.vol(k, t, backend="cpu"), np.float64, name)


def test_gpu_arrays_misaligned_and_non_contiguous(ctx, rng):
    libs = _device_libs_or_skip()
    for name, to_dev in libs:
        n = 5001
        a = _bsm(rng, n + 1, np.float64)
        dev = {k: to_dev(v)[1:] for k, v in a.items()}            # 8-byte offset: not 16-byte aligned
        g, c = _greeks_both(dev, np.float64)
        for gname in GREEKS:
            _agree(_to_host(getattr(g, gname)), getattr(c, gname), np.float64, f"{name} misaligned {gname}")
        strided = dict(dev, spot=to_dev(np.repeat(a["spot"][1:], 2))[::2])
        with pytest.raises(ValueError, match="spot: GPU array .* not C-contiguous"):
            tickgpu.greeks(**strided, backend="gpu")
        wrong = dict(dev, vol=to_dev(a["vol"][1:].astype(np.float32)))
        with pytest.raises(TypeError, match="vol: GPU array has dtype float32"):
            tickgpu.greeks(**wrong, backend="gpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_bindings_follow_their_gpu_arrays(ctx, rng, dtype):
    """rt.bind_greeks / bind_implied_vol on CuPy and PyTorch arrays: one launch a call into the
    binding's own result arrays, the bits of tickgpu.greeks / implied_vol on the same arrays, and
    the CPU backend's values of the arrays' contents at each call (updated in place between)."""
    libs = _device_libs_or_skip()
    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    iv_names = ("price", "spot", "strike", "t", "rate", "div", "call")
    for lib, to_dev in libs:
        for n in (1, 17, 1024, 2**20 + 3):
            a = _bsm(rng, n, dtype)
            dev = {k: to_dev(v) for k, v in a.items()}
            tick = rt.bind_greeks(*(dev[k] for k in names), dtype=dtype)
            assert isinstance(tick, rt.DeviceBoundGreeks)
            ivargs = _iv_inputs(rng, n, dtype)
            dev_iv = {k: to_dev(v) for k, v in ivargs.items()}
            ivs = rt.bind_implied_vol(*(dev_iv[k] for k in iv_names), dtype=dtype)
            for step in range(2):
                b = tick()
                assert b is tick.outputs and type(b.price).__module__.split(".")[0] == lib
                g, c = _greeks_both(dev, dtype)
                floors = cancelling_scale(a)
                kappa = tail_conditioning(a)
                for name in GREEKS:
                    got = _to_host(getattr(b, name))
                    np.testing.assert_array_equal(got, _to_host(getattr(g, name)), err_msg=f"{lib} bound {name} n={n}")
                    _agree(got, getattr(c, name), dtype, f"{lib} bound {name} n={n} step {step}", floors.get(name), kappa=kappa)
                vol, status = ivs()
                (vg, sg), (vc, sc) = _iv_both(dev_iv, dtype)
                np.testing.assert_array_equal(_to_host(vol), _to_host(vg), err_msg=f"{lib} bound vol n={n}")
                np.testing.assert_array_equal(_to_host(status), _to_host(sg), err_msg=f"{lib} bound status n={n}")
                _iv_agree(ivargs, (_to_host(vol), _to_host(status)), (vc, sc), dtype, f"{lib} bound iv n={n}")
                a = _bsm(rng, n, dtype)
                for k, v in a.items():
                    dev[k][...] = to_dev(v)                         # in place, on the library's stream
                ivargs = _iv_inputs(rng, n, dtype)
                for k, v in ivargs.items():
                    dev_iv[k][...] = to_dev(v)


def test_element_misaligned_gpu_arrays_are_refused_before_any_launch(ctx, rng):
    """A float64 array one byte off its element alignment would make the kernel fault
    (CUDA_ERROR_MISALIGNED_ADDRESS, which ends the context): refused by name, and the context
    goes on working."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed on this machine")
    n = 257
    raw = cupy.zeros(8 * n + 8, dtype=cupy.uint8)
    odd = cupy.ndarray((n,), dtype=cupy.float64, memptr=raw.data + 1)
    k = np.linspace(80, 120, n)
    with pytest.raises(ValueError, match="strike: GPU array's data at .* is not aligned to its 8-byte elements"):
        tickgpu.greeks(100.0, odd, 0.5, 0.01, 0.2, backend="gpu")
    with pytest.raises(ValueError, match="bind_greeks: strike's data at .* is not aligned"):
        rt.bind_greeks(100.0, odd, 0.5, 0.01, 0.2, 0.0, True)
    g = tickgpu.greeks(100.0, cupy.asarray(k), 0.5, 0.01, 0.2, backend="gpu")
    c = tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="cpu")
    _agree(_to_host(g.price), c.price, np.float64, "after the refusals")


def test_the_runtime_pool_refuses_to_close_under_its_staging(ctx, rng):
    from tickgpu.memory import PoolError, mapped

    k = np.linspace(80, 120, 64)
    first = tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="gpu")
    with pytest.raises(PoolError, match="read and written in place by the GPU"):
        mapped(16).pool.close()
    np.testing.assert_array_equal(tickgpu.greeks(100.0, k, 0.5, 0.01, 0.2, backend="gpu").price, first.price)


def test_device_binding_single_values_and_refusals(ctx, rng):
    libs = _device_libs_or_skip()
    for lib, to_dev in libs:
        n = 300
        a = _bsm(rng, n, np.float32)
        a.update(rate=0.02, div=0.0, call=False)
        dev = {k: (to_dev(v) if isinstance(v, np.ndarray) else v) for k, v in a.items()}
        b = rt.bind_greeks(*(dev[k] for k in ("spot", "strike", "t", "rate", "vol", "div", "call")),
                           dtype=np.float32)()
        g, c = _greeks_both(dev, np.float32)
        for name in GREEKS:
            np.testing.assert_array_equal(_to_host(getattr(b, name)), _to_host(getattr(g, name)), err_msg=f"{lib} {name}")
        with pytest.raises(TypeError, match="bind_greeks: strike is a ndarray, not a GPU array"):
            rt.bind_greeks(dev["spot"], a["strike"], dev["t"], 0.02, dev["vol"], 0.0, True, dtype=np.float32)
        with pytest.raises(ValueError, match="bind_greeks: strike must be one-dimensional and C-contiguous"):
            rt.bind_greeks(dev["spot"], to_dev(np.repeat(a["strike"], 2))[::2], dev["t"], 0.02, dev["vol"], 0.0,
                           True, dtype=np.float32)
        with pytest.raises(TypeError, match="bind_greeks: strike must be of dtype float64, got float32"):
            rt.bind_greeks(to_dev(a["spot"].astype(np.float64)), dev["strike"], dev["t"], 0.02, dev["vol"], 0.0, True)
    if any(lib == "torch" for lib, _ in libs):
        import torch

        x = torch.ones(64, dtype=torch.float64, device="cuda")
        tick = rt.bind_greeks(x, 100.0, 1.0, 0.01, 0.2, 0.0, True)
        tick()
        x.resize_(1 << 20)                                             # reallocated in place
        with pytest.raises(RuntimeError, match="bind_greeks: a bound tensor was reallocated"):
            tick()


# ---- warm start and steady state --------------------------------------------------------------------
def test_first_call_after_warmup_builds_nothing(ctx, rng):
    """After warmup() the first call loads, allocates, instantiates and plans nothing: what it
    runs was all made by warm-up (its time is measured by the gpu suite's warm_start section)."""
    rt.warmup()
    c = rt.context()
    a = _bsm(rng, 1000, np.float32)
    before = (dict(c.driver.counts), len(c.plans), sum(len(r.graphs) for r in c.runners.values()))
    g = tickgpu.greeks(**a, dtype=np.float32, backend="gpu")
    after = (dict(c.driver.counts), len(c.plans), sum(len(r.graphs) for r in c.runners.values()))
    assert after == before
    ref = tickgpu.greeks(**a, dtype=np.float32, backend="cpu")
    np.testing.assert_allclose(g.price, ref.price, rtol=1e-4, atol=1e-4)


def _allocations(c) -> dict:
    """Every allocating driver call so far: the runtime's own, its device pool's and its pinned pool's."""
    out = {f"driver.{k}": v for k, v in c.driver.counts.items()}
    pool = c.memory.device_pool
    if pool is not None:
        out["device_pool.driver_allocs"] = pool.stats().driver_allocs
    out["pinned_pool.arenas"] = c.memory.pinned.stats()["arenas"]
    return out


def _pool_inputs(c, pool, rng, n, dtype):
    """Options in pool buffers exposed through __cuda_array_interface__ only: a producer without
    a library of its own, so the runtime makes the outputs (DeviceArray)."""
    out, keep = {}, []
    for name, v in _bsm(rng, n, dtype).items():
        v = np.ascontiguousarray(v if name != "call" else np.asarray(v, np.uint8))
        buf = pool.alloc(max(v.nbytes, 1))
        c.driver.memcpy_htod(buf.ptr, v.ctypes.data, v.nbytes)
        out[name] = buf.as_array(v.dtype, v.shape)
        keep.append(buf)
    return out, keep


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_runtime_made_results_go_to_torch_and_cupy_by_dlpack_in_place(ctx, rng, dtype):
    """`DeviceArray` results through DLPack: the consumer's array is the same memory, equal to
    `.get()` and to the CPU backend, and it keeps that memory alive after the DeviceArray is gone
    while later calls allocate and free around it."""
    import gc

    from tickgpu.memory.device import default_pool
    from tickgpu.runtime.arrays import DeviceArray

    libs = dict(_device_libs_or_skip())
    c = rt.context()
    pool = default_pool(c)
    dev, keep = _pool_inputs(c, pool, rng, 1000, dtype)
    g = tickgpu.greeks(**dev, dtype=dtype, backend="gpu")
    host_in = {k: v.get() for k, v in dev.items()}
    cpu = tickgpu.greeks(**host_in, dtype=dtype, backend="cpu")
    theirs = {}
    for gname in GREEKS:
        a = getattr(g, gname)
        assert isinstance(a, DeviceArray)
        want = a.get()
        _agree(want, getattr(cpu, gname), dtype, gname, cancelling_scale(host_in).get(gname))
        if "torch" in libs:
            import torch

            t = torch.from_dlpack(a)
            assert t.data_ptr() == a.ptr and t.dtype == getattr(torch, np.dtype(dtype).name)
            theirs[("torch", gname)] = (t, want)
        if "cupy" in libs:
            import cupy

            x = cupy.from_dlpack(a)
            assert x.data.ptr == a.ptr and x.dtype == dtype
            theirs[("cupy", gname)] = (x, want)
    del g, a
    gc.collect()
    for _ in range(20):                      # churn the pool the DeviceArrays came from
        more, more_keep = _pool_inputs(c, pool, rng, 1000, dtype)
        tickgpu.greeks(**more, dtype=dtype, backend="gpu")
        for b in more_keep:
            b.free()
    pool.flush()
    for (lib, gname), (arr, want) in theirs.items():
        np.testing.assert_array_equal(_to_host(arr), want, err_msg=f"{lib} {gname} after the churn")
    for b in keep:
        b.free()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_jax_arrays_in_give_jax_arrays_out(ctx, rng, dtype):
    """JAX arrays in: greeks, implied vols and surface vols come back as JAX arrays on the same GPU
    (the runtime's results handed to jax.dlpack.from_dlpack, in place), equal to the CPU backend."""
    jax = pytest.importorskip("jax", reason="JAX is not installed on this machine")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend on this machine")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)     # float64 arrays stay float64 on their way in
    try:
        def to_dev(v):
            return jax.device_put(np.ascontiguousarray(v), gpu)

        for n in (1, 17, 100_003):
            a = _bsm(rng, n, dtype)
            dev = {k: to_dev(v) for k, v in a.items()}
            dev["rate"] = 0.015
            g, c = _greeks_both(dev, dtype)
            floors = cancelling_scale({**a, "rate": 0.015})
            kappa = tail_conditioning({**a, "rate": 0.015})
            for gname in GREEKS:
                out = getattr(g, gname)
                assert isinstance(out, jax.Array) and out.dtype == dtype, (gname, type(out), out.dtype)
                assert out.devices() == {gpu}
                _agree(np.asarray(out), getattr(c, gname), dtype, f"jax {gname} n={n}", floors.get(gname), kappa=kappa)
            ivargs = _iv_inputs(rng, n, dtype)
            (vg, sg), (vc, sc) = _iv_both({k: to_dev(v) for k, v in ivargs.items()}, dtype)
            assert isinstance(vg, jax.Array) and isinstance(sg, jax.Array)
            _iv_agree(ivargs, (np.asarray(vg), np.asarray(sg)), (vc, sc), dtype, "jax iv")
            surf, k, t = _surface(rng, n)
            v = surf.vol(to_dev(k), to_dev(t))
            assert isinstance(v, jax.Array)
            _agree(np.asarray(v), surf.vol(k, t, backend="cpu"), np.float64, "jax surface")
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_binding_jax_arrays_gives_tickgpu_arrays(ctx, rng):
    """bind_greeks on JAX arrays (which never change in place): one launch a call into result
    arrays of tickgpu's own (DeviceArray), waited for, equal to the CPU backend and to
    tickgpu.greeks on the same arrays."""
    jax = pytest.importorskip("jax", reason="JAX is not installed on this machine")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend on this machine")
    from tickgpu.runtime.arrays import DeviceArray

    a = _bsm(rng, 1000, np.float32)
    dev = {k: jax.device_put(v, gpu) for k, v in a.items()}
    names = ("spot", "strike", "t", "rate", "vol", "div", "call")
    tick = rt.bind_greeks(*(dev[k] for k in names), dtype=np.float32)
    assert isinstance(tick, rt.DeviceBoundGreeks)
    g, unbound = tick(), tickgpu.greeks(**dev, dtype=np.float32, backend="gpu")
    c = tickgpu.greeks(**a, dtype=np.float32, backend="cpu")
    floors = cancelling_scale(a)
    kappa = tail_conditioning(a)
    for gname in GREEKS:
        out = getattr(g, gname)
        assert isinstance(out, DeviceArray)
        assert np.array_equal(out.get(), np.asarray(getattr(unbound, gname))), gname
        _agree(out.get(), getattr(c, gname), np.float32, f"bound jax {gname}", floors.get(gname), kappa=kappa)


def test_no_driver_allocations_over_10000_calls_after_warmup(ctx, rng):
    """After warm-up, 10,000 calls on the hot paths -- NumPy ticks of several sizes, both dtypes,
    greeks / implied vol / surface, a pipelined large call, and GPU arrays whose outputs the
    runtime makes itself (from its device pool) -- make no driver allocation at all."""
    from tickgpu.memory.device import default_pool

    c = rt.context()
    assert c.memory.device_pool is not None, c.memory.device_pool_reason
    pool = default_pool(c)

    dev_in = {dt: _pool_inputs(c, pool, rng, 1000, dt) for dt in (np.float64, np.float32)}
    host_in = {(n, dt): _bsm(rng, n, dt) for n in (1, 17, 1000, 4096) for dt in (np.float64, np.float32)}
    iv_in = {dt: _iv_inputs(rng, 1000, dt) for dt in (np.float64, np.float32)}
    big = _bsm(rng, 2**18 + 5, np.float64)
    surf, k, t = _surface(rng, 1000)

    def one_round():
        for (n, dt), x in host_in.items():
            tickgpu.greeks(**x, dtype=dt, backend="gpu")
        for dt in (np.float64, np.float32):
            tickgpu.implied_vol(**iv_in[dt], dtype=dt, backend="gpu")
            g = tickgpu.greeks(**dev_in[dt][0], dtype=dt, backend="gpu")
            del g
        surf.vol(k, t, backend="gpu")
        return len(host_in) + 2 * 2 + 1

    for _ in range(3):                    # every path once, then again (pool frees return lazily)
        one_round()
        tickgpu.greeks(**big, backend="gpu")
    pool.flush()
    before = _allocations(c)
    calls = 0
    while calls < 10_000:
        calls += one_round()
    tickgpu.greeks(**big, backend="gpu")
    after = _allocations(c)
    assert after == before, {k: (before[k], after[k]) for k in after if after[k] != before.get(k)}
    for b in (b for _, keep in dev_in.values() for b in keep):
        b.free()
