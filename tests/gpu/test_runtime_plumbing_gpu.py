"""The runtime on a real GPU with the plumbing bundle (tests/gpu/plumbing): closed-form kernels of
the contract's signatures, so packing, staging layouts, graph capture and node updates, the C hot
path and GPU-array interop are checked against `cuda_mock.expected_*` independently of the
finance kernels.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tickgpu.runtime as rt
from tickgpu.runtime import ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))
from cuda_mock import expected_greeks, expected_iv, expected_surface  # noqa: E402

pytestmark = pytest.mark.gpu

PLUMBING = Path(__file__).resolve().parent / "plumbing" / "bundle"
CHUNK = 1024


@pytest.fixture(scope="module")
def ctx():
    c = rt.init(bundle_dir=PLUMBING, staging_elements=CHUNK)
    ops.warmup(c)
    yield c
    rt.reset()


def _inputs(rng, n, dtype):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype),
                call=rng.random(n) < 0.5)


def _f64(d):
    return {k: (np.asarray(v, dtype=np.float64) if k != "call" else v) for k, v in d.items()}


def _close(a, b, dtype):
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 2e-6
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, rtol=tol, atol=tol)


def test_hot_path_in_use(ctx):
    assert ctx.driver.has_hot_path
    assert ctx.arch in ("sm_80", "sm_90")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, CHUNK, CHUNK + 1, 7 * CHUNK + 3])
def test_host_greeks_and_iv(ctx, rng, dtype, n):
    d = _inputs(rng, n, dtype)
    out = ops.greeks(**d, dtype=dtype, shape=(n,))
    want = expected_greeks(**_f64(d))
    for k in want:
        _close(out[k], want[k], dtype)
    d.pop("vol")
    price = rng.uniform(1, 20, n).astype(dtype)
    vol, status = ops.implied_vol(price, **d, dtype=dtype, shape=(n,))
    wv, ws = expected_iv(price.astype(np.float64), **_f64(d))
    _close(vol, wv, dtype)
    np.testing.assert_array_equal(status, ws)


def test_host_surface_and_broadcast(ctx, rng):
    strikes, expiries = np.sort(rng.uniform(50, 150, 9)), np.sort(rng.uniform(0.1, 3, 4))
    vols = rng.uniform(0.1, 0.5, (4, 9))
    for n in (1, 300, 3 * CHUNK + 1):
        k = rng.uniform(40, 160, n)
        out = ops.surface_eval(strikes, expiries, vols, 1, k, 0.4, what=1, shape=(n,))
        _close(out, expected_surface(strikes, expiries, vols.ravel(), 1, k, 0.4, 1), np.float64)
    out = ops.greeks(100.0, np.array([90.0, 110.0]), 1.0, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=(2,))
    _close(out["delta"], expected_greeks(100.0, np.array([90.0, 110.0]), 1.0, 0.01, 0.2, 0.0, True)["delta"],
           np.float64)


def test_ticks_replay_without_capture_or_update(ctx, rng):
    """After warm-up every tick size has its graph: sizes hopping between buckets and any mix of
    single values replay with no capture and no node update; a pipeline with a new pattern
    re-points the shared graphs in place (no capture, no refusal)."""
    runners = {k: r for k, r in ctx.runners.items() if k[0] == "greeks" and k[1] == "f64"}
    before = {k: dict(r.stats) for k, r in runners.items()}
    for n in (5, 600, 5, 1000, 3, CHUNK):
        d = _inputs(rng, n, np.float64)
        out = ops.greeks(**d, dtype=np.float64, shape=(n,))
        _close(out["volga"], expected_greeks(**_f64(d))["volga"], np.float64)
        d = dict(d, t=0.25, rate=0.03, call=True)
        out = ops.greeks(**d, dtype=np.float64, shape=(n,))
        _close(out["volga"], expected_greeks(**_f64(d))["volga"], np.float64)
    r0 = runners[("greeks", "f64", 0)]
    for what in ("captures", "kernel_updates", "copy_updates"):
        assert r0.stats[what] == before[("greeks", "f64", 0)][what], what
    n = 3 * CHUNK + 5
    d = dict(_inputs(rng, n, np.float64), vol=0.3, div=0.01)
    out = ops.greeks(**d, dtype=np.float64, shape=(n,))
    _close(out["charm"], expected_greeks(**_f64(d))["charm"], np.float64)
    for k, r in runners.items():
        assert r.stats.get("update_refusals", 0) == 0, getattr(r, "last_update_error", "")
        assert r.stats["captures"] == before[k]["captures"]


@pytest.mark.parametrize("mapped", [0, 4096])
def test_ticks_on_mapped_staging_and_on_copy_graphs(rng, mapped):
    """Small ticks run the kernel on mapped pinned staging (zero copy) by default; with that off,
    copy -> kernel -> copy. Both against the closed form, arrays and single values mixed."""
    from tickgpu.runtime import staged
    from tickgpu.runtime.device import Context

    c = Context(bundle_dir=PLUMBING, staging_elements=1 << 14)
    c.mapped_elements = mapped
    for dtype in (np.float64, np.float32):
        for n in (1, 17, 1000, 4096, 5000):
            d = dict(_inputs(rng, n, dtype), t=0.75, call=False)
            outs = staged.host_call(lambda: c, ops.GREEKS, np.dtype(dtype), (n,), tuple(d.values()), (), None)
            want = expected_greeks(**_f64(d))
            for name, o in zip(ops.GREEKS_OUTPUTS, outs):
                _close(o, want[name], dtype)
            plan = c.ticks[("greeks", np.dtype(dtype).char, n)]
            assert plan.mapped == (plan.m <= mapped)


def test_large_pipeline_with_copy_threads(rng):
    """Chunks of 2**16 elements (megabytes per array: the copy threads take part) through the
    native pipeline, with single values mixed in, against the closed form."""
    from tickgpu.runtime import staged
    from tickgpu.runtime.device import Context

    c = Context(bundle_dir=PLUMBING, staging_elements=1 << 16)
    assert c.driver.has_hot_path
    for dtype in (np.float64, np.float32):
        n = 5 * (1 << 16) + 77
        d = dict(_inputs(rng, n, dtype), rate=0.02)
        outs = staged.host_call(lambda: c, ops.GREEKS, np.dtype(dtype), (n,), tuple(d.values()), (), None)
        want = expected_greeks(**_f64(d))
        for name, o in zip(ops.GREEKS_OUTPUTS, outs):
            _close(o, want[name], dtype)
        # one tick of a whole chunk: the round trip's copies are threaded too
        n = 1 << 16
        d = _inputs(rng, n, dtype)
        outs = staged.host_call(lambda: c, ops.GREEKS, np.dtype(dtype), (n,), tuple(d.values()), (), None)
        _close(outs[3], expected_greeks(**_f64(d))["vega"], dtype)


def test_no_allocations_after_warmup(ctx, rng):
    before = dict(ctx.driver.counts)
    for n in (1, 100, CHUNK, 3 * CHUNK + 7):
        d = _inputs(rng, n, np.float32)
        ops.greeks(**d, dtype=np.float32, shape=(n,))
    assert ctx.driver.counts == before


@pytest.mark.parametrize("pattern", ["arrays", "scalars"])
def test_first_call_after_warmup_builds_nothing(rng, pattern):
    """In a fresh context: after warm-up the first tick finds everything made -- no driver
    allocation, module load or graph instantiation, no new plan or graph, no graph update --
    whether the call passes arrays or single values. (What the first call costs in time is
    measured by `tickgpu bench --suite gpu`, warm_start, not asserted here.)"""
    from tickgpu.runtime import staged
    from tickgpu.runtime.device import Context

    c = Context(bundle_dir=PLUMBING, staging_elements=CHUNK)
    ops.warmup(c)
    n = 1000
    d = _inputs(rng, n, np.float32)
    if pattern == "scalars":
        d = dict(spot=d["spot"], strike=d["strike"], t=0.5, rate=0.01, vol=0.2, div=0.0, call=True)
    before = (dict(c.driver.counts), len(c.plans), sum(len(r.graphs) for r in c.runners.values()))
    out = staged.host_call(lambda: c, ops.GREEKS, np.dtype(np.float32), (n,), tuple(d.values()), (), None)
    after = (dict(c.driver.counts), len(c.plans), sum(len(r.graphs) for r in c.runners.values()))
    assert after == before
    ref = expected_greeks(*(np.broadcast_to(np.asarray(v, np.float64), (n,)) for v in d.values()))
    for name, o in zip(ops.GREEKS_OUTPUTS, out):
        np.testing.assert_allclose(o, ref[name], rtol=1e-5)


def test_cupy_arrays(ctx, rng):
    cp = pytest.importorskip("cupy")
    n = 5000
    d = _inputs(rng, n, np.float64)
    dev = {k: cp.asarray(v) for k, v in d.items()}
    dev["rate"] = 0.03
    out = ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert isinstance(out["price"], cp.ndarray)
    _close(cp.asnumpy(out["price"]), expected_greeks(**_f64(dict(d, rate=0.03)))["price"], np.float64)
    with pytest.raises(ValueError, match="not C-contiguous"):
        ops.greeks(**dict(dev, spot=cp.asarray(np.ones(2 * n))[::2]), dtype=np.float64, shape=(n,))


@pytest.mark.parametrize("hold", ["nothing", "row", "view", "memory pointer", "dlpack export"])
def test_cupy_results_are_reused_only_when_nothing_reaches_them(ctx, rng, hold):
    """A call's CuPy results are handed out again by a later call only once the caller holds no
    array, view, memory pointer or export of them; every call's values are its own, and what the
    caller still holds is never rewritten."""
    cp = pytest.importorskip("cupy")
    from tickgpu.runtime import arrays

    arrays.forget_results()
    n = 1024
    a, b = _inputs(rng, n, np.float64), _inputs(rng, n, np.float64)

    def call(d):
        out = ops.greeks(**{k: cp.asarray(v) for k, v in d.items()}, dtype=np.float64, shape=(n,))
        cp.cuda.get_current_stream().synchronize()
        return out

    def check(out, d):
        ref = expected_greeks(**_f64(d))
        for k, v in out.items():
            _close(cp.asnumpy(v), ref[k], np.float64)

    out = call(a)
    check(out, a)
    first = {k: id(v) for k, v in out.items()}
    kept = {"nothing": lambda: None, "row": lambda: out["delta"], "view": lambda: out["gamma"][3:9],
            "memory pointer": lambda: out["vega"].data,
            "dlpack export": lambda: out["theta"].__dlpack__()}[hold]()
    held = cp.asnumpy(out["delta"] if hold == "row" else out["gamma"][3:9]) if hold in ("row", "view") else None
    del out
    out = call(b)
    check(out, b)
    same = {k: id(v) for k, v in out.items()} == first
    assert same == (hold == "nothing")
    if held is not None:
        np.testing.assert_array_equal(cp.asnumpy(kept), held)


def test_torch_results_are_rows_of_one_block(ctx, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    n = 777
    d = _inputs(rng, n, np.float64)
    dev = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in d.items()}
    out = ops.greeks(**dev, dtype=np.float64, shape=(n,))
    torch.cuda.synchronize()
    base = out["price"].untyped_storage().data_ptr()
    assert all(v.untyped_storage().data_ptr() == base and v.shape == (n,) and v.is_contiguous() for v in out.values())
    ref = expected_greeks(**_f64(d))
    for k, v in out.items():
        _close(v.cpu().numpy(), ref[k], np.float64)
    # tensors are read from their own attributes, not their interface; one that requires grad is refused by name
    with pytest.raises(TypeError, match=r"vol: a CUDA tensor that requires grad; pass vol.detach\(\)"):
        ops.greeks(**dict(dev, vol=dev["vol"].clone().requires_grad_()), dtype=np.float64, shape=(n,))


def test_torch_tensors(ctx, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    n = 4099
    d = _inputs(rng, n + 1, np.float64)
    dev = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in d.items()}
    # Offset by one float64: 8-byte aligned only -> the unaligned variant must be chosen.
    sliced = {k: v[1:] for k, v in dev.items()}
    unaligned = lambda: sum(l.launches for l in ctx.launchers.values() if not l.kernel.spec.aligned16)  # noqa: E731
    before = unaligned()
    out = ops.greeks(**sliced, dtype=np.float64, shape=(n,))
    assert unaligned() == before + 1
    assert isinstance(out["gamma"], torch.Tensor) and out["gamma"].is_cuda
    torch.cuda.synchronize()
    ref = expected_greeks(**_f64({k: v[1:] for k, v in d.items()}))
    _close(out["gamma"].cpu().numpy(), ref["gamma"], np.float64)


@pytest.mark.skipif(not os.environ.get("TICKGPU_BENCH"),
                    reason="prints timings only (set TICKGPU_BENCH=1); tickgpu bench --suite gpu measures them")
def test_roundtrip_latency_report(ctx, rng):
    """Not a pass/fail bound: prints the tick round trip through the graph and the C hot path."""
    for n in (1, 1024, 16384):
        d = _inputs(rng, n, np.float32)
        for _ in range(50):
            ops.greeks(**d, dtype=np.float32, shape=(n,))
        ts = []
        for _ in range(1000):
            t0 = time.perf_counter()
            ops.greeks(**d, dtype=np.float32, shape=(n,))
            ts.append(time.perf_counter() - t0)
        ts.sort()
        print(f"ROUNDTRIP greeks f32 n={n}: p50 {ts[500] * 1e6:.1f} us p99 {ts[990] * 1e6:.1f} us")
