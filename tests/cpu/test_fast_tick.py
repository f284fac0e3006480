"""The staged tick's C entry (tickgpu._fasttick, runtime/fasttick.py) on the mock driver.

The round trip and the context switch it calls are the mock's, through CFFI callbacks, so the
C entry runs whole: argument reading, plan lookup, staging, output blocks, error and lock
handling. Each call is checked three ways: the mock kernel's closed form, the Python path's bits
for the same call (the C entry must change nothing but speed), and whether the C entry took it
(its counters), so that no test passes by never reaching it.
"""
import gc
import math
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu._native import check, ffi, lib
from tickgpu.errors import BackendUnavailable
from tickgpu.finance import greeks as greeks_mod
from tickgpu.finance import iv as iv_mod
from tickgpu.runtime import fasttick, ops, staged
from tickgpu.runtime.driver import CudaError

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, expected_greeks, expected_iv, write_bundle  # noqa: E402

pytestmark = pytest.mark.skipif(fasttick._fasttick is None, reason="tickgpu._fasttick was not built")

NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")
GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")
CHUNK = 4096


class MockEntry:
    """The mock's round trip (its two halves) and context switch as C function pointers (CFFI
    callbacks).

    The graph runs at the wait, not at the launch, as a GPU may: so a result the C entry read, or
    a staging slot it wrote, between the two would show in the results. `fail` makes the launch
    fail with that CUresult, `fail_end` the wait."""

    def __init__(self, mock: MockDriver):
        self.mock, self.errors, self.fail, self.fail_end = mock, [], None, None
        self.roundtrips = self.enters = 0
        self.pending = None   # (graph exec, stream) launched and not yet waited for

        @ffi.callback("int(tg_hot_copy *, int, uintptr_t, uintptr_t, int *)")
        def begin(cin, n_in, e, s, result):
            assert self.pending is None, "a launch before the previous one was waited for"
            self.roundtrips += 1
            if self.fail is not None:
                result[0] = self.fail
                return 1
            try:
                check(lib.tg_hot_stage(cin, n_in), "stage in")
            except Exception as ex:   # an out-of-range copy, as the native core checks them
                self.errors.append(ex)
                return 2
            self.pending = (e, s)
            return 0

        @ffi.callback("int(uintptr_t, tg_hot_copy *, int, int *)")
        def end(s, cout, n_out, result):
            assert self.pending is not None and self.pending[1] == s, "a wait with no launch on its stream"
            e, self.pending = self.pending[0], None
            try:
                mock.graph_launch(e, s, sync=True)
                check(lib.tg_hot_stage(cout, n_out), "stage out")
            except Exception as ex:   # an out-of-range copy or read, as the mock checks them
                self.errors.append(ex)
                return 2
            if self.fail_end is not None:
                result[0] = self.fail_end
                return 1
            return 0

        @ffi.callback("int(uintptr_t, int *)")
        def enter(ctx, result):
            self.enters += 1
            mock.ctx_set_current(ctx)
            return 0

        self.begin, self.end, self.enter = begin, end, enter

    def pointers(self):
        return tuple(int(ffi.cast("uintptr_t", f)) for f in (self.begin, self.end, self.enter))

    def raise_error(self, status, code, op):
        if self.errors:
            raise self.errors.pop()
        raise CudaError(op, f"CUresult {code}", code, None)


@pytest.fixture(params=["mapped", "copies"])
def fast(request, tmp_path):
    mock = MockDriver()
    ctx = rt.init(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()),
                  staging_elements=CHUNK)
    if request.param == "copies":
        ctx.mapped_elements = 0
    entry = MockEntry(mock)
    assert fasttick.enable(ctx, *entry.pointers(), entry.raise_error)
    fasttick.install(ctx)
    ctx.entry = entry
    yield ctx
    rt.reset()
    assert greeks_mod._fast is None and iv_mod._fast is None


def taken(ctx, op="greeks") -> int:
    head = ctx.tickers[op]
    return head.calls + head.other.calls


def python_path(**kw):
    """The same call with the C entry off (the Python path that defines the semantics)."""
    saved = greeks_mod._fast
    greeks_mod._fast = None
    try:
        return tickgpu.greeks(**kw)
    finally:
        greeks_mod._fast = saved


