"""The staged tick's C entry (tickgpu._fasttick) on the GPU (``pytest -m gpu``): greeks and implied vols.

On a real driver the runtime turns the entry on by itself; here every call it may take must be
taken (its counters say so), give the Python path's bits for the same call, and agree with the
CPU backend -- across sizes sharing buckets, both dtypes, single values and arrays, and Python-path
calls in between on the same staging.
"""
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.finance import greeks as greeks_mod
from tickgpu.finance import iv as iv_mod
from tickgpu.runtime import staged

pytestmark = pytest.mark.gpu

NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")
GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


@pytest.fixture(scope="module")
def ctx():
    c = rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle")
    rt.warmup()
    assert c.tickers is not None, "the C entry is off on a real driver (tickgpu._fasttick missing?)"
    assert greeks_mod._fast is not None
    yield c
    rt.reset()


def taken(c, op="greeks") -> int:
    head = c.tickers[op]
    return head.calls + head.other.calls


def python_path(**kw):
    saved = greeks_mod._fast
    greeks_mod._fast = None
    try:
        return tickgpu.greeks(**kw)
    finally:
        greeks_mod._fast = saved


def _arg(rng, name, n, dtype):
    """(value, the C entry takes it)"""
    if name == "call":
        k = rng.integers(3)
        return ((bool(rng.integers(2)), True), (rng.random(n) < 0.5, True),
                ((rng.random(n) < 0.5).astype(np.uint8), False))[k]
    lo, hi = {"spot": (50, 150), "strike": (50, 150), "t": (0.01, 2), "rate": (0, 0.05), "vol": (0.05, 0.8),
              "div": (0, 0.03)}[name]
    k = rng.integers(5)
    if k == 0:
        return float(rng.uniform(lo, hi)), True
    if k == 1:
        return rng.uniform(lo, hi, n), dtype == np.float64     # float64: converted for a float32 call
    return rng.uniform(lo, hi, n).astype(dtype), True


@pytest.mark.parametrize("seed", range(3))
def test_random_ticks_in_c_give_the_python_paths_bits_and_the_cpu_backends_values(ctx, seed):
    rng = np.random.default_rng(1000 + seed)
    for step in range(150):
        dtype = (np.float64, np.float32)[rng.integers(2)]
        n = int(rng.choice([1, 16, 17, 100, 113, 1000, 1024, 1025, 4096, 65536, 65537]))
        kw, ok = {}, {}
        for name in NAMES:
            kw[name], ok[name] = _arg(rng, name, n, dtype)
        kw["strike"], ok["strike"] = rng.uniform(50, 150, n).astype(dtype), True   # one array at least
        if rng.random() < 0.2:
            python_path(**kw, dtype=dtype, backend="gpu")
            continue
        known = ("greeks", np.dtype(dtype).char, n) in ctx.ticks or \
            ("greeks", np.dtype(dtype).char, staged.bucket(n, ctx.staging_elements), 0, (), None, None) in ctx.plans
        before = taken(ctx)
        g = tickgpu.greeks(**kw, dtype=dtype, backend="gpu")
        assert taken(ctx) - before == int(all(ok.values()) and known), (step, n, dtype)
        p = python_path(**kw, dtype=dtype, backend="gpu")
        cpu = tickgpu.greeks(**kw, dtype=dtype, backend="cpu")
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for k in GREEKS:
            a, b = getattr(g, k), getattr(p, k)
            assert type(a) is np.ndarray and a.dtype == dtype and a.shape == (n,), k
            assert a.tobytes() == b.tobytes(), (step, k)
            c = getattr(cpu, k).astype(np.float64)
            scale = np.max(np.abs(c[np.isfinite(c)]), initial=0.0)
            np.testing.assert_allclose(a.astype(np.float64), c, rtol=tol * 10, atol=tol * 10 * scale,
                                       err_msg=f"{k} step {step}")


