"""tickgpu.runtime.Pipeline on the GPU against the CPU backend (``pytest -m gpu``).

3,000,007 random options in chunks of 2**20 (two full chunks and a ragged tail; at depth 2 a slot is
reused), pageable and pinned memory, the overlapped pipeline, the serial baseline and stream().
The agreement criteria are those of test_gpu_ops.py (float64 1e-12, float32 1e-5 relative, with
the cancellation floor of vanna and volga; implied vol with its status rules), reused from there.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt

sys.path.insert(0, str(Path(__file__).parent))
import test_gpu_ops as ref  # noqa: E402  (the agreement criteria of the GPU op tests)

pytestmark = pytest.mark.gpu

N = 3_000_007
CHUNK = 1 << 20


@pytest.fixture(scope="module")
def ctx():
    c = rt.init(bundle_dir=Path(tickgpu.__file__).resolve().parent / "kernels" / "bundle")
    yield c
    rt.reset()


def _pinned(ctx, n, dtype):
    """A pinned NumPy array of n elements (freed with the returned pointer)."""
    dtype = np.dtype(dtype)
    ptr = ctx.driver.mem_host_alloc(max(1, n * dtype.itemsize))
    buf = (np.ctypeslib.ctypes.c_uint8 * (n * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buf, dtype=dtype, count=n), ptr


def _greeks_agree(args, got, dtype, what):
    cpu = tickgpu.greeks(**args, dtype=dtype, backend="cpu")
    floors = ref.cancelling_scale(args)
    for name in ref.GREEKS:
        assert got[name].dtype == dtype and got[name].shape == (len(args["spot"]),)
        ref._agree(got[name], getattr(cpu, name), dtype, f"{what} {name}", floors.get(name))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [2, 3])
def test_greeks_pipeline_vs_cpu(ctx, rng, dtype, depth):
    args = ref._bsm(rng, N, dtype)
    with rt.Pipeline("greeks", dtype=dtype, chunk=CHUNK, depth=depth, context=ctx) as p:
        got = p.run(**args)
        _greeks_agree(args, got, dtype, f"pipeline depth {depth}")
        st = p.last
        assert st.chunks == 3 and st.n == N and 0 < st.first_result_s <= st.total_s
        # The serial baseline computes the same numbers.
        ser = p.serial(**args)
        for name in ref.GREEKS:
            np.testing.assert_array_equal(ser[name], got[name], err_msg=name)


def test_greeks_broadcast_and_conversion(ctx, rng):
    args = ref._bsm(rng, N, np.float64)      # float64 arrays into a float32 pipeline: converted
    args.update(rate=0.02, div=0.0)
    with rt.Pipeline("greeks", dtype=np.float32, chunk=CHUNK, context=ctx) as p:
        got = p.run(**args)
    _greeks_agree({k: (v.astype(np.float32) if isinstance(v, np.ndarray) and k != "call" else v)
                   for k, v in args.items()}, got, np.float32, "converted")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_greeks_pinned_inputs_and_outputs(ctx, rng, dtype):
    args = ref._bsm(rng, N, dtype)
    ptrs, pinned_args, out = [], {}, {}
    try:
        for k, v in args.items():
            a, ptr = _pinned(ctx, N, v.dtype)
            a[:] = v
            pinned_args[k] = a
            ptrs.append(ptr)
        for name in ref.GREEKS:
            a, ptr = _pinned(ctx, N, dtype)
            out[name] = a
            ptrs.append(ptr)
        with rt.Pipeline("greeks", dtype=dtype, chunk=CHUNK, depth=3, context=ctx) as p:
            got = p.run(out=out, **pinned_args)
        assert all(got[name] is out[name] for name in ref.GREEKS)
        _greeks_agree(args, got, dtype, "pinned")
    finally:
        for ptr in ptrs:
            ctx.driver.mem_free_host(ptr)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_implied_vol_pipeline_vs_cpu(ctx, rng, dtype):
    args = ref._iv_inputs(rng, N, dtype)
    with rt.Pipeline("implied_vol", dtype=dtype, chunk=CHUNK, context=ctx) as p:
        got = p.run(**args)
    cpu = tickgpu.implied_vol(**args, dtype=dtype, backend="cpu", return_status=True)
    assert got["vol"].dtype == dtype and got["status"].dtype == np.int8
    ref._iv_agree(args, (got["vol"], got["status"]), cpu, dtype, "pipeline iv")


def test_stream_batches_match_run(ctx, rng):
    sizes = [CHUNK // 3, 2 * CHUNK + 5, 17, CHUNK, 1, 123_457]
    batches = [ref._bsm(rng, m, np.float32) for m in sizes]
    with rt.Pipeline("greeks", dtype=np.float32, chunk=CHUNK, depth=2, context=ctx) as p:
        want = [p.run(**b) for b in batches]
        got = list(p.stream(iter(batches)))
    assert len(got) == len(sizes)
    for g, w in zip(got, want):
        for name in ref.GREEKS:
            np.testing.assert_array_equal(g[name], w[name], err_msg=name)


def test_pipeline_overlaps_on_pinned_memory(ctx, rng):
    """Timing sanity, not a benchmark: on pinned memory the pipeline is not slower than serial."""
    n = 8 * CHUNK
    args = ref._bsm(rng, n, np.float32)
    ptrs, pin = [], {}
    try:
        for k, v in args.items():
            a, ptr = _pinned(ctx, n, v.dtype)
            a[:] = v
            pin[k], ptrs = a, ptrs + [ptr]
        out = {}
        for name in ref.GREEKS:
            a, ptr = _pinned(ctx, n, np.float32)
            out[name], ptrs = a, ptrs + [ptr]
        with rt.Pipeline("greeks", dtype=np.float32, chunk=CHUNK, depth=3, context=ctx) as p:
            p.run(out=out, **pin)
            piped = min((p.run(out=out, **pin), p.last.total_s)[1] for _ in range(3))
            serial = min((p.serial(out=out, **pin), p.last.total_s)[1] for _ in range(3))
        assert piped < serial, f"pipeline {piped:.4f} s, serial {serial:.4f} s"
    finally:
        for ptr in ptrs:
            ctx.driver.mem_free_host(ptr)
