"""tickgpu.runtime.Pipeline on the mock driver: results, stream ordering, errors -- no GPU needed.

The mock executes every copy and kernel at once, so results alone cannot show an ordering bug.
`ClockDriver` therefore keeps vector clocks the way CUDA orders work: each stream is a sequence,
``cuEventRecord`` snapshots a stream's clock, ``cuStreamWaitEvent`` merges a snapshot into a
stream, and host synchronization merges into the host's clock (work queued afterwards is ordered
after what the host saw finish). Every memory access of queued work (copy source and destination,
each kernel argument's range) is checked against every earlier conflicting access to overlapping
bytes: the earlier one must happen before. So a missing or misplaced wait -- a fetch into a slot
whose kernel may still read it, a kernel writing an output slot still being copied out, a result
handed out before its copy finished -- is reported as a race, and the negative controls below
show that dropping a wait is caught.

Extensions the runtime's Driver will need (and the mock gets here): ``stream_wait_event(stream,
event)`` and ``event_elapsed_ms(start, end)``.
"""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tickgpu.kernels.manifest import FAMILY_PARAMS, GREEKS_OUTPUTS
from tickgpu.runtime.device import Context
from tickgpu.runtime.driver import CudaError
from tickgpu.runtime.streams import Pipeline

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, expected_greeks, expected_iv, write_bundle  # noqa: E402

CHUNK = 64