def test_the_first_call_of_a_size_after_warmup_is_taken_in_c(ctx):
    """Warm-up built every bucket's plan: a size never called runs in C at once."""
    rng = np.random.default_rng(9)
    fresh = [n for n in (1000, 777, 3001, 12345, 999, 1001, 3333) if ("greeks", "d", n) not in ctx.ticks]
    assert len(fresh) >= 3
    for n in fresh:
        x = {k: rng.uniform(0.5, 1.5, n) * v for k, v in
             dict(spot=100.0, strike=100.0, t=1.0, rate=0.03, vol=0.2, div=0.01).items()}
        before = taken(ctx)
        g = tickgpu.greeks(**x, call=True, backend="gpu")
        assert taken(ctx) == before + 1, n
        np.testing.assert_allclose(g.price, tickgpu.greeks(**x, call=True, backend="cpu").price, rtol=1e-11)


def test_implied_vols_in_c_give_the_python_paths_bits_and_solve_the_cpu_prices(ctx):
    rng = np.random.default_rng(21)
    names = ("price", "spot", "strike", "t", "rate", "div", "call")
    for dtype, n in ((np.float64, 1024), (np.float64, 333), (np.float32, 1024), (np.float64, 70000)):
        x = dict(spot=rng.uniform(80, 120, n), strike=rng.uniform(80, 120, n), t=rng.uniform(0.1, 2, n),
                 rate=0.03, vol=rng.uniform(0.1, 0.6, n), div=0.01, call=rng.random(n) < 0.5)
        x = {k: (v.astype(dtype) if isinstance(v, np.ndarray) and k != "call" else v) for k, v in x.items()}
        price = tickgpu.greeks(**x, dtype=dtype, backend="cpu").price
        q = dict({k: x[k] for k in names if k != "price"}, price=price)
        tickgpu.implied_vol(**q, dtype=dtype, backend="gpu")     # the size's plan, if warm-up built none
        before = taken(ctx, "implied_vol")
        vol, status = tickgpu.implied_vol(**q, dtype=dtype, backend="gpu", return_status=True)
        assert taken(ctx, "implied_vol") == before + 1
        saved, iv_mod._fast = iv_mod._fast, None
        try:
            pv, ps = tickgpu.implied_vol(**q, dtype=dtype, backend="gpu", return_status=True)
        finally:
            iv_mod._fast = saved
        assert vol.tobytes() == pv.tobytes() and status.tobytes() == ps.tobytes()
        ok = status == 0
        assert ok.mean() > 0.95
        if dtype == np.float64:
            # The vols reprice the quotes (a vol itself is only as well known as vega lets it be;
            # float32 vols against the CPU backend's: test_gpu_ops, through the Python path).
            again = tickgpu.greeks(**dict(x, vol=vol), backend="cpu").price
            np.testing.assert_allclose(again[ok], price[ok], rtol=1e-12, atol=1e-13 * 120)


def test_results_written_into_result_blocks_stay_put_while_held(ctx):
    """Ticks on mapped staging hand results out in pinned blocks the GPU wrote them into; a block
    is rewritten only once nothing of its results is alive, and with all of them held a call
    copies its results out of staging instead."""
    from tickgpu.runtime import fasttick

    rng = np.random.default_rng(31)
    n = 1024
    base = dict(strike=rng.uniform(80, 120, n).astype(np.float32), t=0.5, rate=0.02, vol=0.3, div=0.0, call=True)
    tickgpu.greeks(spot=np.full(n, 100.0, np.float32), **base, dtype=np.float32, backend="gpu")
    plan = ctx.ticks[("greeks", "f", n)].fast
    assert plan is not None and ctx.ticks[("greeks", "f", n)].mapped
    held = []
    for k in range(fasttick.RESULT_BLOCKS + 2):
        spot = np.full(n, 90.0 + 5 * k, np.float32)
        direct = plan.direct
        g = tickgpu.greeks(spot=spot, **base, dtype=np.float32, backend="gpu")
        assert plan.direct == direct + (k < fasttick.RESULT_BLOCKS), k
        want = tickgpu.greeks(spot=spot, **base, dtype=np.float32, backend="cpu")
        np.testing.assert_allclose(g.price, want.price, rtol=1e-4, atol=1e-4)
        held.append((g, {name: getattr(g, name).copy() for name in GREEKS}))
    for g, saved in held:
        for name in GREEKS:
            assert getattr(g, name).tobytes() == saved[name].tobytes(), name
    del held, g
    direct = plan.direct
    tickgpu.greeks(spot=np.full(n, 100.0, np.float32), **base, dtype=np.float32, backend="gpu")
    assert plan.direct == direct + 1


