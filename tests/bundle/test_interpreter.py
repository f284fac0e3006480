"""The Triton kernels (greeks, vol surface) run under the Triton interpreter, against float64
NumPy references (tests/kernel_reference.py), which are themselves checked against QuantLib and finite
differences.

The interpreter (TRITON_INTERPRET=1) runs a kernel's Python source on the CPU with NumPy; it takes
torch tensors as arguments, so these tests need torch (CPU) as well as Triton, and skip without
them. It has no libdevice: the kernels' libdevice calls (exp, log, log1p, sqrt, erfc, erfcx) are routed here to
NumPy / SciPy float64 functions rounded to the element type, which stand for libdevice's
(documented to within a few ulps). Nor can it run inline PTX: the greeks kernel's table erfcx
(`_erfcx_table2`) is routed to `tickgpu.kernels.erfcx.evaluate`, the same table and steps in NumPy
(tests/bundle/test_erfcx_table.py checks both against mpmath). Everything else the kernels do runs
as written, except that its ``tl.fma`` rounds twice, so the correction for the rounding of d^2
(`_density_exp`) is exercised on the GPU only (tests/gpu).
"""
import importlib.util
import types

import numpy as np
import pytest

triton = pytest.importorskip("triton", reason="Triton (the 'build' extra) is needed to interpret the kernels")
torch = pytest.importorskip("torch", reason="the Triton interpreter takes torch (CPU) tensors as kernel arguments")
special = pytest.importorskip("scipy.special")

from triton.runtime import interpreter as _interp  # noqa: E402

import kernel_reference as ref  # noqa: E402


def _on_numpy(f):
    def apply(x):
        data = x.handle.data
        with np.errstate(all="ignore"):
            y = f(data.astype(np.float64)).astype(data.dtype)
        return triton.language.core.tensor(_interp.TensorHandle(y, x.handle.dtype), x.type)
    return apply


LIBDEVICE_ON_NUMPY = types.SimpleNamespace(exp=_on_numpy(np.exp), log=_on_numpy(np.log),
                                           log1p=_on_numpy(np.log1p), sqrt=_on_numpy(np.sqrt), erfc=_on_numpy(special.erfc),
                                           erfcx=_on_numpy(special.erfcx))


def _load_interpreted(name):
    """A private copy of tickgpu.kernels.<name> whose @triton.jit functions are interpreted."""
    origin = importlib.util.find_spec(f"tickgpu.kernels.{name}").origin
    spec = importlib.util.spec_from_file_location(f"_interpreted_{name}", origin)
    mod = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = True    # read when @triton.jit runs, at import
        spec.loader.exec_module(mod)
    mod.libdevice = LIBDEVICE_ON_NUMPY
    if hasattr(mod, "_erfcx_table2"):
        from tickgpu.kernels import erfcx

        one = _on_numpy(erfcx.evaluate)
        mod._erfcx_table2 = lambda x1, x2: (one(x1), one(x2))
    if hasattr(mod, "_rcp_seed"):
        mod._rcp_seed = _on_numpy(_rcp_estimate)
    return mod


def _rcp_estimate(x):
    """What the hardware's float64 reciprocal estimate stands for here: the reciprocal of x's top 32
    bits (20 of its fraction) cut to 20 fraction bits, so that the Newton steps after it are what
    is tested; subnormal inputs and outputs flushed to 0."""
    tiny = np.finfo(np.float64).tiny
    with np.errstate(all="ignore"):
        m, e = np.frexp(np.where(np.abs(x) < tiny, 0.0 * x, x))
        top = np.ldexp(np.trunc(m * 2.0**21) / 2.0**21, e)
        m, e = np.frexp(1.0 / top)
        y = np.ldexp(np.trunc(m * 2.0**21) / 2.0**21, e)
    return np.where(np.abs(y) < tiny, 0.0 * y, y)


@pytest.fixture(scope="module")
def greeks_mod():
    return _load_interpreted("greeks")


@pytest.fixture(scope="module")
def surface_mod():
    return _load_interpreted("surface")


TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}


def _arg(a, dtype):
    """(tensor, stride): a one-element input is passed with stride 0, as the runtime does."""
    a = np.ascontiguousarray(a, dtype=dtype).reshape(-1)
    return torch.from_numpy(a.copy()), (0 if a.size == 1 else 1)


def run_greeks(mod, dtype, S, K, t, r, sig, q, call, block=256, programs=None, **switches):
    n = max(np.size(a) for a in (S, K, t, r, sig, q, call))
    args = []
    for a in (S, K, t, r, sig, q):
        args += _arg(a, dtype)
    args += _arg(np.asarray(call, dtype=np.uint8), np.uint8)
    outs = [torch.full((n,), 12345.0, dtype=TORCH_DTYPE[dtype]) for _ in ref.GREEKS]
    grid = (programs or triton.cdiv(n, block),)
    mod.bsm_greeks_kernel[grid](*args, *outs, n, BLOCK_SIZE=block, **switches)
    return {g: o.numpy() for g, o in zip(ref.GREEKS, outs)}