def inputs(rng, n, dtype):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype),
                call=rng.random(n) < 0.5)


def same_bits(a, b):
    for k in GREEKS:
        x, y = getattr(a, k), getattr(b, k)
        assert type(x) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k


def check_expected(g, kw, dtype):
    n = np.broadcast_shapes(*(np.shape(kw[k]) for k in NAMES))
    ref = expected_greeks(*(np.broadcast_to(np.asarray(kw[k], dtype=np.float64 if k != "call" else bool), n)
                            .astype(np.float64 if k != "call" else bool) for k in NAMES))
    tol = 1e-12 if dtype == np.float64 else 3e-6
    for k in GREEKS:
        np.testing.assert_allclose(np.asarray(getattr(g, k), dtype=np.float64), ref[k], rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_usual_call_runs_in_c_with_the_python_paths_bits(fast, dtype):
    rng = np.random.default_rng(1)
    x = inputs(rng, 1000, dtype)
    first = tickgpu.greeks(**x, dtype=dtype, backend="gpu")   # builds the size's plan (Python path)
    before = taken(fast)
    g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    assert taken(fast) == before + 1
    check_expected(g, x, dtype)
    same_bits(g, first)
    same_bits(g, python_path(**x, dtype=dtype, backend="gpu"))
    # Results are rows of one block: on mapped staging a result block (pinned memory the graph
    # wrote them into), else a NumPy block of the bucket's length, as the Python path hands out.
    # Each call's block is its own while its results live.
    if fast.mapped_elements:
        assert g.price.base is g.delta.base and g.price.base.dtype == np.uint8 and g.price.base.ndim == 1
        assert fast.ticks[("greeks", np.dtype(dtype).char, 1000)].fast.direct >= 1
    else:
        assert g.price.base is g.delta.base and g.price.base.shape == (10, 1024)
    assert g.price.flags.c_contiguous and g.price.flags.writeable
    assert tickgpu.greeks(**x, dtype=dtype, backend="gpu").price.base is not g.price.base


def test_result_blocks_are_reused_only_once_their_results_are_gone(fast):
    rng = np.random.default_rng(12)
    x = inputs(rng, 1000, np.float32)
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    plan = fast.ticks[("greeks", "f", 1000)].fast
    if not fast.mapped_elements:   # ticks through copy -> kernel -> copy graphs: results always copied out
        g = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
        assert plan.calls >= 1 and plan.direct == 0 and not fast.result_blocks
        check_expected(g, x, np.float32)
        return
    results, _ = fast.result_blocks[("greeks", np.dtype(np.float32))]
    assert not any(results.busy)
    held = []
    for k in range(fasttick.RESULT_BLOCKS + 2):
        y = dict(x, spot=rng.uniform(50, 150, 1000).astype(np.float32))
        direct, calls = plan.direct, plan.calls
        g = tickgpu.greeks(**y, dtype=np.float32, backend="gpu")
        assert plan.calls == calls + 1
        # While blocks are free a call takes one; with all held it copies out of staging.
        assert plan.direct == direct + (k < fasttick.RESULT_BLOCKS), k
        check_expected(g, y, np.float32)
        held.append((g, y, {name: getattr(g, name).copy() for name in GREEKS}))
        assert sum(results.busy) == min(k + 1, fasttick.RESULT_BLOCKS)
    for g, y, saved in held:   # nothing handed out was overwritten by the calls after it
        for name in GREEKS:
            assert getattr(g, name).tobytes() == saved[name].tobytes()
    keep = held[0][0].vega     # one array keeps its block in use; the rest are freed
    del held, g
    assert sum(results.busy) == 1
    direct = plan.direct
    for _ in range(5):
        g = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
        check_expected(g, x, np.float32)
        assert g.price.base is not keep.base
    assert plan.direct == direct + 5
    assert keep.base is not None and results.busy.count(True) == 2


def _random_arg(rng, name, n, dtype):
    """An argument of one of the kinds a caller passes, and whether the C entry takes that kind."""
    if name == "call":
        kind = rng.integers(5)
        if kind == 0:
            return bool(rng.integers(2)), True
        if kind == 1:
            return rng.random(n) < 0.5, True
        if kind == 2:
            return (rng.random(n) < 0.5).astype(np.uint8), False       # checked for 0/1 in Python
        if kind == 3:
            return np.bool_(rng.integers(2)), False
        return [bool(v) for v in rng.random(n) < 0.5], False
    lo, hi = {"spot": (50, 150), "strike": (50, 150), "t": (0.01, 2), "rate": (0, 0.05), "vol": (0.05, 0.8),
              "div": (0, 0.03), "price": (1, 30)}[name]
    kind = rng.integers(8)
    if kind == 0:
        return float(rng.uniform(lo, hi)), True
    if kind == 1:
        return int(rng.integers(0, 3)) if name in ("rate", "div", "t") else int(rng.integers(60, 140)), True
    if kind == 2:
        return np.float64(rng.uniform(lo, hi)), False                 # a NumPy scalar: Python path
    if kind == 3:
        other = np.float32 if dtype == np.float64 else np.float64
        return rng.uniform(lo, hi, n).astype(other), False            # converted in Python
    if kind == 4:
        return rng.uniform(lo, hi, 2 * n).astype(dtype)[::2], n == 1  # not contiguous (unless of one element)
    if kind == 5:
        return list(rng.uniform(lo, hi, n)), False
    return rng.uniform(lo, hi, n).astype(dtype), True


@pytest.mark.parametrize("seed", range(4))
def test_random_calls_agree_with_the_python_path_and_take_c_exactly_when_eligible(fast, seed):
    """Sizes sharing buckets, both dtypes, every kind of argument, interleaved with Python-path
    calls on the same runners (their single-value slots and copy sizes must stay right)."""
    rng = np.random.default_rng(seed)
    for step in range(120):
        dtype = (np.float64, np.float32)[rng.integers(2)]
        n = int(rng.choice([1, 2, 15, 16, 17, 100, 112, 113, 1000, 1024, 1025, 4096]))
        kw, ok = {}, {}
        for name in NAMES:
            kw[name], ok[name] = _random_arg(rng, name, n, dtype)
        if all(np.ndim(kw[k]) == 0 for k in NAMES):   # the C entry takes its length from an array
            kw["strike"], ok["strike"] = rng.uniform(50, 150, n).astype(dtype), True
        eligible = all(ok.values())
        backend = "gpu" if rng.random() < 0.8 else "auto"
        lo, hi = tickgpu.dispatch.gpu_range().get("greeks", (None, None))
        on_gpu = backend == "gpu" or (lo is not None and n >= lo and (hi is None or n < hi))
        if rng.random() < 0.25:   # a Python-path call in between, on the same runner
            python_path(**kw, dtype=dtype, backend=backend)
            continue
        ch = np.dtype(dtype).char
        known = ("greeks", ch, n) in fast.ticks or ("greeks", ch, staged.bucket(n, CHUNK), 0, (), None, None) in fast.plans
        before = taken(fast)
        g = tickgpu.greeks(**kw, dtype=dtype, backend=backend)
        assert taken(fast) - before == int(eligible and on_gpu and known), (step, n, dtype, backend,
                                                                          {k: type(v).__name__ for k, v in kw.items()})
        if on_gpu:
            check_expected(g, kw, dtype)
        same_bits(g, python_path(**kw, dtype=dtype, backend=backend))


def test_a_python_path_tick_after_c_rewrites_the_single_values_it_trusted(fast):
    """The Python path skips filling a single value its slot already holds; the C entry fills the
    same slots, so after it the Python path must trust none of them."""
    rng = np.random.default_rng(5)
    x = inputs(rng, 200, np.float64)
    scalar = dict(x, rate=0.02, div=0.01, call=True)
    tickgpu.greeks(**scalar, backend="gpu")                       # plan built; slots hold 0.02, 0.01, 1
    c = dict(x, rate=0.04, div=0.03, call=False)                  # C fills the same slots
    before = taken(fast)
    check_expected(tickgpu.greeks(**c, backend="gpu"), c, np.float64)
    assert taken(fast) == before + 1
    # Python path with the first values again: it must not believe its slots still hold them.
    g = python_path(**dict(scalar, spot=list(x["spot"])), backend="gpu")
    check_expected(g, scalar, np.float64)


def test_failed_round_trip_raises_the_runtime_error_and_releases_the_lock(fast):
    rng = np.random.default_rng(2)
    x = inputs(rng, 64, np.float32)
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    fast.entry.fail = 700
    with pytest.raises(CudaError, match="CUresult 700"):
        tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    fast.entry.fail = None
    # The lock was released: another thread gets it at once (the RLock would let this one in anyway).
    got = []
    th = threading.Thread(target=lambda: got.append(fast.lock.acquire(timeout=5) and fast.lock.release() is None))
    th.start()
    th.join(10)
    assert got == [True]
    before = taken(fast)
    check_expected(tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), x, np.float32)
    assert taken(fast) == before + 1