def _merge(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class ClockDriver(MockDriver):
    """MockDriver with cuStreamWaitEvent, event timing, per-op logging, vector-clock race checks and
    failure of the N+1-th call of an op (`fail_after`)."""

    def __init__(self, fail_after=None):
        super().__init__()
        self.clock: dict = {}        # stream -> {stream: ops seen}
        self.host: dict = {"host": 0}
        self.ev: dict = {}           # event -> clock snapshot at its latest record
        self.accesses: list = []     # (lo, hi, is_write, stream, seq, what)
        self.races: list[str] = []
        self.log: list[tuple] = []   # (op, stream, detail)
        self.fail_after = dict(fail_after or {})
        self.ncalls = Counter()

    def _op(self, name, kernel=None):
        self.ncalls[name] += 1
        if name in self.fail_after and self.ncalls[name] > self.fail_after[name]:
            self.calls.append(name)
            raise CudaError(name, "CUDA_ERROR_LAUNCH_FAILED", 719, kernel)
        super()._op(name, kernel)

    # ---- clocks ------------------------------------------------------------------------------
    def _tick(self, s) -> dict:
        c = self.clock.setdefault(s, {})
        _merge(c, self.host)      # queued after the host saw X finish: ordered after X
        c[s] = c.get(s, 0) + 1
        return dict(c)

    def _access(self, stamp, s, lo, nbytes, write, what) -> None:
        hi = lo + nbytes
        for a_lo, a_hi, a_w, a_s, a_seq, a_what in self.accesses:
            if a_lo < hi and lo < a_hi and (write or a_w) and stamp.get(a_s, 0) < a_seq:
                self.races.append(f"{what} [{lo:#x},+{nbytes}) on {s} unordered with {a_what} on {a_s}")
        self.accesses.append((lo, hi, write, s, stamp[s], what))

    def host_access(self, addr, nbytes, write, what) -> None:
        """A host read (of results) or write (of pinned staging), checked like queued work."""
        self.host["host"] += 1
        self._access(dict(self.host), "host", addr, nbytes, write, what)

    def all_synchronized(self) -> bool:
        return all(self.host.get(s, 0) >= c.get(s, 0) for s, c in self.clock.items())

    # ---- streams and events ----------------------------------------------------------------------
    def stream_wait_event(self, s, e):
        self._op("cuStreamWaitEvent")
        _merge(self.clock.setdefault(s, {}), self.ev.get(e, {}))
        self.log.append(("wait", s, e))

    def event_record(self, e, s):
        self._op("cuEventRecord")
        self.ev[e] = self._tick(s)
        self.log.append(("record", s, e))

    def event_elapsed_ms(self, start, end):
        return 0.25

    def stream_synchronize(self, s):
        super().stream_synchronize(s)
        _merge(self.host, self.clock.get(s, {}))
        self.log.append(("sync", s, None))

    def event_synchronize(self, e):
        super().event_synchronize(e)
        _merge(self.host, self.ev.get(e, {}))

    def event_query(self, e):
        done = super().event_query(e)
        if done:
            _merge(self.host, self.ev.get(e, {}))
        return done

    def ctx_synchronize(self):
        super().ctx_synchronize()
        for c in self.clock.values():
            _merge(self.host, c)

    # ---- work ---------------------------------------------------------------------------------------
    def memcpy_htod_async(self, dst, src, nbytes, stream):
        super().memcpy_htod_async(dst, src, nbytes, stream)
        st = self._tick(stream)
        self._access(st, stream, src, nbytes, False, "H2D source")
        self._access(st, stream, dst, nbytes, True, "H2D destination")
        self.log.append(("htod", stream, dst))

    def memcpy_dtoh_async(self, dst, src, nbytes, stream):
        super().memcpy_dtoh_async(dst, src, nbytes, stream)
        st = self._tick(stream)
        self._access(st, stream, src, nbytes, False, "D2H source")
        self._access(st, stream, dst, nbytes, True, "D2H destination")
        self.log.append(("dtoh", stream, src))

    def launch(self, func, grid, block, shared, stream, params, *, sync=False, kernel=None):
        super().launch(func, grid, block, shared, stream, params, sync=sync, kernel=kernel)
        fn = self.functions[func]
        args = self._read_args(fn, params)
        fam = fn["family"]
        n = args[len(FAMILY_PARAMS[fam]) - 1]
        size = 8 if fn["dtype"] == "f64" else 4
        st = self._tick(stream)
        for i, (name, _) in enumerate(FAMILY_PARAMS[fam][:14:2]):
            isz = 1 if name == "call_ptr" else size
            self._access(st, stream, args[2 * i], isz * (n if args[2 * i + 1] else 1), False, f"kernel {name}")
        outs = args[14:14 + (10 if fam == "greeks" else 2)]
        for j, p in enumerate(outs):
            self._access(st, stream, p, n * (1 if fam == "implied_vol" and j == 1 else size), True, "kernel output")
        self.log.append(("kernel", stream, outs[0]))


class CheckedPipeline(Pipeline):
    """Reports its host writes of pinned constants to the race checker."""

    def _write_constants(self, call, area, stream):
        from tickgpu.runtime.stream_batch import CONST_AREA as _CONST_AREA

        self.driver.host_access(self._const_host + area * _CONST_AREA, _CONST_AREA, True, "host constants")
        super()._write_constants(call, area, stream)


@pytest.fixture
def bundle_dir(tmp_path):
    return write_bundle(tmp_path / "bundle", default_entries())


@pytest.fixture
def drv():
    return ClockDriver()


@pytest.fixture
def ctx(drv, bundle_dir):
    return Context(driver=drv, bundle_dir=bundle_dir)


def _inputs(rng, n, dtype=np.float32):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype),
                call=rng.random(n) < 0.5)


def _want_greeks(x, dtype):
    # The reference reads each input as the kernel does: in `dtype`, then widened.
    f = {k: np.asarray(np.asarray(v, dtype=dtype), dtype=np.float64) for k, v in x.items() if k != "call"}
    return expected_greeks(**f, call=np.asarray(x["call"]) != 0)


def _check(got, want, dtype, n):
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 2e-6
    assert set(got) == set(want)
    for k, w in want.items():
        assert got[k].shape == (n,) and got[k].dtype == np.dtype(dtype), k
        np.testing.assert_allclose(got[k].astype(np.float64), np.broadcast_to(w, (n,)), rtol=tol, atol=tol, err_msg=k)


