"""The C entry's calls on CuPy arrays and PyTorch tensors (tickgpu._fasttick Ticker.device,
runtime/fasttick.py) on the mock driver, with the stand-ins of fake_cupy.py and fake_torch.py.

The launch it calls is the mock's, through a CFFI callback reading the launch description the way
tg_hot_launch_desc_run does, so the C side runs whole: reading the arrays, the results (handed out
again once dropped), the plan per size, stream and alignment, the addresses written into the plan's
parameters, the launch, errors and the lock. Each call is checked against the mock kernel's closed
form and the Python path's bits, and by the counter that says the C side took it.
"""
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu._native import ffi
from tickgpu.runtime import arrays, fasttick
from tickgpu.runtime.driver import CudaError

sys.path.insert(0, str(Path(__file__).parent))
import fake_cupy  # noqa: E402
import fake_torch  # noqa: E402
from cuda_mock import MockDriver, default_entries, expected_greeks, write_bundle  # noqa: E402
from test_fast_tick import MockEntry, python_path  # noqa: E402

from tickgpu.finance import iv as iv_mod  # noqa: E402

pytestmark = pytest.mark.skipif(fasttick._fasttick is None, reason="tickgpu._fasttick was not built")

NAMES = ("spot", "strike", "t", "rate", "vol", "div", "call")
GREEKS = ("price", "delta", "gamma", "vega", "theta", "rho", "phi", "vanna", "volga", "charm")


class MockLaunch:
    """tg_hot_launch_desc_run over the mock: the description's fields, its parameters read at the call."""

    def __init__(self, mock):
        self.mock, self.fail, self.runs, self.streams = mock, None, 0, []

        @ffi.callback("int(tg_hot_launch_desc *, int, int *)")
        def run(desc, sync, result):
            self.runs += 1
            if self.fail is not None:
                result[0] = self.fail
                return 1
            self.streams.append(int(desc.stream))
            mock.launch(int(desc.func), (desc.grid_x, desc.grid_y, desc.grid_z),
                        (desc.block_x, desc.block_y, desc.block_z), desc.shared_bytes, int(desc.stream),
                        int(ffi.cast("uintptr_t", desc.params)))
            return 0

        self.run = run

    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self.run))


class MockHtod:
    """tg_hot_copy_htod_async over the mock: the single values' copy into their device slots."""

    def __init__(self, mock):
        self.fail, self.copies = None, []

        @ffi.callback("int(uintptr_t, void *, size_t, uintptr_t, int *)")
        def copy(dst, src, nbytes, stream, result):
            if self.fail is not None:
                result[0] = self.fail
                return 1
            self.copies.append((int(dst), int(nbytes), int(stream)))
            mock.memcpy_htod_async(int(dst), int(ffi.cast("uintptr_t", src)), int(nbytes), int(stream))
            return 0

        self.copy = copy

    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self.copy))


def make_ctx(tmp_path, monkeypatch):
    mock = MockDriver()
    cp = fake_cupy.install(monkeypatch, mock)
    th = fake_torch.install(monkeypatch, mock)
    ctx = rt.init(driver=mock, bundle_dir=write_bundle(tmp_path / "bundle", default_entries()), staging_elements=256)
    entry, launch, htod = MockEntry(mock), MockLaunch(mock), MockHtod(mock)
    assert fasttick.enable(ctx, *entry.pointers(), entry.raise_error, launch=launch.address(), htod=htod.address())
    fasttick.install(ctx)
    ctx.entry, ctx.launch, ctx.htod, ctx.cp, ctx.th = entry, launch, htod, cp, th
    return ctx


@pytest.fixture
def dev(tmp_path, monkeypatch):
    yield make_ctx(tmp_path, monkeypatch)
    rt.reset()


def taken(ctx, op: str = "greeks") -> int:
    head = ctx.tickers[op]
    return head.device_calls + head.other.device_calls


def lock_is_free(ctx) -> bool:
    """Whether another thread can take the context's lock (the RLock is this thread's to take again
    whatever it holds)."""
    got = []

    def take():
        if ctx.lock.acquire(timeout=5):
            got.append(True)
            ctx.lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join()
    return got == [True]


def host(rng, n, dtype=np.float64):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype),
                call=rng.random(n) < 0.5)