def test_calls_on_cupy_arrays_are_taken_in_c_with_the_python_paths_bits(ctx):
    """Greeks on seven CuPy arrays of one length: taken by the C entry (its device counter), the
    Python path's bits, the CPU backend's values; on another stream too, and at sizes whose
    addresses leave the aligned variants; anything else (a single value, mixed lengths) the Python
    path's."""
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(77)
    head = ctx.tickers["greeks"]
    count = lambda: head.device_calls + head.other.device_calls  # noqa: E731
    stream = cp.cuda.Stream(non_blocking=True)
    for dtype, n, on_stream, offset in ((np.float64, 1024, False, 0), (np.float32, 1024, False, 0),
                                        (np.float64, 17, False, 0), (np.float32, 100003, True, 0),
                                        (np.float64, 4096, True, 1), (np.float32, 1, False, 0)):
        host = {k: rng.uniform(lo, hi, n + offset).astype(dtype)[offset:] for k, (lo, hi) in
                dict(spot=(50, 150), strike=(50, 150), t=(0.01, 2), rate=(0, 0.05), vol=(0.05, 0.8),
                     div=(0, 0.03)).items()}
        host["call"] = rng.random(n) < 0.5
        with (stream if on_stream else cp.cuda.Stream.null):
            x = {k: cp.asarray(np.ascontiguousarray(v)) if offset == 0 else cp.asarray(np.concatenate([np.zeros(1, v.dtype), v]))[1:]
                 for k, v in host.items()}
            if offset:
                x["call"] = cp.asarray(host["call"])
            before = count()
            g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
            assert count() == before + 1, (dtype, n)
            p = python_path(**x, dtype=dtype, backend="gpu")
            cp.cuda.get_current_stream().synchronize()
        cpu = tickgpu.greeks(**host, dtype=dtype, backend="cpu")
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for k in GREEKS:
            a = getattr(g, k)
            assert isinstance(a, cp.ndarray) and a.dtype == dtype and a.shape == (n,), k
            assert cp.asnumpy(a).tobytes() == cp.asnumpy(getattr(p, k)).tobytes(), (n, k)
            c = getattr(cpu, k).astype(np.float64)
            scale = np.max(np.abs(c[np.isfinite(c)]), initial=0.0)
            np.testing.assert_allclose(cp.asnumpy(a).astype(np.float64), c, rtol=tol * 10, atol=tol * 10 * scale,
                                       err_msg=f"{k} n {n}")
    # Single values mixed in (through the constants ring), on the null stream and another, both
    # dtypes: taken too, the Python path's bits and the CPU backend's values.
    for dtype, on_stream in ((np.float64, False), (np.float32, True), (np.float64, True)):
        host = {k: (rng.uniform(0.5, 1.5, 64) * v).astype(dtype) for k, v in
                dict(spot=100.0, strike=100.0, t=1.0, rate=0.03, vol=0.2, div=0.01).items()}
        with (stream if on_stream else cp.cuda.Stream.null):
            x = {k: cp.asarray(v) for k, v in host.items()}
            for values in (dict(rate=0.03), dict(rate=0.03, div=0, call=True), dict(call=False, vol=0.25, t=2)):
                args = dict(dict(x, call=cp.asarray(rng.random(64) < 0.5)), **values)
                before = count()
                g = tickgpu.greeks(**args, dtype=dtype, backend="gpu")
                assert count() == before + 1, values
                p = python_path(**args, dtype=dtype, backend="gpu")
                cp.cuda.get_current_stream().synchronize()
                cpu = tickgpu.greeks(**{k: cp.asnumpy(v) if isinstance(v, cp.ndarray) else v for k, v in args.items()},
                                     dtype=dtype, backend="cpu")
                for k in GREEKS:
                    a = cp.asnumpy(getattr(g, k))
                    assert a.tobytes() == cp.asnumpy(getattr(p, k)).tobytes(), (values, k)
                    c = getattr(cpu, k).astype(np.float64)
                    tol = 1e-12 if dtype == np.float64 else 1e-5
                    np.testing.assert_allclose(a.astype(np.float64), c, rtol=tol * 10,
                                               atol=tol * 10 * np.max(np.abs(c[np.isfinite(c)]), initial=0.0))
    before = count()
    tickgpu.greeks(**dict(x, rate=cp.asarray(np.full(1, 0.03))), call=True, backend="gpu")   # a one-element array
    assert count() == before