def random_chain(rng, n):
    S = rng.uniform(20, 200, n)
    K = S * np.exp(rng.normal(0, 0.3, n))
    t = np.exp(rng.uniform(np.log(1e-3), np.log(5.0), n))
    r = rng.uniform(-0.02, 0.10, n)
    sig = np.exp(rng.uniform(np.log(0.02), np.log(1.5), n))
    q = rng.uniform(0.0, 0.06, n)
    call = rng.integers(0, 2, n).astype(bool)
    return S, K, t, r, sig, q, call


def assert_greeks_close(got, S, K, t, r, sig, q, call, rtol, atol=0.0, input_eps=0.0, want=None):
    """Each greek within tolerance of the float64 reference (or of ``want``), NaN where it is NaN.

    The tolerance is rtol * (1 + d1^2) * scale + atol, plus, when input_eps > 0, how far the
    reference itself moves when S, K, t or sigma moves by a relative input_eps. d1^2 is the relative
    condition number of N(d1) in a tail: an implementation that rounds d1 at the working precision
    is off by that much there. The input_eps term admits the rounding of ln(S/K), sigma sqrt(t)
    and the like at float32 precision, i.e. that the kernel computes the exact greeks of inputs
    within a few float32 roundings of the given ones -- and nothing more.
    """
    truth, scale, d1 = ref.bsm_greeks(S, K, t, r, sig, q, call)
    want = truth if want is None else {g: np.asarray(want[g], dtype=np.float64) for g in ref.GREEKS}
    moved = {g: np.zeros(np.shape(want[g])) for g in ref.GREEKS}
    if input_eps:
        args = [np.asarray(a, dtype=np.float64) for a in (S, K, t, r, sig, q)]
        for i in (0, 1, 2, 4):
            bumped = list(args)
            bumped[i] = args[i] * (1 + input_eps)
            other, _, _ = ref.bsm_greeks(*bumped, call)
            for g in ref.GREEKS:
                with np.errstate(invalid="ignore"):
                    moved[g] += np.nan_to_num(np.abs(other[g] - truth[g]), nan=0.0, posinf=0.0)
    for g in ref.GREEKS:
        w, x = want[g], got[g].astype(np.float64)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(w), err_msg=f"{g}: NaN pattern")
        inf = np.isinf(w)
        np.testing.assert_array_equal(x[inf], w[inf], err_msg=f"{g}: infinities")
        ok = np.isfinite(w)
        tol = rtol * (1.0 + d1[ok] ** 2) * scale[g][ok] + moved[g][ok] + atol
        err = np.abs(x[ok] - w[ok])
        bad = np.flatnonzero(err > tol)
        assert bad.size == 0, (
            f"{g}: {bad.size} of {ok.sum()} beyond tolerance; worst at "
            f"{[(S[ok][i], K[ok][i], t[ok][i], r[ok][i], sig[ok][i], q[ok][i], bool(call[ok][i]), x[ok][i], w[ok][i], tol[i]) for i in bad[:3]]}")


# Within 1e-12 (float64) / 1e-5 (float32, against the float64 truth at the float32-rounded
# inputs) relative to each greek's scale, plus the effect of 4 roundings of the inputs at the
# working precision (ln(S/K) near the money, sigma sqrt(t), ... are rounded by any implementation).
F32 = {"rtol": 1e-5, "atol": 1e-36, "input_eps": 2.0**-22}
F64 = {"rtol": 1e-12, "atol": 1e-300, "input_eps": 2.0**-51}


# ---- the reference itself ------------------------------------------------------------------

def test_reference_matches_quantlib(rng):
    ql = pytest.importorskip("QuantLib")
    today = ql.Date(15, 6, 2026)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    for _ in range(40):
        S, K = rng.uniform(50, 150), rng.uniform(50, 150)
        days = int(rng.integers(5, 1500))
        r, q, sig = rng.uniform(-0.01, 0.08), rng.uniform(0, 0.05), rng.uniform(0.05, 0.8)
        is_call = bool(rng.integers(0, 2))
        t = dc.yearFraction(today, today + days)
        spot = ql.QuoteHandle(ql.SimpleQuote(S))
        process = ql.BlackScholesMertonProcess(
            spot, ql.YieldTermStructureHandle(ql.FlatForward(today, q, dc)),
            ql.YieldTermStructureHandle(ql.FlatForward(today, r, dc)),
            ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), sig, dc)))
        option = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if is_call else ql.Option.Put, K),
                                  ql.EuropeanExercise(today + days))
        option.setPricingEngine(ql.AnalyticEuropeanEngine(process))
        want, scale, _ = ref.bsm_greeks(S, K, t, r, sig, q, is_call)
        ql_values = {"price": option.NPV(), "delta": option.delta(), "gamma": option.gamma(),
                     "vega": option.vega(), "theta": option.theta(), "rho": option.rho(),
                     "phi": option.dividendRho()}
        for g, v in ql_values.items():
            assert abs(float(want[g]) - v) <= 1e-10 * float(scale[g]) + 1e-12, (g, S, K, t, r, q, sig, is_call)