def check(ctx, g, h, dtype, kind="cupy"):
    want = expected_greeks(**{k: np.asarray(v, np.float64) if k != "call" else v for k, v in h.items()})
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for k in GREEKS:
        a = getattr(g, k)
        if kind == "cupy":
            assert isinstance(a, ctx.cp.ndarray) and a.dtype == dtype and a.shape == (len(h["spot"]),)
        else:
            assert type(a) is ctx.th.Tensor and a.dtype.np == dtype and a.shape == (len(h["spot"]),)
        np.testing.assert_allclose(a.get(), want[k], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, 256, 1000])
def test_cupy_calls_are_taken_in_c_with_the_python_paths_bits(dev, rng, dtype, n):
    h = host(rng, n, dtype)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    before = taken(dev)
    g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    assert taken(dev) == before + 1 and type(g) is tickgpu.Greeks
    check(dev, g, h, dtype)
    p = python_path(**x, dtype=dtype, backend="gpu")
    for k in GREEKS:
        assert getattr(g, k).get().tobytes() == getattr(p, k).get().tobytes(), k
    assert dev.launch.streams[-1] == 1       # the stream CuPy's interface names
    g2 = tickgpu.greeks(**x, dtype=dtype, backend="auto")   # auto: GPU arrays run on the GPU
    assert taken(dev) == before + 2
    check(dev, g2, h, dtype)


def test_plans_per_size_stream_and_alignment_and_results_handed_out_again(dev, rng):
    h = host(rng, 64)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    g = tickgpu.greeks(**x, backend="gpu")
    ids = [id(getattr(g, k)) for k in GREEKS]
    del g
    g = tickgpu.greeks(**x, backend="gpu")
    assert [id(getattr(g, k)) for k in GREEKS] == ids      # arrays.empty_outputs: the dropped set again
    del g
    fake_cupy.ndarray.stream = 0x99
    g = tickgpu.greeks(**x, backend="gpu")
    assert dev.launch.streams[-1] == 0x99
    check(dev, g, h, np.float64)
    # an input at an address 8 bytes off 16: the unaligned variant, in a plan of its own
    big = dev.cp.asarray(np.concatenate([[0.0], h["strike"]]))
    g = tickgpu.greeks(**dict(x, strike=big[1:]), backend="gpu")
    check(dev, g, h, np.float64)
    assert taken(dev) == 4


@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_single_values_mixed_in_are_taken_in_c(dev, rng, kind, dtype):
    """Python numbers (and a bool `call`) among GPU arrays: their values in the constants ring's
    next slots, copied on the launch's stream, read with stride 0; the Python path's bits."""
    h = host(rng, 40, dtype)
    lib = dev.cp if kind == "cupy" else dev.th
    x = {k: lib.asarray(v) for k, v in h.items()}
    fake_cupy.ndarray.stream, fake_torch.Tensor.stream = 0x51, 0x52
    stream = 0x51 if kind == "cupy" else 0x52
    ring = dev.constants
    for values in ({"rate": 0.03}, {"rate": 0.03, "div": 0, "call": True}, {"call": False},
                   {"spot": 101.5, "strike": 99, "t": 0.5, "rate": -0.01, "vol": 0.25, "div": 0.02}):
        y = dict(x, **values)
        before, cursor = taken(dev), ring.cursor
        g = tickgpu.greeks(**y, dtype=dtype, backend="gpu")
        assert taken(dev) == before + 1, values
        assert ring.cursor == cursor + len(values)
        assert dev.htod.copies[-1] == (ring.dev + cursor * ring.SLOT, len(values) * ring.SLOT, stream)
        assert dev.launch.streams[-1] == stream
        want = {k: (np.full(40, v, dtype) if k != "call" else np.full(40, v)) if k in values else h[k]
                for k, v in dict(h, **values).items()}
        check(dev, g, want, dtype, kind=kind)
        p = python_path(**y, dtype=dtype, backend="gpu")
        for k in GREEKS:
            assert getattr(g, k).get().tobytes() == getattr(p, k).get().tobytes(), (values, k)
    q = dict(x, price=lib.asarray(rng.uniform(1, 20, 40).astype(dtype)), rate=0.01, call=True)
    del q["vol"]
    before = taken(dev, "implied_vol")
    vol, status = tickgpu.implied_vol(**q, dtype=dtype, backend="gpu", return_status=True)
    assert taken(dev, "implied_vol") == before + 1
    pv, ps = iv_python_path(**q, dtype=dtype, backend="gpu", return_status=True)
    assert vol.get().tobytes() == pv.get().tobytes() and status.get().tobytes() == ps.get().tobytes()