def _host_reads(drv, outs):
    for name, a in outs.items():
        drv.host_access(a.ctypes.data, a.nbytes, False, f"host read of {name}")


# ---- results ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 17, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_greeks_match_reference_race_free(ctx, drv, rng, n, depth, dtype):
    p = CheckedPipeline("greeks", dtype=dtype, chunk=CHUNK, depth=depth, context=ctx)
    x = _inputs(rng, n, dtype)
    out = p.run(**x)
    _host_reads(drv, out)
    _check(out, _want_greeks(x, dtype), dtype, n)
    assert drv.races == []
    assert drv.all_synchronized()
    st = p.last
    assert st.mode == "pipeline" and st.n == n and st.chunks == -(-n // CHUNK)
    # A one-element array broadcasts like a number: it travels in the 128-byte constant block.
    assert st.bytes_in == (n * (6 * np.dtype(dtype).itemsize + 1) if n > 1 else 0) + 128
    assert st.bytes_out == n * 10 * np.dtype(dtype).itemsize
    assert st.total_s > 0 and st.first_result_s > 0 and st.pcie_bound_s is None


@pytest.mark.parametrize("n", [1, 17, 3 * CHUNK + 5])
def test_serial_matches_and_uses_one_stream(ctx, drv, rng, n):
    p = CheckedPipeline("greeks", chunk=CHUNK, context=ctx)
    x = _inputs(rng, n)
    out = p.serial(**x)
    _host_reads(drv, out)
    _check(out, _want_greeks(x, np.float32), np.float32, n)
    assert drv.races == [] and drv.all_synchronized()
    work = {s for op, s, _ in drv.log if op in ("htod", "kernel", "dtoh", "record")}
    assert len(work) == 1
    assert p.last.mode == "serial" and p.last.chunks == -(-n // CHUNK)


def test_three_streams_one_per_stage(ctx, drv, rng):
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    p.run(**_inputs(rng, 5 * CHUNK))
    by_op = {op: {s for o, s, _ in drv.log if o == op} for op in ("htod", "kernel", "dtoh")}
    assert all(len(v) == 1 for v in by_op.values()), by_op
    assert len(set().union(*by_op.values())) == 3
    # Two input and two output slots, used in turn.
    kernels = [d for op, _, d in drv.log if op == "kernel"]
    assert len(set(kernels)) == 2 and kernels[0::2] == [kernels[0]] * 3 and kernels[1::2] == [kernels[1]] * 2


def test_each_slot_reuse_waits_on_the_right_event(ctx, drv, rng):
    """Besides the race check: fetch k (k >= depth) is preceded on the fetch stream by a wait on the
    event last recorded by compute k - depth, and compute k by a wait on write k - depth's."""
    depth = 3
    p = Pipeline("greeks", chunk=CHUNK, depth=depth, context=ctx)
    p.run(**_inputs(rng, 8 * CHUNK))
    last_record, kernels, dtohs, waits = {}, [], [], {}
    fs, cs = p.fetch_stream, p.compute_stream
    pending_wait = {fs: [], cs: []}
    fetch_no = 0
    for i, (op, s, d) in enumerate(drv.log):
        if op == "record":
            last_record[d] = ("compute", len(kernels) - 1) if s == cs else ("write", len(dtohs) // 10 - 1)
        elif op == "wait" and s in pending_wait:
            pending_wait[s].append(last_record.get(d))
        elif op == "htod" and s == fs and d == p._in_blocks[fetch_no % depth] + p._in_off[0]:
            waits.setdefault("fetch", []).append(list(pending_wait[fs]))
            pending_wait[fs].clear()
            fetch_no += 1
        elif op == "kernel":
            waits.setdefault("compute", []).append(list(pending_wait[cs]))
            pending_wait[cs].clear()
            kernels.append(d)
        elif op == "dtoh":
            dtohs.append(d)
    for k, w in enumerate(waits["fetch"]):
        assert w == ([("compute", k - depth)] if k >= depth else []), (k, w)
    for k, w in enumerate(waits["compute"]):
        assert ("write", k - depth) in w if k >= depth else len(w) == 1, (k, w)


def test_dropped_waits_are_caught(ctx, drv, rng):
    """Negative controls: without the slot-reuse waits the race check fails."""
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    p._wait = lambda s, e: None
    p.run(**_inputs(rng, 6 * CHUNK))
    assert any("H2D destination" in r for r in drv.races)      # fetch into a slot being read
    assert any("kernel output" in r for r in drv.races)        # kernel into a slot being copied out


def test_dropped_fetch_wait_alone_is_caught(ctx, drv, rng):
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    real = p._fetch
    p._fetch = lambda call, start, m, slot, reuse, stream: real(call, start, m, slot, False, stream)
    p.run(**_inputs(rng, 6 * CHUNK))
    assert drv.races and all("H2D destination" in r or "kernel" in r for r in drv.races)


def test_scalars_broadcast_and_conversion(ctx, drv, rng):
    n = 2 * CHUNK + 3
    p = CheckedPipeline("greeks", chunk=CHUNK, context=ctx)
    x = dict(spot=rng.uniform(50, 150, n),                       # float64: converted
             strike=list(rng.integers(50, 150, n)),              # list of ints: converted
             t=np.float32(0.5), rate=0.01, vol=rng.uniform(0.1, 0.5, n).astype(np.float32)[::-1],  # strided
             call=rng.integers(0, 3, n))                         # nonzero = call
    out = p.run(**x)
    _host_reads(drv, out)
    want = _want_greeks({**x, "div": 0.0}, np.float32)
    _check(out, want, np.float32, n)
    assert drv.races == []
    assert p.last.bytes_in == n * (3 * 4 + 1) + 128
    # Single values only: n = 1; a one-element array broadcasts like a number.
    out = p.run(spot=100.0, strike=np.array([90.0]), t=1.0, rate=0.0, vol=0.2, call=False)
    _check(out, _want_greeks(dict(spot=100.0, strike=90.0, t=1.0, rate=0.0, vol=0.2, div=0.0, call=False),
                             np.float32), np.float32, 1)


@pytest.mark.parametrize("n", [1, 17, 3 * CHUNK + 5])
def test_implied_vol(ctx, drv, rng, n):
    p = CheckedPipeline("implied_vol", dtype=np.float64, chunk=CHUNK, depth=3, context=ctx)
    x = dict(price=rng.uniform(1, 20, n), spot=rng.uniform(50, 150, n), strike=rng.uniform(50, 150, n),
             t=rng.uniform(0.1, 2, n), rate=0.02, div=rng.uniform(0, 0.03, n), call=rng.random(n) < 0.5)
    out = p.run(**x)
    _host_reads(drv, out)
    vol, status = expected_iv(**{k: v for k, v in x.items() if k != "call"}, call=x["call"])
    np.testing.assert_allclose(out["vol"], vol, rtol=1e-12)
    assert out["status"].dtype == np.int8 and (out["status"] == status).all()
    assert drv.races == [] and p.last.bytes_out == n * 9


def test_out_arrays_and_bandwidth_bound(ctx, rng):
    n = 3 * CHUNK
    p = Pipeline("greeks", chunk=CHUNK, context=ctx)
    host = ctx.driver.mem_host_alloc(n * 4)   # a pinned output, as a caller would pass one
    price = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * n).from_address(host))
    x = _inputs(rng, n)
    out = p.run(out={"price": price}, h2d_bw=50e9, d2h_bw=40e9, **x)
    assert out["price"] is price
    _check(out, _want_greeks(x, np.float32), np.float32, n)
    st = p.last
    assert st.pcie_bound_s == pytest.approx(max(st.bytes_in / 50e9, st.bytes_out / 40e9))
    assert st.efficiency == pytest.approx(st.pcie_bound_s / st.total_s)
    assert st.throughput_options_per_s == st.options_per_s == pytest.approx(n / st.total_s)


def test_buffers_allocated_once_and_grown(ctx, drv, rng):
    p = Pipeline("greeks", chunk=CHUNK, context=ctx)
    p.run(**_inputs(rng, 17))
    a0 = drv.counts["mem_alloc"]
    p.run(**_inputs(rng, 5))
    assert drv.counts["mem_alloc"] == a0            # smaller: reused
    x = _inputs(rng, 4 * CHUNK + 1)
    _check(p.run(**x), _want_greeks(x, np.float32), np.float32, 4 * CHUNK + 1)
    a1 = drv.counts["mem_alloc"]
    assert a1 == a0 + 2 * p.depth                   # grown to a chunk: one in and one out block per slot
    p.run(**_inputs(rng, 9 * CHUNK))
    assert drv.counts["mem_alloc"] == a1 and drv.races == []


def test_empty_input_touches_nothing(ctx, drv):
    p = Pipeline("greeks", chunk=CHUNK, context=ctx)
    before = len(drv.calls)
    out = p.run(spot=np.array([]), strike=np.array([]), t=1.0, rate=0.0, vol=0.2)
    assert len(drv.calls) == before and out["price"].shape == (0,) and p.last.chunks == 0


_SHARED = np.empty(7, np.float32)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(spot=np.ones((2, 2))), ValueError, "spot: must be a number or a 1-D array"),
    (dict(strike=np.ones(5)), ValueError, "strike: length 5 does not match spot's length 7"),
    (dict(vol=np.array(["a"] * 7)), TypeError, "vol: must be a real number"),
    (dict(rate="high"), TypeError, "rate: must be a real number"),
    (dict(spot="100"), TypeError, "spot: must be a real number"),
    (dict(spot=["100"]), TypeError, "spot: must be a real number"),
    (dict(rate=1 + 2j), TypeError, "rate: must be a real number"),
    (dict(rate=None), TypeError, "rate: must be a real number"),
    (dict(rate=True), TypeError, "rate: must be a real number"),
    (dict(vol=np.full(7, True)), TypeError, "vol: must be a real number"),
    (dict(rate=10 ** 400), ValueError, "rate: an integer beyond float64's range"),
    (dict(call="no"), TypeError, "call: must be a real number"),
    (dict(call=None), TypeError, "call: must be a real number"),
    (dict(call=0.5), TypeError, r"call: must be bool or integers \(nonzero: a call\), got float64"),
    (dict(call=np.full(7, 1.0)), TypeError, "call: must be bool or integers"),
    (dict(sigma=0.2), TypeError, "unexpected input 'sigma'"),
    (dict(out={"price": np.empty(7, np.float64)}), ValueError, r"out\['price'\]: must be"),
    (dict(out={"gamma2": np.empty(7, np.float32)}), ValueError, r"out\['gamma2'\]: not an output"),
    (dict(out={"price": _SHARED, "delta": _SHARED}), ValueError,
     r"out\['delta'\]: shares memory with out\['price'\]"),
])
def test_bad_inputs_name_the_argument(ctx, kwargs, exc, match):
    p = Pipeline("greeks", chunk=CHUNK, context=ctx)
    x = dict(spot=np.ones(7), strike=np.ones(7), t=1.0, rate=0.0, vol=0.2)
    x.update(kwargs)
    with pytest.raises(exc, match=match):
        p.run(**x)
    with pytest.raises(TypeError, match="missing input 'vol'"):
        p.run(spot=1.0, strike=1.0, t=1.0, rate=0.0)