def test_failed_wait_raises_its_error_hands_out_nothing_and_releases_the_lock(fast):
    rng = np.random.default_rng(21)
    x = inputs(rng, 64, np.float32)
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    fast.entry.fail_end = 719
    before = taken(fast)
    with pytest.raises(CudaError, match="CUresult 719") as info:
        tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    assert "tick wait" in str(info.value)
    fast.entry.fail_end = None
    assert fast.entry.pending is None   # the launch was waited for
    assert taken(fast) == before        # no call counted as served
    got = []
    th = threading.Thread(target=lambda: got.append(fast.lock.acquire(timeout=5) and fast.lock.release() is None))
    th.start()
    th.join(10)
    assert got == [True]
    check_expected(tickgpu.greeks(**x, dtype=np.float32, backend="gpu"), x, np.float32)
    assert taken(fast) == before + 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_c_entrys_greeks_is_the_python_paths_kind_of_object(fast, dtype):
    """The C entry makes the Greeks itself (before the launch, filled while the graph runs): the
    same class, fields and behaviour as greeks._greeks_of's, and values only the wait put there."""
    import dataclasses

    rng = np.random.default_rng(22)
    x = inputs(rng, 333, dtype)
    want = python_path(**x, dtype=dtype, backend="gpu")
    before = taken(fast)
    g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    assert taken(fast) == before + 1
    assert type(g) is tickgpu.Greeks and type(want) is tickgpu.Greeks
    assert list(vars(g)) == list(vars(want)) == list(greeks_mod.GREEK_NAMES)
    assert [f.name for f in dataclasses.fields(g)] == list(greeks_mod.GREEK_NAMES)
    assert list(g.as_dict()) == list(greeks_mod.GREEK_NAMES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.price = None
    same_bits(g, want)
    check_expected(g, x, dtype)
    # The results were written by the wait (the mock runs the graph there), after the rows existed.
    assert all(getattr(g, k).flags.c_contiguous and getattr(g, k).shape == (333,) for k in GREEKS)
    # implied vol's results stay a (vols, status) tuple: the first call builds the plan, the second is C's.
    q = (g.price, x["spot"], x["strike"], x["t"], x["rate"], x["div"], x["call"])
    first = tickgpu.implied_vol(*q, dtype=dtype, backend="gpu", return_status=True)
    before = taken(fast, "implied_vol")
    second = tickgpu.implied_vol(*q, dtype=dtype, backend="gpu", return_status=True)
    assert taken(fast, "implied_vol") == before + 1
    assert type(second) is tuple and len(second) == 2
    for a, b in zip(first, second):
        assert type(b) is np.ndarray and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_disabled_gpu_resident_kernels_and_unknown_sizes_take_the_python_path(fast, monkeypatch):
    rng = np.random.default_rng(3)
    x = inputs(rng, 300, np.float64)
    tickgpu.greeks(**x, backend="gpu")
    before = taken(fast)
    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    with pytest.raises(BackendUnavailable, match="TICKGPU_DISABLE_GPU"):
        tickgpu.greeks(**x, backend="gpu")
    same_bits(tickgpu.greeks(**x, backend="auto"), tickgpu.greeks(**x, backend="cpu"))
    monkeypatch.delenv("TICKGPU_DISABLE_GPU")
    assert taken(fast) == before
    monkeypatch.setitem(ops.RESIDENT, ("greeks", np.dtype(np.float64)), None)   # an open resident (never this key's)
    tickgpu.greeks(**x, backend="gpu")
    assert taken(fast) == before
    monkeypatch.delitem(ops.RESIDENT, ("greeks", np.dtype(np.float64)))
    y = inputs(rng, 2000, np.float64)         # a size whose bucket has no plan: the Python path builds it
    tickgpu.greeks(**y, backend="gpu")
    assert taken(fast) == before
    tickgpu.greeks(**y, backend="gpu")
    assert taken(fast) == before + 1


def test_a_new_size_runs_in_c_where_its_bucket_has_a_plan(fast):
    """As after warm-up: a size never called whose bucket's plan exists is taken at its first call
    (the C entry rounds to the bucket as staged.bucket does) and remembered for the size."""
    rng = np.random.default_rng(8)
    built = set()
    sizes = [int(v) for v in rng.integers(1, CHUNK + 1, 150)] + [1, 15, 16, 17, 127, 128, 129, 255, 256, 257,
                                                                 CHUNK - 1, CHUNK]
    for n in sizes:
        x = inputs(rng, n, np.float32)
        m = staged.bucket(n, CHUNK)
        before = taken(fast)
        g = tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
        assert taken(fast) - before == int(m in built), n
        check_expected(g, x, np.float32)
        built.add(m)
        assert fast.ticks[("greeks", "f", n)].m == m


def test_a_moved_scratch_block_or_forgotten_plans_send_the_call_back_to_python(fast):
    rng = np.random.default_rng(4)
    x = inputs(rng, 500, np.float64)
    tickgpu.greeks(**x, backend="gpu")
    before = taken(fast)
    fast.bundle.scratch_epoch += 1            # as ensure_scratch does when a block moves
    check_expected(tickgpu.greeks(**x, backend="gpu"), x, np.float64)
    assert taken(fast) == before              # the Python path rebuilt the plan ...
    check_expected(tickgpu.greeks(**x, backend="gpu"), x, np.float64)
    assert taken(fast) == before + 1          # ... which the C entry then takes
    fast.reset_plans()
    tickgpu.greeks(**x, backend="gpu")
    assert taken(fast) == before + 1


def test_single_values_float32_cannot_hold_go_to_python(fast):
    rng = np.random.default_rng(6)
    x = inputs(rng, 100, np.float32)
    tickgpu.greeks(**x, dtype=np.float32, backend="gpu")
    before = taken(fast)
    kw = dict(x, div=1e300)
    with np.errstate(over="ignore"):
        g = tickgpu.greeks(**kw, dtype=np.float32, backend="gpu")
        same_bits(g, python_path(**kw, dtype=np.float32, backend="gpu"))
    assert taken(fast) == before
    kw = dict(x, div=2**53 + 2)                # an int beyond 2**53: NumPy's rounding, in Python
    g = tickgpu.greeks(**kw, dtype=np.float32, backend="gpu")
    assert taken(fast) == before
    kw = dict(x, div=math.inf, rate=-0.0)     # inf and -0.0 are values the C entry fills as they are
    g = tickgpu.greeks(**kw, dtype=np.float32, backend="gpu")
    assert taken(fast) == before + 1
    same_bits(g, python_path(**kw, dtype=np.float32, backend="gpu"))


def test_threads_calling_at_once_each_get_their_own_results(fast):
    rng = np.random.default_rng(7)
    xs = [inputs(rng, 256, np.float64) for _ in range(4)]
    tickgpu.greeks(**xs[0], backend="gpu")
    errors = []

    def work(x):
        try:
            for _ in range(30):
                check_expected(tickgpu.greeks(**x, backend="gpu"), x, np.float64)
        except BaseException as e:   # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    before = taken(fast)
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors[0]
    assert taken(fast) == before + 120


def test_plan_and_ticker_refuse_bad_construction():
    ft = fasttick._fasttick
    good = dict(itemsizes=[8] * 6 + [1], typenums=[np.dtype(np.float64).num], rows=[10], out_blocks=[0] * 10,
                out_rows=list(range(10)))

    def plan(**kw):
        a = dict(good, **kw)
        return ft.Plan(4096, 7, 8192, 64, 0, [1 << 20] * 7, a["itemsizes"], a["typenums"], a["rows"],
                       a["out_blocks"], a["out_rows"], object(), object(), 0)

    assert plan().calls == 0
    with pytest.raises(ValueError, match="itemsizes"):
        plan(itemsizes=[8] * 6 + [3])
    with pytest.raises(ValueError, match="row 10 is beyond its block's 10 rows"):
        plan(out_rows=list(range(11))[1:])
    with pytest.raises(ValueError, match="out_rows has 9 entries, 10 expected"):
        plan(out_rows=list(range(9)))
    with pytest.raises(ValueError, match="block_typenums has 0 entries"):
        plan(typenums=[], rows=[])
    with pytest.raises(TypeError):
        plan(rows="ten")
    with pytest.raises(ValueError, match="out_blocks"):
        plan(out_blocks=[1] * 10)
    with pytest.raises(ValueError, match="Plan"):
        ft.Plan(0, 7, 8192, 64, 0, [1] * 7, *good.values(), object(), object(), 0)
    with pytest.raises(ValueError, match="not an output type"):
        plan(typenums=[np.dtype(np.complex128).num])
    blocks = [np.zeros(10 * 64 * 8, np.uint8) for _ in range(2)]
    res = ft.Results(blocks)
    assert res.busy == (True, True)          # the test's list holds them too
    del blocks
    assert res.busy == (False, False)

    def with_results(offsets, results, graphs):
        a = good
        return ft.Plan(4096, 7, 8192, 64, 0, [1 << 20] * 7, a["itemsizes"], a["typenums"], a["rows"],
                       a["out_blocks"], a["out_rows"], object(), object(), 0, offsets, results, graphs)

    assert with_results([0], res, [object(), object()]).direct == 0
    with pytest.raises(ValueError, match="outside result block"):
        with_results([64], res, [object(), object()])
    with pytest.raises(ValueError, match="one graph per result block"):
        with_results([0], res, [object()])
    with pytest.raises(TypeError, match="Results"):
        with_results([0], [np.zeros(8, np.uint8)], [object()])
    with pytest.raises(TypeError, match="uint8"):
        ft.Results([np.zeros(8, np.float64)])
    with pytest.raises(ValueError, match="1 to"):
        ft.Results([])
    with pytest.raises(TypeError):
        ft.Ticker(None, None, threading.RLock(), "greeks", "d", np.float64, "not a dtype", 7, 6, {}, b"", {},
                  print, 1, 1, 0, 0, -1, -1)
    for begin, end in ((0, 1), (1, 0)):
        with pytest.raises(ValueError, match="begin or end"):
            ft.Ticker(None, None, threading.RLock(), "greeks", "d", np.float64, np.dtype(np.float64), 7, 6, {},
                      b"", {}, print, begin, end, 0, 0, -1, -1)
    ok = (None, None, threading.RLock(), "greeks", "d", np.float64, np.dtype(np.float64), 7, 6, {}, b"", {}, print,
          1, 1, 0, 0, -1, -1)
    for rtype, names, what in ((object(), ("a",), "result_type a class"), (tickgpu.Greeks, ["price"], "tuple"),
                               (tickgpu.Greeks, (), "1 to 16"), (tickgpu.Greeks, ("price", 3), "str"),
                               (None, ("price",), "without a result_type")):
        with pytest.raises(TypeError, match=what):
            ft.Ticker(*ok, rtype, names)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_binding_of_arrays_runs_in_c_and_reads_their_current_contents(fast, dtype):
    from tickgpu.runtime import bind_greeks

    rng = np.random.default_rng(10)
    x = inputs(rng, 700, dtype)
    tick = bind_greeks(*(x[k] for k in NAMES), dtype=dtype)
    assert tick._fast_ok
    for _ in range(3):
        x["spot"][:] = rng.uniform(50, 150, 700)   # in place, as a tick loop updates its arrays
        before = taken(fast)
        g = tick()
        assert taken(fast) == before + 1
        check_expected(g, x, dtype)
        saved, greeks_mod._fast = greeks_mod._fast, None
        try:
            same_bits(g, tick())                   # the binding's own path
        finally:
            greeks_mod._fast = saved
    # uint8 flags and single values fixed at binding: the binding's own path, same results.
    y = dict(x, call=(rng.random(700) < 0.5).astype(np.uint8), rate=0.01)
    tick = bind_greeks(*(y[k] for k in NAMES), dtype=dtype)
    assert not tick._fast_ok
    before = taken(fast)
    check_expected(tick(), dict(y, call=y["call"] != 0), dtype)
    assert taken(fast) == before


IV_NAMES = ("price", "spot", "strike", "t", "rate", "div", "call")


def iv_python_path(**kw):
    saved = iv_mod._fast
    iv_mod._fast = None
    try:
        return tickgpu.implied_vol(**kw)
    finally:
        iv_mod._fast = saved


@pytest.mark.parametrize("seed", range(3))
def test_random_implied_vol_calls_agree_with_the_python_path(fast, seed):
    """Two output blocks of two dtypes (vols, int8 statuses), with and without return_status."""
    rng = np.random.default_rng(100 + seed)
    for step in range(100):
        dtype = (np.float64, np.float32)[rng.integers(2)]
        n = int(rng.choice([1, 16, 17, 100, 113, 1000, 1024, 4096]))
        kw, ok = {}, {}
        for name in IV_NAMES:
            kw[name], ok[name] = _random_arg(rng, name, n, dtype)
        kw["price"], ok["price"] = rng.uniform(1, 30, n).astype(dtype), True
        if rng.random() < 0.2:
            iv_python_path(**kw, dtype=dtype, backend="gpu", return_status=True)
            continue
        ch = np.dtype(dtype).char
        known = ("implied_vol", ch, n) in fast.ticks or \
            ("implied_vol", ch, staged.bucket(n, CHUNK), 0, (), None, None) in fast.plans
        before = taken(fast, "implied_vol")
        vol, status = tickgpu.implied_vol(**kw, dtype=dtype, backend="gpu", return_status=True)
        assert taken(fast, "implied_vol") - before == int(all(ok.values()) and known), step
        read = {k: np.broadcast_to(np.asarray(kw[k], dtype=bool if k == "call" else dtype), (n,)) for k in IV_NAMES}
        want_vol, want_status = expected_iv(**{k: v.astype(np.float64) if k != "call" else v for k, v in read.items()})
        tol = 1e-12 if dtype == np.float64 else 3e-6
        np.testing.assert_allclose(vol.astype(np.float64), want_vol, rtol=tol, atol=tol)
        np.testing.assert_array_equal(status, want_status)
        pv, ps = iv_python_path(**kw, dtype=dtype, backend="gpu", return_status=True)
        assert vol.dtype == pv.dtype and vol.tobytes() == pv.tobytes()
        assert status.dtype == ps.dtype == np.int8 and status.tobytes() == ps.tobytes()
        only = tickgpu.implied_vol(**kw, dtype=dtype, backend="gpu")
        assert type(only) is np.ndarray and only.tobytes() == pv.tobytes()


def test_a_binding_of_implied_vols_runs_in_c(fast):
    from tickgpu.runtime import bind_implied_vol

    rng = np.random.default_rng(11)
    x = {k: rng.uniform(1, 100, 300) for k in IV_NAMES[:-1]}
    x["call"] = rng.random(300) < 0.5
    ivs = bind_implied_vol(*(x[k] for k in IV_NAMES))
    tickgpu.implied_vol(**x, backend="gpu")
    before = taken(fast, "implied_vol")
    vol, status = ivs()
    assert taken(fast, "implied_vol") == before + 1
    pv, ps = iv_python_path(**x, backend="gpu", return_status=True)
    assert vol.tobytes() == pv.tobytes() and status.tobytes() == ps.tobytes()


def test_result_blocks_go_back_to_the_pool_after_the_context_and_their_results(tmp_path):
    """A result block's pinned memory is freed once neither the context nor any result uses it."""

    mock = MockDriver()
    ctx = rt.init(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()), staging_elements=CHUNK)
    entry = MockEntry(mock)
    fasttick.enable(ctx, *entry.pointers(), entry.raise_error)
    fasttick.install(ctx)
    x = inputs(np.random.default_rng(13), 100, np.float64)
    tickgpu.greeks(**x, backend="gpu")
    g = tickgpu.greeks(**x, backend="gpu")
    assert ctx.ticks[("greeks", "d", 100)].fast.direct == 1
    freed = []
    weakref.finalize(g.price.base, freed.append, True)
    rt.reset()
    del ctx, entry
    gc.collect()
    assert not freed                      # the results still use their block
    check_expected(g, x, np.float64)
    del g
    gc.collect()
    assert freed == [True]