def test_a_full_constants_ring_wraps_on_the_python_path(dev, rng):
    h = host(rng, 16)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    ring = dev.constants
    ring.cursor = ring.slots - 1   # two values do not fit: the Python path's put waits and wraps
    before, wraps = taken(dev), ring.wraps
    check(dev, tickgpu.greeks(**dict(x, rate=0.02, div=0.01), backend="gpu"),
          dict(h, rate=np.full(16, 0.02), div=np.full(16, 0.01)), np.float64)
    assert taken(dev) == before and ring.wraps == wraps + 1 and ring.cursor == 2
    check(dev, tickgpu.greeks(**dict(x, rate=0.02, div=0.01), backend="gpu"),
          dict(h, rate=np.full(16, 0.02), div=np.full(16, 0.01)), np.float64)
    assert taken(dev) == before + 1 and ring.cursor == 4


def test_values_survive_calls_made_while_the_results_are_made(tmp_path, monkeypatch, rng):
    """Python code runs inside a call (the results' allocation, the plan factory) and may call
    again on this thread -- a finalizer, a hook -- as often as it likes: the call's values go into
    the ring after it, so a lap of the ring meanwhile overwrites nothing of them."""
    nested = []
    made = arrays.empty_outputs

    def empty_outputs(*a):
        if nested:
            y = nested.pop()
            ring = ctx.constants
            wraps = ring.wraps
            while ring.wraps < wraps + 2:   # a full lap, and past where the outer call began
                tickgpu.greeks(**y, backend="gpu")
        return made(*a)

    monkeypatch.setattr(arrays, "empty_outputs", empty_outputs)
    ctx = make_ctx(tmp_path, monkeypatch)
    try:
        h = host(rng, 16)
        x = {k: ctx.cp.asarray(v) for k, v in h.items()}
        values = dict(rate=0.02, div=0.01, t=0.75)
        nested.append(dict(x, rate=0.09, div=0.05, t=1.5))
        g = tickgpu.greeks(**dict(x, **values), backend="gpu")
        assert not nested and ctx.constants.wraps >= 2
        check(ctx, g, dict(h, **{k: np.full(16, v) for k, v in values.items()}), np.float64)
        assert taken(ctx) > 2 * ctx.constants.slots // 3 - 2   # the calls were the C entry's
    finally:
        rt.reset()


def test_a_failed_value_copy_raises_and_releases_the_lock(dev, rng):
    h = host(rng, 16)
    x = dict({k: dev.cp.asarray(v) for k, v in h.items()}, rate=0.02)
    dev.htod.fail, runs = 1, dev.launch.runs
    with pytest.raises(CudaError, match="cuMemcpyHtoDAsync"):
        tickgpu.greeks(**x, backend="gpu")
    assert dev.launch.runs == runs   # nothing launched after the failed copy
    dev.htod.fail = None
    assert lock_is_free(dev)
    check(dev, tickgpu.greeks(**x, backend="gpu"), dict(h, rate=np.full(16, 0.02)), np.float64)


@pytest.mark.parametrize("case", ["numpy scalar", "big int", "bool value", "float32 overflow", "length", "dtype",
                                  "not contiguous", "2-d", "numpy mixed", "int flags", "int call"])
def test_other_calls_take_the_python_path(dev, rng, case):
    h = host(rng, 32)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    dtype = np.float32 if case == "float32 overflow" else np.float64
    if case == "numpy scalar":
        x["rate"] = np.float64(0.02)
    elif case == "big int":
        x["strike"] = 2**60
    elif case == "bool value":
        x["div"] = True
    elif case == "float32 overflow":
        x = {k: dev.cp.asarray(v.astype(np.float32) if k != "call" else v) for k, v in h.items()}
        x["spot"] = 1e39
    elif case == "int call":
        x["call"] = 1
    elif case == "length":
        x["vol"] = dev.cp.asarray(np.full(1, 0.2))
    elif case == "dtype":
        x["t"] = dev.cp.asarray(h["t"].astype(np.float32))
    elif case == "not contiguous":
        x["spot"].flags = type("F", (), {"c_contiguous": False})()
    elif case == "2-d":
        x["spot"].shape = (4, 8)
    elif case == "numpy mixed":
        x["div"] = h["div"]
    elif case == "int flags":
        x["call"] = dev.cp.asarray(h["call"].astype(np.int8))
    before = taken(dev)
    if case in ("dtype", "not contiguous", "2-d", "bool value"):   # the Python path's verdict
        with pytest.raises((TypeError, ValueError)):
            tickgpu.greeks(**x, backend="gpu")
    else:
        with np.errstate(over="ignore"):
            p = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
        assert isinstance(p.price, dev.cp.ndarray)
    assert taken(dev) == before