@pytest.mark.parametrize("kwargs", [dict(op="heston"), dict(dtype=np.float16), dict(chunk=0), dict(depth=1)])
def test_bad_construction(ctx, kwargs):
    with pytest.raises(ValueError):
        Pipeline(**{"op": "greeks", **kwargs}, context=ctx)


# ---- errors mid-run -------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,after", [("cuLaunchKernel", 2), ("cuMemcpyHtoDAsync", 9), ("cuMemcpyDtoHAsync", 15),
                                      ("cuStreamWaitEvent", 4)])
@pytest.mark.parametrize("serial", [False, True])
def test_error_mid_run_syncs_all_streams(bundle_dir, rng, op, after, serial):
    drv = ClockDriver(fail_after={op: after})
    ctx = Context(driver=drv, bundle_dir=bundle_dir)
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    x = _inputs(rng, 6 * CHUNK)
    if serial and op == "cuStreamWaitEvent":
        op = "cuLaunchKernel"   # serial waits on nothing
        drv.fail_after = {op: after}
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_FAILED") as info:
        (p.serial if serial else p.run)(**x)
    assert info.value.op == op and info.value.name == "CUDA_ERROR_LAUNCH_FAILED"
    syncs = {s for o, s, _ in drv.log if o == "sync"}
    assert {p.fetch_stream, p.compute_stream, p.write_stream} <= syncs
    assert drv.all_synchronized()
    # The Pipeline stays usable.
    drv.fail_after = {}
    _check(p.run(**x), _want_greeks(x, np.float32), np.float32, 6 * CHUNK)