def test_reference_second_order_greeks_match_finite_differences(rng):
    S, K, t, r, sig, q, call = random_chain(rng, 200)
    t = np.maximum(t, 0.05)
    want, _, _ = ref.bsm_greeks(S, K, t, r, sig, q, call)
    h = 1e-5
    up, _, _ = ref.bsm_greeks(S, K, t, r, sig + h, q, call)
    dn, _, _ = ref.bsm_greeks(S, K, t, r, sig - h, q, call)
    np.testing.assert_allclose(want["vanna"], (up["delta"] - dn["delta"]) / (2 * h), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(want["volga"], (up["vega"] - dn["vega"]) / (2 * h), rtol=1e-5, atol=1e-5)
    later, _, _ = ref.bsm_greeks(S, K, t - h, r, sig, q, call)       # a day passes: expiry nearer
    earlier, _, _ = ref.bsm_greeks(S, K, t + h, r, sig, q, call)
    np.testing.assert_allclose(want["charm"], (later["delta"] - earlier["delta"]) / (2 * h), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(want["theta"], (later["price"] - earlier["price"]) / (2 * h), rtol=1e-5, atol=1e-5)


# ---- the greeks kernel ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype,block", [(np.float64, 256), (np.float64, 1024), (np.float32, 256)])
def test_greeks_kernel_random_chain(greeks_mod, rng, dtype, block):
    n = 1500     # not a multiple of the block: the last program is partly masked
    S, K, t, r, sig, q, call = (np.asarray(a, dtype=dtype) if a.dtype != bool else a
                                for a in random_chain(rng, n))
    got = run_greeks(greeks_mod, dtype, S, K, t, r, sig, q, call, block=block)
    assert_greeks_close(got, S, K, t, r, sig, q, call, **(F64 if dtype == np.float64 else F32))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_greeks_kernel_broadcast_scalars(greeks_mod, rng, dtype):
    """Stride-0 inputs: one spot, rate, vol, div and flag for a whole strip of strikes."""
    K = np.linspace(50, 150, 101).astype(dtype)
    t = rng.uniform(0.1, 2.0, 101).astype(dtype)
    S, r, sig, q = (np.asarray([v], dtype=dtype) for v in (100.0, 0.03, 0.25, 0.01))
    for call in (True, False):
        got = run_greeks(greeks_mod, dtype, S, K, t, r, sig, q, np.asarray([call]))
        assert_greeks_close(got, np.broadcast_to(S, K.shape), K, t, np.broadcast_to(r, K.shape),
                            np.broadcast_to(sig, K.shape), np.broadcast_to(q, K.shape),
                            np.full(K.shape, call), **(F64 if dtype == np.float64 else F32))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_greeks_kernel_edges(greeks_mod, dtype):
    nan, inf = np.nan, np.inf
    cases = [
        # S, K, t, r, sig, q, call
        (100, 100, 0.0, 0.05, 0.2, 0.02, True),     # expired at the money: limits
        (100, 100, 0.0, 0.05, 0.2, 0.02, False),
        (120, 100, 0.0, 0.05, 0.2, 0.02, True),     # expired in the money
        (80, 100, 0.0, 0.05, 0.2, 0.02, False),
        (80, 100, 0.0, 0.05, 0.2, 0.02, True),      # expired out of the money
        (100, 100, 0.0, 0.125, 0.5, 0.25, True),     # expired at the money, zero drift
        (100, 100, 1e-10, 0.05, 0.3, 0.0, True),    # tiny t
        (100, 300, 0.1, 0.0, 0.1, 0.0, True),       # deep out of the money: price underflows
        (100, 150, 0.25, 0.01, 0.15, 0.0, True),    # tail: price ~1e-6 of spot, kept to relative precision
        (100, 60, 0.25, 0.01, 0.15, 0.0, False),
        (100, 100, 30.0, 0.05, 3.0, 0.0, True),     # huge total vol
        (nan, 100, 1.0, 0.05, 0.2, 0.0, True),      # bad input -> NaN everywhere
        (100, inf, 1.0, 0.05, 0.2, 0.0, True),
        (100, 100, -1.0, 0.05, 0.2, 0.0, True),
        (100, 100, 1.0, nan, 0.2, 0.0, True),
        (100, 100, 1.0, 0.05, 0.0, 0.0, False),
        (100, 100, 1.0, 0.05, -0.2, 0.0, False),
        (100, 100, 1.0, 0.05, 0.2, -inf, True),
        (0.0, 100, 1.0, 0.05, 0.2, 0.0, True),
        (100, -5.0, 1.0, 0.05, 0.2, 0.0, True),
        (100, 100, inf, 0.05, 0.2, 0.0, True),
    ]
    cols = [np.array(c, dtype=dtype) for c in list(zip(*cases))[:6]]
    call = np.array([c[6] for c in cases])
    got = run_greeks(greeks_mod, dtype, *cols, call)
    assert_greeks_close(got, *cols, call, **(F64 if dtype == np.float64 else F32))
    # Spot checks of the convention itself, independent of the reference.
    assert got["price"][0] == 0.0 and got["delta"][0] == 0.5 and got["gamma"][0] == np.inf
    assert got["theta"][0] == -np.inf and got["charm"][0] == -np.inf      # drift r - q + sigma^2/2 > 0
    assert got["delta"][1] == -0.5 and got["charm"][1] == -np.inf
    assert got["price"][2] == 20 and got["delta"][2] == 1.0 and got["gamma"][2] == 0.0
    assert np.isclose(got["theta"][2], 0.02 * 120 - 0.05 * 100, rtol=1e-6)
    assert got["price"][3] == 20 and got["delta"][3] == -1.0
    assert got["price"][4] == 0.0 and got["delta"][4] == 0.0 and got["theta"][4] == 0.0
    assert got["charm"][5] == 0.125 and got["vega"][5] == 0.0          # zero drift: q e^{-qt} / 2
    assert got["price"][8] > 0
    for i in range(11, len(cases)):
        for g in ref.GREEKS:
            assert np.isnan(got[g][i]), (g, cases[i])


EDGE_INPUTS = [
    # S, K, t, r, sig, q: expiry in, at and out of the money, tiny t, subnormal and huge total vol,
    # deep tails, and every kind of bad input
    (100, 100, 0.0, 0.05, 0.2, 0.02), (120, 100, 0.0, 0.05, 0.2, 0.02), (80, 100, 0.0, 0.05, 0.2, 0.02),
    (100, 100, 0.0, 0.125, 0.5, 0.25), (100, 100, 1e-10, 0.05, 0.3, 0.0), (100, 100, 1e-300, 0.05, 1e-300, 0.0),
    (100, 300, 0.1, 0.0, 0.1, 0.0), (100, 150, 0.25, 0.01, 0.15, 0.0), (100, 60, 0.25, 0.01, 0.15, 0.0),
    (100, 100, 30.0, 0.05, 3.0, 0.0), (np.nan, 100, 1.0, 0.05, 0.2, 0.0), (100, np.inf, 1.0, 0.05, 0.2, 0.0),
    (100, 100, -1.0, 0.05, 0.2, 0.0), (100, 100, 1.0, np.nan, 0.2, 0.0), (100, 100, 1.0, 0.05, 0.0, 0.0),
    (100, 100, 1.0, 0.05, -0.2, 0.0), (100, 100, 1.0, 0.05, 0.2, -np.inf), (0.0, 100, 1.0, 0.05, 0.2, 0.0),
    (100, -5.0, 1.0, 0.05, 0.2, 0.0), (100, 100, np.inf, 0.05, 0.2, 0.0),
    # far tails: d1 = 69.3, 37.4, -37.0, 36.8 (exp(-d1^2/2) near and past the subnormals)
    (1000, 1, 1.0, 0.03, 0.1, 0.01), (42, 1, 1.0, 0.0, 0.1, 0.0), (1, 40.8, 1.0, 0.0, 0.1, 0.0),
    (39.5, 1, 1.0, 0.0, 0.1, 0.0),
    # d1 = -4.8e158: d1^2 overflows (exp(-d1^2/2) must be 0, not inf * 0)
    (100, 110, 1.0, 0.05, 1e-160, 0.0),
    # t = -0.0 is t = 0 (in, out of and at the money)
    (110, 100, -0.0, 0.05, 0.2, 0.0), (90, 100, -0.0, 0.05, 0.2, 0.0), (100, 100, -0.0, 0.05, 0.2, 0.01),
    # S/K far from 1 (log1p((S - K)/K) would be -inf, S/K would overflow); S/K just under 1/16
    (1e-15, 100, 1.0, 0.05, 0.2, 0.0), (1.0, 100, 1.0, 0.05, 0.5, 0.0), (6.2, 100, 0.5, 0.01, 0.3, 0.0),
    (1e300, 1e-10, 1.0, 0.05, 0.2, 0.0), (1e-300, 1e10, 1.0, 0.05, 0.2, 0.0),
    # d1 infinite (a subnormal sigma), a huge sigma (pdf 0: vanna, volga, charm 0, not NaN)
    (1e6, 1, 1.0, 0.0, 1e-308, 0.0), (100, 100, 1.0, 0.05, 1e200, 0.0), (100, 100, 1.0, 0.05, 1e30, 0.0),
    # discounting out of range (NaN) and in range at large r t, q t
    (100, 100, 1.0, -1000.0, 0.2, 0.0), (100, 100, 1.0, 800.0, 0.2, 0.0), (100, 100, 1.0, 0.0, 0.2, -1000.0),
    (100, 100, 2.0, 200.0, 0.2, 0.0), (100, 100, 2.0, 30.0, 0.2, 25.0), (100, 100, 1.0, -60.0, 0.2, -60.0),
    # subnormal t with positive total variance: charm's 1/t (not 1/sqrt(t)^2, which overflows)
    (100, 100, 1e-310, 0.0, 1.0, 0.0), (100, 100, 1e-40, 0.0, 1.0, 0.0), (100, 100, 1e-305, 0.01, 0.5, 0.0),
    # the fast path's bounds (the kernel's _fast_ok), on each side: S, K at 2^50; sigma at 2^-500
    # and 2^500 (float32: 2^-60); t at 2^1000 (float32: 2^-100); |r t| at 350 (float32: 40)
    (2.0**50, 2.0**50, 1.0, 0.01, 0.2, 0.0), (2.0**50 * (1 - 2**-53), 2.0**50 * (1 - 2**-53), 1.0, 0.01, 0.2, 0.0),
    (100, 100, 1.0, 0.0, 2.0**-500, 0.0), (100, 100, 1.0, 0.0, 2.0**-500 * (1 - 2**-53), 0.0),
    (100, 100, 1.0, 0.0, 2.0**500, 0.0), (100, 100, 1.0, 0.0, 2.0**500 * (1 - 2**-53), 0.0),
    (100, 100, 1.0, 0.0, 2.0**-60, 0.0), (100, 100, 1.0, 0.0, 2.0**-60 * (1 - 2**-24), 0.0),
    (100, 100, 2.0**1000, 0.0, 2.0**-499, 0.0), (100, 100, 2.0**1000 * (1 - 2**-53), 0.0, 2.0**-499, 0.0),
    (100, 100, 2.0**-100, 0.0, 1.0, 0.0), (100, 100, 2.0**-100 * (1 - 2**-24), 0.0, 1.0, 0.0),
    (100, 100, 2.0, 175.0, 0.2, 0.0), (100, 100, 2.0, 175.0 * (1 + 2**-52), 0.2, 0.0),
    (100, 100, 2.0, 20.0, 0.2, 20.0), (100, 100, 2.0, 20.0 * (1 + 2**-23), 0.2, 20.0 * (1 + 2**-23)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # 1/(sigma sqrt t) -> inf, as on the GPU
def test_greeks_kernel_agrees_with_cpu_backend(greeks_mod, rng, dtype):
    """The GPU kernel and the CPU backend (csrc/cpu/greeks_kernel.h) give the same numbers, NaNs
    and infinities: random chains and every edge case, calls and puts."""
    import tickgpu

    edges = np.array(EDGE_INPUTS, dtype=np.float64)
    chain = np.column_stack(random_chain(rng, 1000)[:6])
    X = np.concatenate([chain, edges, edges]).astype(dtype)
    call = np.concatenate([rng.integers(0, 2, len(chain)).astype(bool),
                           np.ones(len(edges), bool), np.zeros(len(edges), bool)])
    cols = [X[:, i] for i in range(6)]
    cpu = tickgpu.greeks(*cols, call=call, dtype=dtype, backend="cpu").as_dict()
    got = run_greeks(greeks_mod, dtype, *cols, call)
    tol = F64 if dtype == np.float64 else {**F32, "rtol": 2 * F32["rtol"], "input_eps": 2 * F32["input_eps"]}
    assert_greeks_close(got, *cols, call, want=cpu, **tol)


@pytest.mark.parametrize("programs,switches", [(1, {"PERSISTENT": True}), (3, {"PERSISTENT": True}),
                                               (None, {"FAST_PATH": False}), (None, {"STREAM": False}),
                                               (None, {"FAST_PATH": False, "CDF": 2})])
def test_greeks_kernel_switches(greeks_mod, rng, programs, switches):
    """The tuning switches change nothing in the results: a persistent grid (fewer programs than
    tiles, each stepping through them), no fast path, no cache hints; bad inputs and limits
    included, mixed into tiles of ordinary options. Bit for bit, except the fast path under CDF=3
    (the default), whose tiles near the money form e^{-qt} as e^{-rt} e^{(r-q)t}: within the
    float64 tolerance of the general path there."""
    chain = np.column_stack(random_chain(rng, 1000)[:6])
    X = np.concatenate([chain, np.array(EDGE_INPUTS, dtype=np.float64)])
    X = X[rng.permutation(len(X))]
    call = rng.integers(0, 2, len(X)).astype(bool)
    cols = [X[:, i] for i in range(6)]
    want = run_greeks(greeks_mod, np.float64, *cols, call, block=128, **{k: v for k, v in switches.items() if k == "CDF"})
    got = run_greeks(greeks_mod, np.float64, *cols, call, block=128, programs=programs, **switches)
    if switches.get("FAST_PATH") is False and "CDF" not in switches:
        assert_greeks_close(got, *cols, call, want=want, **F64)
        return
    for g in ref.GREEKS:
        np.testing.assert_array_equal(got[g], want[g], err_msg=g)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("cdf", [1, 2, 3])
def test_greeks_kernel_cdf_forms_agree(greeks_mod, rng, cdf):
    """float64's N(w d) from erfcx and exp(-d^2/2) (CDF=1: libdevice's erfcx for d1, erfc for d2;
    CDF=2: the erfcx table for both; CDF=3, the default: as 2, with d2's exponential from d1's
    in tiles near the money) against erfc (CDF=0): the same greeks to the float64 tolerance,
    calls and puts, tails and edges."""
    chain = np.column_stack(random_chain(rng, 1000)[:6])
    # Far wings: |d1| up to 35.5 (z = |d| / sqrt 2 through 12 of the erfcx table's 16 intervals),
    # where a deep out-of-the-money price is a difference of two tail probabilities. Not beyond:
    # there N(d2) is subnormal and SciPy's erfc, which stands for libdevice's here and in the
    # reference, flushes it to 0 (at d2 = -37.7 the table form gives the exact price, 5.6e-302,
    # and the erfc form 3.6e-300). test_erfcx_table.py checks the last intervals against mpmath.
    m = 400
    S = rng.uniform(50, 150, m)
    sig, t = rng.uniform(0.05, 0.6, m), rng.uniform(0.05, 3.0, m)
    d = rng.uniform(-35.5, 35.5, m)
    wings = np.column_stack([S, S * np.exp(-d * sig * np.sqrt(t)), t, rng.uniform(-0.01, 0.05, m), sig,
                             rng.uniform(0, 0.03, m)])
    chain = np.concatenate([chain, wings])
    edges = np.array(EDGE_INPUTS, dtype=np.float64)
    X = np.concatenate([chain, edges, edges])
    call = np.concatenate([rng.integers(0, 2, len(chain)).astype(bool),
                           np.ones(len(edges), bool), np.zeros(len(edges), bool)])
    cols = [X[:, i] for i in range(6)]
    erfc_form = run_greeks(greeks_mod, np.float64, *cols, call, block=128, CDF=0)
    got = run_greeks(greeks_mod, np.float64, *cols, call, block=128, CDF=cdf)
    assert_greeks_close(got, *cols, call, want=erfc_form, **F64)
    assert_greeks_close(got, *cols, call, **F64)


AT_THE_MONEY_STRIKES = np.concatenate([np.arange(1.0, 1001.0), np.round(np.arange(1.0, 10.0, 0.01), 2),
                                       [2.0**50 * (1 - 2**-53), 2.0**-50]])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("t", [1e-40, 1e-12, 1e-8, 1 / 365])
def test_greeks_kernel_at_the_money_is_at_the_money(greeks_mod, t):
    """S == K gives ln(S/K) = 0 exactly, as on the CPU: near expiry an option at the money has
    delta 1/2 and a huge gamma, not the limits of one an ulp in or out of the money. Every integer
    strike to 1,000 and every cent to 10 (S times a rounded reciprocal of K is 1 - 2^-53 for ~15%
    of them: 49, 98, 103, 237, 499, ...), in tiles of one warp as float64 ships."""
    K = AT_THE_MONEY_STRIKES
    n = K.size
    got = run_greeks(greeks_mod, np.float64, K, K, np.full(n, t), 0.0, 0.2, 0.0, np.ones(n, bool), block=32)
    cpu = tickgpu_greeks(K, K, t, 0.0, 0.2, 0.0, True, backend="cpu")
    for g in ("delta", "gamma", "vega", "vanna", "volga", "charm"):
        np.testing.assert_allclose(got[g], getattr(cpu, g), rtol=1e-12, atol=0, err_msg=f"t={t} {g}")
    # Price and theta are differences of two legs of ~K/2 each: known to the legs' rounding.
    for g in ("price", "theta"):
        leg = K if g == "price" else K * 0.2 / np.sqrt(t)
        assert np.all(np.abs(got[g] - getattr(cpu, g)) <= 1e-12 * leg), (t, g)


def tickgpu_greeks(*args, **kwargs):
    import tickgpu

    return tickgpu.greeks(*args, **kwargs)


def test_greeks_kernel_single_element(greeks_mod):
    got = run_greeks(greeks_mod, np.float64, *(np.array([v]) for v in (100.0, 95.0, 0.5, 0.03, 0.2, 0.01)),
                     np.array([False]))
    want, _, _ = ref.bsm_greeks(100.0, 95.0, 0.5, 0.03, 0.2, 0.01, False)
    for g in ref.GREEKS:
        np.testing.assert_allclose(got[g], want[g], rtol=1e-13, err_msg=g)


def test_greeks_kernel_second_order_greeks_match_finite_differences(greeks_mod, rng):
    """vanna, volga, charm from the kernel against central differences of the kernel's own
    delta and vega (a second algorithm: no closed form of a second-order greek involved)."""
    S, K, t, r, sig, q, call = random_chain(rng, 300)
    t = np.maximum(t, 0.05)
    h = 1e-5
    base = run_greeks(greeks_mod, np.float64, S, K, t, r, sig, q, call)
    up = run_greeks(greeks_mod, np.float64, S, K, t, r, sig + h, q, call)
    dn = run_greeks(greeks_mod, np.float64, S, K, t, r, sig - h, q, call)
    later = run_greeks(greeks_mod, np.float64, S, K, t - h, r, sig, q, call)
    earlier = run_greeks(greeks_mod, np.float64, S, K, t + h, r, sig, q, call)
    np.testing.assert_allclose(base["vanna"], (up["delta"] - dn["delta"]) / (2 * h), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(base["volga"], (up["vega"] - dn["vega"]) / (2 * h), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(base["charm"], (later["delta"] - earlier["delta"]) / (2 * h), rtol=1e-5, atol=1e-6)


# ---- the surface kernel --------------------------------------------------------------------

def run_surface(mod, strikes, expiries, vols, mode, k, t, what, block=256):
    k_t, s_k = _arg(k, np.float64)
    t_t, s_t = _arg(t, np.float64)
    n = max(np.size(k), np.size(t))
    out = torch.full((n,), 12345.0, dtype=torch.float64)
    grid = (triton.cdiv(n, block),)
    mod.vol_surface_kernel[grid](
        torch.from_numpy(np.ascontiguousarray(strikes, float)), torch.from_numpy(np.ascontiguousarray(expiries, float)),
        torch.from_numpy(np.ascontiguousarray(vols, float).reshape(-1)), len(strikes), len(expiries), mode,
        k_t, s_k, t_t, s_t, out, what, n, BLOCK_SIZE=block)
    return out.numpy()


def random_surface(rng, nk, nt):
    strikes = np.sort(rng.choice(np.arange(50.0, 151.0, 2.5), nk, replace=False))
    expiries = np.sort(rng.choice(np.array([7, 14, 30, 61, 91, 182, 365, 730]) / 365.0, nt, replace=False))
    vols = rng.uniform(0.05, 0.8, (nt, nk))
    return strikes, expiries, vols


def surface_queries(rng, strikes, expiries, n=400):
    k = np.concatenate([rng.uniform(30, 170, n), strikes, [strikes[0] - 1, strikes[-1] + 1, 1e-3, -5.0]])
    t = np.concatenate([rng.uniform(0, 3.0, n), rng.choice(expiries, len(strikes)), [0.0, 0.0, 5.0, 1e-9]])
    t[:20] = 0.0
    t[20:40] = rng.choice(expiries, 20)             # exactly on expiry rows
    k[40:60] = rng.choice(strikes, 20)              # exactly on strike columns
    return k, t


@pytest.mark.parametrize("nk,nt", [(1, 1), (1, 3), (4, 1), (2, 2), (7, 5)])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("what", [0, 1])
def test_surface_kernel_matches_reference(surface_mod, rng, nk, nt, mode, what):
    strikes, expiries, vols = random_surface(rng, nk, nt)
    k, t = surface_queries(rng, strikes, expiries)
    got = run_surface(surface_mod, strikes, expiries, vols, mode, k, t, what)
    want = ref.surface(strikes, expiries, vols, mode, k, t, what)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)


def test_surface_kernel_bad_queries_and_broadcast(surface_mod, rng):
    strikes, expiries, vols = random_surface(rng, 5, 4)
    k = np.array([np.nan, np.inf, 100.0, 100.0, 100.0, -np.inf])
    t = np.array([1.0, 1.0, -1e-9, np.nan, np.inf, 0.5])
    for mode in (0, 1):
        for what in (0, 1):
            assert np.isnan(run_surface(surface_mod, strikes, expiries, vols, mode, k, t, what)).all()
    # One strike (stride 0) across many times, block boundary crossed.
    t = np.linspace(0, 3, 600)
    got = run_surface(surface_mod, strikes, expiries, vols, 0, np.array([97.5]), t, 0)
    np.testing.assert_allclose(got, ref.surface(strikes, expiries, vols, 0, 97.5, t, 0), rtol=1e-13)


@pytest.mark.parametrize("interpolation,mode", [("variance", 0), ("vol", 1)])
def test_surface_kernel_agrees_with_cpu_backend(surface_mod, rng, interpolation, mode):
    import tickgpu

    for nk, nt in [(1, 1), (3, 1), (1, 4), (6, 5)]:
        strikes, expiries, vols = random_surface(rng, nk, nt)
        k, t = surface_queries(rng, strikes, expiries)
        k = np.concatenate([k, [np.nan, 100.0, np.inf, 100.0]])
        t = np.concatenate([t, [1.0, -0.5, 1.0, np.nan]])
        surf = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
        for what, cpu in ((0, surf.vol(k, t, backend="cpu")), (1, surf.variance(k, t, backend="cpu"))):
            got = run_surface(surface_mod, strikes, expiries, vols, mode, k, t, what)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(cpu))
            np.testing.assert_allclose(got, cpu, rtol=1e-14, atol=1e-300, err_msg=f"{interpolation} what={what}")


@pytest.mark.parametrize("interpolation,mode", [("variance", 0), ("vol", 1)])
def test_surface_kernel_edges_agree_with_cpu_backend(surface_mod, interpolation, mode):
    """Subnormal t before the first expiry (the vol is the first row's, not 0), and strikes whose
    span overflows (-1e308, 1e308: the weight from halved differences), as on the CPU."""
    import tickgpu

    for strikes, expiries, vols in (([90.0, 100.0], [0.25, 1.0], [[0.3, 0.2], [0.25, 0.2]]),
                                    ([-1e308, 1e308], [1.0], [[0.2, 0.4]]),
                                    ([-1.7e308, 0.0, 1.7e308], [0.5, 2.0], [[0.2, 0.3, 0.4], [0.25, 0.3, 0.35]]),
                                    ([100.0], [1.0], [[1e200]])):   # one strike, sigma^2 T overflowing
        k = np.array([95.0, 95.0, 95.0, 90.0, 0.0, 1e308, -1e308, 5e307, 100.0])
        t = np.array([5e-324, 1e-320, 1e-310, 0.0, 1.0, 1.0, 0.3, 1.5, 0.1])
        if interpolation == "variance" and vols == [[1e200]]:
            with pytest.raises(ValueError, match=r"total variance vol\^2 t"):   # refused: inf variances
                tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
            continue
        surf = tickgpu.VolSurface(strikes, expiries, vols, interpolation=interpolation)
        for what, cpu in ((0, surf.vol(k, t, backend="cpu")), (1, surf.variance(k, t, backend="cpu"))):
            got = run_surface(surface_mod, np.array(strikes), np.array(expiries), np.array(vols), mode, k, t, what)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(cpu))
            np.testing.assert_allclose(got, cpu, rtol=1e-14, atol=0, err_msg=f"{strikes} {interpolation} what={what}")
    # The documented value: the first expiry's vol at every t up to it.
    surf = tickgpu.VolSurface([90.0, 100.0], [0.25, 1.0], [[0.3, 0.2], [0.25, 0.2]])
    first = surf.vol(95.0, 0.25, backend="cpu")
    got = run_surface(surface_mod, np.array([90.0, 100.0]), np.array([0.25, 1.0]), np.array([[0.3, 0.2], [0.25, 0.2]]),
                      0, np.full(3, 95.0), np.array([5e-324, 1e-300, 0.1]), 0)
    np.testing.assert_allclose(got, first, rtol=1e-15)


def test_surface_kernel_flat_vol_for_huge_t(surface_mod, rng):
    """Beyond the last expiry, where w(T_last) t overflows: the vol is still the last row's and the
    variance w(T_last) (t / T_last) where that is finite, bit for bit the CPU backend's."""
    import tickgpu

    strikes = np.sort(rng.uniform(50, 150, 7))
    expiries = np.sort(rng.uniform(0.1, 3.0, 4))
    vols = rng.uniform(0.1, 0.6, (4, 7))
    vols[-1] = rng.uniform(1.0, 3.0, 7)            # w(T_last) > 1: w t overflows near DBL_MAX
    cases = [(strikes, expiries, vols), (np.array([100.0]), np.array([1.0]), np.array([[1e100]])),
             (np.array([100.0]), np.array([4.0]), np.array([[2.0]]))]
    t_huge = np.array([1e100, 1e200, 1e300, 1e307, 4e307, 1e308, np.finfo(np.float64).max])
    for strikes, expiries, vols in cases:
        k = np.concatenate([rng.uniform(strikes[0] - 10, strikes[-1] + 10, t_huge.size), strikes[:1]])
        t = np.concatenate([t_huge, [expiries[-1] * 3.0]])
        surf = tickgpu.VolSurface(strikes, expiries, vols)
        for what, cpu in ((0, surf.vol(k, t, backend="cpu")), (1, surf.variance(k, t, backend="cpu"))):
            got = run_surface(surface_mod, strikes, expiries, vols, 0, k, t, what)
            np.testing.assert_array_equal(got, cpu, err_msg=f"what={what} {vols.shape}")
        assert np.all(np.isfinite(surf.vol(k, t, backend="cpu")))
    # The documented values: vol 2.0 at every t, the variance 16 (t / 4) until it overflows.
    got = run_surface(surface_mod, np.array([100.0]), np.array([4.0]), np.array([[2.0]]), 0,
                      np.full(2, 100.0), np.array([4e307, 1e308]), 1)
    assert got[0] == 16.0 * (4e307 / 4.0) and got[1] == np.inf
    got = run_surface(surface_mod, np.array([100.0]), np.array([4.0]), np.array([[2.0]]), 0,
                      np.full(2, 100.0), np.array([4e307, 1e308]), 0)
    np.testing.assert_array_equal(got, [2.0, 2.0])


def test_surface_kernel_matches_quantlib_variance_surface(surface_mod, rng):
    """Mode 0 is QuantLib's BlackVarianceSurface with flat strike extrapolation."""
    ql = pytest.importorskip("QuantLib")
    today = ql.Date(15, 6, 2026)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    days = [30, 91, 182, 365]
    strikes = [80.0, 90.0, 100.0, 110.0, 125.0]
    vols = rng.uniform(0.1, 0.5, (len(days), len(strikes)))
    matrix = ql.Matrix(len(strikes), len(days))
    for i in range(len(strikes)):
        for j in range(len(days)):
            matrix[i][j] = float(vols[j, i])
    surf = ql.BlackVarianceSurface(today, ql.NullCalendar(), [today + d for d in days], strikes, matrix, dc,
                                   ql.BlackVarianceSurface.ConstantExtrapolation,
                                   ql.BlackVarianceSurface.ConstantExtrapolation)
    surf.enableExtrapolation()
    expiries = np.array([dc.yearFraction(today, today + d) for d in days])
    k = rng.uniform(60, 140, 300)
    t = rng.uniform(0.001, 2.0, 300)
    got_vol = run_surface(surface_mod, strikes, expiries, vols, 0, k, t, 0)
    got_var = run_surface(surface_mod, strikes, expiries, vols, 0, k, t, 1)
    want_vol = np.array([surf.blackVol(float(tt), float(kk)) for kk, tt in zip(k, t)])
    want_var = np.array([surf.blackVariance(float(tt), float(kk)) for kk, tt in zip(k, t)])
    np.testing.assert_allclose(got_vol, want_vol, rtol=1e-12)
    np.testing.assert_allclose(got_var, want_var, rtol=1e-12)