def test_a_failed_launch_raises_and_releases_the_lock(dev, rng):
    h = host(rng, 16)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    dev.launch.fail = 700
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        tickgpu.greeks(**x, backend="gpu")
    dev.launch.fail = None
    assert lock_is_free(dev)
    check(dev, tickgpu.greeks(**x, backend="gpu"), h, np.float64)


def test_device_setup_is_checked(dev):
    t = dev.tickers["greeks"]
    with pytest.raises(TypeError):
        t.device(0, lambda *a: None, lambda *a: None, 0, 10, 10)
    with pytest.raises(TypeError):
        t.device(1, None, lambda *a: None, 0, 10, 10)
    with pytest.raises(TypeError):
        t.device(1, lambda *a: None, lambda *a: None, 0, 10, 10, 5)   # torch_spec not callable
    with pytest.raises(ValueError, match="k_out"):
        t.device(1, lambda *a: None, lambda *a: None, 0, 10, 2)      # greeks has ten outputs
    with pytest.raises(ValueError):
        fasttick._fasttick.DevicePlan(0, 1, [0], [0], 0, None)
    with pytest.raises(ValueError, match="k_out"):
        dev.tickers["implied_vol"].device(1, lambda *a: None, lambda *a: None, 0, 10, 0)
    with pytest.raises(RuntimeError, match="already"):   # set up by enable: once only
        t.device(1, lambda *a: None, lambda *a: None, 0, 10, 10)
    h = {k: dev.cp.asarray(v) for k, v in host(np.random.default_rng(5), 8).items()}
    tickgpu.greeks(**h, backend="gpu")
    assert taken(dev) == 1   # what enable set up still serves


def torch_inputs(dev, h, dtype):
    return {k: dev.th.asarray(v) for k, v in h.items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, 1000])
def test_torch_calls_are_taken_in_c_with_the_python_paths_bits(dev, rng, dtype, n):
    h = host(rng, n, dtype)
    x = torch_inputs(dev, h, dtype)
    fake_torch.Tensor.stream = 0x77   # PyTorch's current stream: the one the launch goes on
    before = taken(dev)
    g = tickgpu.greeks(**x, dtype=dtype, backend="gpu")
    assert taken(dev) == before + 1 and type(g) is tickgpu.Greeks
    check(dev, g, h, dtype, kind="torch")
    assert dev.launch.streams[-1] == 0x77
    p = python_path(**x, dtype=dtype, backend="gpu")
    for k in GREEKS:
        assert getattr(g, k).get().tobytes() == getattr(p, k).get().tobytes(), k
    if n > 1:   # rows of one block, as the Python path makes them
        ptrs = [getattr(g, k).data_ptr() for k in GREEKS]
        assert all(b - a == n * np.dtype(dtype).itemsize for a, b in zip(ptrs, ptrs[1:]))
    x["call"] = dev.th.asarray(h["call"].astype(np.uint8))   # flags as bytes
    check(dev, tickgpu.greeks(**x, dtype=dtype, backend="auto"), h, dtype, kind="torch")
    assert taken(dev) == before + 2


class TensorSubclass(fake_torch.Tensor):
    pass


@pytest.mark.parametrize("case", ["grad", "not contiguous", "2-d", "other device", "mixed kinds", "dtype",
                                  "not cuda", "subclass", "0-d"])