# ---- stream() ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [2, 3])
def test_stream_yields_in_order_same_as_run(ctx, drv, rng, depth):
    p = CheckedPipeline("greeks", chunk=CHUNK, depth=depth, context=ctx)
    sizes = [5, CHUNK, 3 * CHUNK + 1, 1, 0, 2 * CHUNK, 17, 40, CHUNK + 1]
    batches = [dict(_inputs(rng, m), rate=float(rng.uniform(0, 0.05))) for m in sizes]
    ref = Pipeline("greeks", chunk=CHUNK, depth=depth, context=ctx)
    want = [ref.run(**b) for b in batches]
    got = []
    for res in p.stream(iter(batches)):
        _host_reads(drv, res)      # a yielded batch must be complete
        got.append(res)
    assert len(got) == len(batches)
    for g, w, m in zip(got, want, sizes):
        for k in GREEKS_OUTPUTS:
            assert g[k].shape == (m,)
            np.testing.assert_array_equal(g[k], w[k])
    assert drv.races == [] and drv.all_synchronized()
    assert p.last.mode == "stream" and p.last.n == sum(sizes)


def test_stream_keeps_depth_batches_in_flight(ctx, drv, rng):
    """With every batch reported unfinished, batch b is handed out only after b + depth was queued."""
    depth = 2
    p = Pipeline("greeks", chunk=CHUNK, depth=depth, context=ctx)
    drv.pending_events.update(p._done)   # event_query says "not yet" for the batch-done events
    queued = []

    def batches():
        for b in range(6):
            queued.append(b)
            yield _inputs(rng, 10 + b)

    for b, res in enumerate(p.stream(batches())):
        assert res["price"].shape == (10 + b,)
        assert queued[-1] == min(b + depth, 5)
        drv.pending_events.update(p._done)
    assert drv.races == []