def _device_count(c, op):
    head = c.tickers[op]
    return head.device_calls + head.other.device_calls


def test_calls_on_torch_tensors_are_taken_in_c_with_the_python_paths_bits(ctx):
    """Greeks and implied vols on seven CUDA tensors of one length: taken by the C entry (its device
    counter), on PyTorch's current stream (the default one and a side stream), the Python path's
    bits, the CPU backend's values; a tensor that wants a gradient or a strided one goes to the
    Python path and its error."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    rng = np.random.default_rng(78)
    dev = torch.device("cuda", ctx.ordinal)
    side = torch.cuda.Stream(device=dev)
    for dtype, n, on_side in ((np.float64, 1024, False), (np.float32, 1024, True), (np.float64, 17, True),
                              (np.float32, 100003, False), (np.float64, 1, False)):
        host = {k: rng.uniform(lo, hi, n).astype(dtype) for k, (lo, hi) in
                dict(spot=(80, 120), strike=(80, 120), t=(0.1, 2), rate=(0, 0.05), vol=(0.1, 0.6),
                     div=(0, 0.03)).items()}
        host["call"] = rng.random(n) < 0.5
        with torch.cuda.stream(side if on_side else torch.cuda.default_stream(dev)):
            x = {k: torch.from_numpy(v).to(dev) for k, v in host.items()}
            before = _device_count(ctx, "greeks")
            g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
            assert _device_count(ctx, "greeks") == before + 1, (dtype, n)
            p = python_path(**x, dtype=dtype, backend="gpu")
            cpu = tickgpu.greeks(**host, dtype=dtype, backend="cpu")
            q = dict({k: x[k] for k in ("spot", "strike", "t", "rate", "div", "call")},
                     price=torch.from_numpy(cpu.price).to(dev))
            before = _device_count(ctx, "implied_vol")
            vol, status = tickgpu.implied_vol(**q, dtype=dtype, backend="gpu", return_status=True)
            assert _device_count(ctx, "implied_vol") == before + 1, (dtype, n)
            saved, iv_mod._fast = iv_mod._fast, None
            try:
                pv, ps = tickgpu.implied_vol(**q, dtype=dtype, backend="gpu", return_status=True)
            finally:
                iv_mod._fast = saved
            torch.cuda.current_stream(dev).synchronize()
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for k in GREEKS:
            a = getattr(g, k)
            assert isinstance(a, torch.Tensor) and a.dtype == x["spot"].dtype and tuple(a.shape) == (n,), k
            assert a.cpu().numpy().tobytes() == getattr(p, k).cpu().numpy().tobytes(), (n, k)
            c = getattr(cpu, k).astype(np.float64)
            scale = np.max(np.abs(c[np.isfinite(c)]), initial=0.0)
            np.testing.assert_allclose(a.cpu().numpy().astype(np.float64), c, rtol=tol * 10, atol=tol * 10 * scale,
                                       err_msg=f"{k} n {n}")
        assert vol.cpu().numpy().tobytes() == pv.cpu().numpy().tobytes()
        assert status.dtype == torch.int8 and status.cpu().numpy().tobytes() == ps.cpu().numpy().tobytes()
        ok = status.cpu().numpy() == 0
        assert ok.mean() > 0.9
        if dtype == np.float64:
            again = tickgpu.greeks(**dict(host, vol=vol.cpu().numpy()), backend="cpu").price
            np.testing.assert_allclose(again[ok], cpu.price[ok], rtol=1e-12, atol=1e-13 * 120)
    x = {k: torch.from_numpy(rng.uniform(0.5, 1.5, 64) * v).to(dev) for k, v in
         dict(spot=100.0, strike=100.0, t=1.0, rate=0.03, vol=0.2, div=0.01).items()}
    x["call"] = torch.ones(64, dtype=torch.bool, device=dev)
    before = _device_count(ctx, "greeks")
    with pytest.raises(TypeError, match="vol"):
        tickgpu.greeks(**dict(x, vol=x["vol"].clone().requires_grad_()), backend="gpu")
    with pytest.raises(ValueError, match="spot"):
        tickgpu.greeks(**dict(x, spot=torch.cat([x["spot"], x["spot"]])[::2]), backend="gpu")
    assert _device_count(ctx, "greeks") == before
    # single values mixed in: taken too, the Python path's bits
    g = tickgpu.greeks(**dict(x, rate=0.02, div=0, call=True), backend="gpu")
    p = python_path(**dict(x, rate=0.02, div=0, call=True), backend="gpu")
    torch.cuda.synchronize()
    assert _device_count(ctx, "greeks") == before + 1
    for k in GREEKS:
        assert getattr(g, k).cpu().numpy().tobytes() == getattr(p, k).cpu().numpy().tobytes(), k


def test_implied_vols_on_cupy_arrays_are_taken_in_c(ctx):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(79)
    stream = cp.cuda.Stream(non_blocking=True)
    for dtype, n, on_stream in ((np.float64, 1024, False), (np.float32, 1024, True), (np.float64, 100003, True)):
        host = dict(spot=rng.uniform(80, 120, n), strike=rng.uniform(80, 120, n), t=rng.uniform(0.1, 2, n),
                    rate=rng.uniform(0, 0.05, n), vol=rng.uniform(0.1, 0.6, n), div=rng.uniform(0, 0.03, n))
        host = {k: v.astype(dtype) for k, v in host.items()}
        host["call"] = rng.random(n) < 0.5
        price = tickgpu.greeks(**host, dtype=dtype, backend="cpu").price
        q = dict({k: host[k] for k in ("spot", "strike", "t", "rate", "div", "call")}, price=price)
        with (stream if on_stream else cp.cuda.Stream.null):
            x = {k: cp.asarray(v) for k, v in q.items()}
            before = _device_count(ctx, "implied_vol")
            vol, status = tickgpu.implied_vol(**x, dtype=dtype, backend="gpu", return_status=True)
            assert _device_count(ctx, "implied_vol") == before + 1
            saved, iv_mod._fast = iv_mod._fast, None
            try:
                pv, ps = tickgpu.implied_vol(**x, dtype=dtype, backend="gpu", return_status=True)
            finally:
                iv_mod._fast = saved
            cp.cuda.get_current_stream().synchronize()
        cv, cs = tickgpu.implied_vol(**q, dtype=dtype, backend="cpu", return_status=True)
        assert isinstance(vol, cp.ndarray) and vol.dtype == dtype and status.dtype == np.int8
        assert cp.asnumpy(vol).tobytes() == cp.asnumpy(pv).tobytes()
        assert cp.asnumpy(status).tobytes() == cp.asnumpy(ps).tobytes()
        # The CPU backend's statuses (up to the intrinsic band's edge, where exp's last ulp decides:
        # test_gpu_ops._iv_agree) and, where both solved, its vols / the quotes repriced.
        sg, vg = cp.asnumpy(status), cp.asnumpy(vol)
        assert (sg == cs).mean() > 0.999
        ok = (sg == 0) & (cs == 0)
        assert ok.mean() > 0.9
        if dtype == np.float64:
            again = tickgpu.greeks(**dict(host, vol=vg), backend="cpu").price
            np.testing.assert_allclose(again[ok], price[ok], rtol=1e-12, atol=1e-13 * 120)
        else:
            np.testing.assert_allclose(vg[ok], cv[ok], rtol=1e-5)