def test_other_torch_calls_take_the_python_path(dev, rng, case):
    h = host(rng, 32)
    x = torch_inputs(dev, h, np.float64)
    if case == "not cuda":   # a device of another kind, numbered 0 as the context's
        x["strike"]._kind = "xpu"
    elif case == "subclass":   # not torch.Tensor itself: its interface says what it is
        s = x["vol"]
        x["vol"] = TensorSubclass(s.shape, s.dtype, s._storage)
    elif case == "0-d":
        x["rate"] = fake_torch.Tensor((), fake_torch.float64, x["rate"]._storage)
        h["rate"] = np.full(32, h["rate"][0])
    elif case == "grad":
        x["vol"].requires_grad = True
    elif case == "not contiguous":
        x["spot"] = dev.th.asarray(np.repeat(h["spot"], 2))[::2]
    elif case == "2-d":
        x["spot"].shape, x["spot"]._strides = (4, 8), (8, 1)
    elif case == "other device":
        x["t"]._index = 1
    elif case == "mixed kinds":
        x["rate"] = dev.cp.asarray(h["rate"])
    elif case == "dtype":
        x["div"] = dev.th.asarray(h["div"].astype(np.float32))
    before = taken(dev)
    if case in ("mixed kinds", "subclass", "0-d"):
        p = tickgpu.greeks(**x, backend="gpu")   # the Python path takes these
        check(dev, p, h, np.float64, kind="torch")
    else:
        said = {"grad": r"^vol: a CUDA tensor that requires grad", "not contiguous": r"^spot: .* not C-contiguous",
                "2-d": r"^shape mismatch: .* with spot \(together \(4, 8\)\)", "dtype": r"^div: .* dtype float32",
                "other device": r"^t: GPU array is on device 1", "not cuda": r"^strike: can't convert xpu:0"}[case]
        with pytest.raises((TypeError, ValueError), match=said):
            tickgpu.greeks(**x, backend="gpu")
    assert taken(dev) == before


def iv_host(rng, n, dtype):
    h = host(rng, n, dtype)
    del h["vol"]
    return dict(price=rng.uniform(1, 20, n).astype(dtype), **h)


def iv_python_path(**kw):
    saved = iv_mod._fast
    iv_mod._fast = None
    try:
        return tickgpu.implied_vol(**kw)
    finally:
        iv_mod._fast = saved


@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_implied_vol_on_gpu_arrays_is_taken_in_c(dev, rng, kind, dtype):
    h = iv_host(rng, 33, dtype)
    lib = dev.cp if kind == "cupy" else dev.th
    x = {k: lib.asarray(v) for k, v in h.items()}
    before = taken(dev, "implied_vol")
    vol, status = tickgpu.implied_vol(**x, dtype=dtype, backend="gpu", return_status=True)
    assert taken(dev, "implied_vol") == before + 1
    want, want_status = expected_iv_of(h)
    np.testing.assert_allclose(vol.get(), want, rtol=1e-12 if dtype == np.float64 else 2e-6)
    assert np.array_equal(status.get(), want_status) and status.get().dtype == np.int8
    pv, ps = iv_python_path(**x, dtype=dtype, backend="gpu", return_status=True)
    assert vol.get().tobytes() == pv.get().tobytes() and status.get().tobytes() == ps.get().tobytes()
    only = tickgpu.implied_vol(**x, dtype=dtype, backend="gpu")   # the vols alone
    assert taken(dev, "implied_vol") == before + 2 and only.get().tobytes() == vol.get().tobytes()


def expected_iv_of(h):
    from cuda_mock import expected_iv

    return expected_iv(**{k: np.asarray(v, np.float64) if k != "call" else v for k, v in h.items()})


def test_torch_spec(monkeypatch):
    import types

    mod = types.ModuleType("torch")
    monkeypatch.setitem(sys.modules, "torch", mod)
    assert fasttick.torch_spec(np.float64) is None            # a torch without CUDA
    mod.Tensor, mod.float64, mod.float32, mod.bool, mod.uint8 = type("Tensor", (), {}), 1, 2, 3, 4
    mod._C = types.SimpleNamespace(_cuda_getCurrentRawStream=len)
    assert fasttick.torch_spec(np.float32) == (mod.Tensor, 2, 3, 4, len)
    assert fasttick.torch_spec(np.int8) is None


def test_scratch_moved_rebuilds_the_plan(dev, rng):
    h = host(rng, 48)
    x = {k: dev.cp.asarray(v) for k, v in h.items()}
    tickgpu.greeks(**x, backend="gpu")
    dev.bundle.scratch_epoch += 1
    check(dev, tickgpu.greeks(**x, backend="gpu"), h, np.float64)
    assert taken(dev) == 2
    assert arrays._RECYCLE