def test_stream_error_and_early_close_leave_nothing_in_flight(bundle_dir, rng):
    drv = ClockDriver(fail_after={"cuLaunchKernel": 5})
    ctx = Context(driver=drv, bundle_dir=bundle_dir)
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        for _ in p.stream(_inputs(rng, 2 * CHUNK) for _ in range(5)):
            pass
    assert drv.all_synchronized()
    drv.fail_after = {}
    drv.pending_events.update(p._done)
    gen = p.stream(_inputs(rng, CHUNK) for _ in range(5))
    next(gen)
    with pytest.raises(RuntimeError, match="still running"):
        p.run(**_inputs(rng, 3))
    gen.close()
    assert drv.all_synchronized()
    p.run(**_inputs(rng, 3))   # free again


def test_close_returns_device_memory(ctx, drv, rng):
    with Pipeline("greeks", chunk=CHUNK, context=ctx) as p:
        p.run(**_inputs(rng, 3 * CHUNK))
        blocks = list(p._in_blocks + p._out_blocks)
    assert not any(b in drv.sizes for b in blocks)
    with pytest.raises(RuntimeError, match="after close"):
        p.run(**_inputs(rng, 3))


def test_lazy_export_without_heavy_imports():
    code = ("import sys, tickgpu, tickgpu.runtime as rt; assert 'tickgpu.runtime.streams' not in sys.modules; "
            "P = rt.Pipeline; assert P.__module__ == 'tickgpu.runtime.streams'; "
            "assert 'torch' not in sys.modules and 'cuda.bindings' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# ---- the benchmark's wiring (not a measurement) -------------------------------------------------------------
class _BenchDriver(MockDriver):
    def stream_wait_event(self, s, e):
        self._op("cuStreamWaitEvent")

    def event_elapsed_ms(self, start, end):
        return 0.5

    def event_destroy(self, e):
        pass


def test_benchmark_runs_on_the_mock(tmp_path, monkeypatch):
    import tickgpu.runtime as rt
    from tickgpu import dispatch
    from tickgpu.bench import memory_pipeline as mp

    ctx = rt.init(driver=_BenchDriver(), bundle_dir=write_bundle(tmp_path / "b", default_entries()),
                  staging_elements=64)
    ctx.warm = True   # warm-up is the runtime's business, tested elsewhere
    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    monkeypatch.setattr(mp, "N_QUICK", 1000)
    monkeypatch.setattr(mp, "CHUNKS", (64, 256))
    monkeypatch.setattr(mp, "_BW_BYTES", 1 << 16)
    allocated = []

    def pinned_alloc(nbytes):
        allocated.append(nbytes)
        return np.empty(nbytes, np.uint8)

    try:
        res = mp.run_pipeline_bench(True, pinned_alloc=pinned_alloc)
    finally:
        rt.reset()
    assert res["n"] == 1000 and res["pinned"] == "pinned_alloc" and len(allocated) == 1 + 7 + 10
    assert len(res["pipeline"]) == 4 and len(res["serial"]) == 2
    assert res["bytes_in"] == 1000 * 25 and res["bytes_out"] == 1000 * 40
    assert {t["name"] for t in res["targets"]} == {"pipeline / serial (same chunk)", "pipeline vs PCIe bound"}
    # The mock's kernel is not Black-Scholes: the CPU comparison only has to have run.
    assert np.isfinite(res["max_rel_err_vs_cpu"])


def test_close_refuses_while_a_stream_is_open(ctx, drv, rng):
    """An open stream() still owns the slots: close() refuses, naming why, until it is closed."""
    p = Pipeline("greeks", chunk=CHUNK, depth=2, context=ctx)
    batches = [_inputs(rng, m) for m in (CHUNK, 5, CHUNK + 3)]
    gen = p.stream(iter(batches))
    next(gen)
    with pytest.raises(RuntimeError, match="stream.*still open"):
        p.close()
    gen.close()
    assert drv.all_synchronized()
    p.close()
    with pytest.raises(RuntimeError, match="after close"):
        p.run(**batches[0])


def test_a_dropped_pipeline_returns_its_device_memory(ctx, drv, rng):
    import gc

    before = len(drv.sizes)
    for _ in range(5):
        p = Pipeline("greeks", chunk=CHUNK, context=ctx)
        p.run(**_inputs(rng, 3 * CHUNK))
        del p                                      # never closed
    gc.collect()
    assert len(drv.sizes) == before
