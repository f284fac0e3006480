"""The GPU runtime on a mock driver: packing, variants, graphs, errors, imports -- no GPU needed.

The mock (cuda_mock.py) backs "device" memory with host memory and emulates each kernel family
with a closed-form function read through the argument buffer exactly as a GPU would, checking
every dereferenced range against the allocations. So these tests fail on a wrong offset, stride,
layout, grid, variant or graph update -- not only on a crash.
"""
import ctypes
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tickgpu
import tickgpu.runtime as rt
from tickgpu.errors import BackendUnavailable, TickGpuError
from tickgpu.runtime import ops
from tickgpu.kernels.manifest import FAMILY_PARAMS
from tickgpu.runtime.bundle import Bundle, BundleError, Manifest, arch_for
from tickgpu.runtime.driver import CudaError
from tickgpu.runtime.launch import ArgBuffer, grid_for

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import (FakeGpuArray, MockDriver, default_entries, expected_greeks, expected_iv,  # noqa: E402
                       expected_surface, kernel_entry, write_bundle)

CHUNK = 64   # staging elements: small, so the pipeline path runs on small arrays


@pytest.fixture
def bundle_dir(tmp_path):
    return write_bundle(tmp_path / "bundle", default_entries())


@pytest.fixture
def mock():
    return MockDriver()


@pytest.fixture(params=["mapped", "copies"])
def ctx(request, mock, bundle_dir):
    """The runtime on the mock; ticks either on mapped staging (the default for small ticks) or
    through copy -> kernel -> copy graphs (bigger ticks), so both graph shapes are exercised."""
    c = rt.init(driver=mock, bundle_dir=bundle_dir, staging_elements=CHUNK)
    if request.param == "copies":
        c.mapped_elements = 0
    yield c
    rt.reset()


def _bsm_inputs(rng, n, dtype):
    return dict(spot=rng.uniform(50, 150, n).astype(dtype), strike=rng.uniform(50, 150, n).astype(dtype),
                t=rng.uniform(0.01, 2, n).astype(dtype), rate=rng.uniform(0, 0.05, n).astype(dtype),
                vol=rng.uniform(0.05, 0.8, n).astype(dtype), div=rng.uniform(0, 0.03, n).astype(dtype),
                call=rng.random(n) < 0.5)


def _ref(d):
    return {k: (np.asarray(v, dtype=np.float64) if k != "call" else np.asarray(v)) for k, v in d.items()}


def _close(a, b, dtype):
    tol = 1e-12 if np.dtype(dtype) == np.float64 else 2e-6
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.broadcast_to(b, np.shape(a)), rtol=tol, atol=tol)


# ---- manifest and architecture -----------------------------------------------------------------
@pytest.mark.parametrize("cc,arch", [((9, 0), "sm_90"), ((8, 0), "sm_80"), ((8, 6), "sm_80"), ((8, 9), "sm_80")])
def test_arch_supported(cc, arch):
    assert arch_for(cc) == (arch, "")


@pytest.mark.parametrize("cc", [(7, 5), (10, 0), (12, 0), (9, 1)])
def test_arch_refused_with_reason(cc):
    arch, reason = arch_for(cc)
    assert arch is None and f"{cc[0]}.{cc[1]}" in reason and "sm_80" in reason


def test_context_refuses_unsupported_device(bundle_dir):
    with pytest.raises(BackendUnavailable, match="compute capability 7.5"):
        rt.init(driver=MockDriver(cc=(7, 5)), bundle_dir=bundle_dir)
    rt.reset()


def test_manifest_reads_contract(bundle_dir):
    m = Manifest.read(bundle_dir)
    assert {k.family for k in m.kernels} == {"greeks", "implied_vol", "surface", "noop", "scale"}
    k = next(k for k in m.kernels if k.family == "greeks")
    assert len(k.contract_params) == len(FAMILY_PARAMS["greeks"]) == 25
    assert [p.name for p in k.scratch_params] == ["global_scratch", "profile_scratch"]


@pytest.mark.parametrize("mutate,match", [
    (lambda e: e.update(block=[100, 1, 1]), "num_warps"),
    (lambda e: e["params"][1].update(kind="ptr", size=8), "contract wants i32"),
    (lambda e: e["params"][0].update(size=4), "do not fit kind ptr"),
    (lambda e: e.update(family="heston"), "unknown family"),
    (lambda e: e.update(dtype="f16"), "dtype"),
    (lambda e: e["params"].pop(3), "contract wants"),
    (lambda e: e.pop("entry"), "missing 'entry'"),
])
def test_manifest_defects_named(tmp_path, mutate, match):
    e = kernel_entry("greeks", "f64", 256, 128, True)
    mutate(e)
    write_bundle(tmp_path, [e])
    with pytest.raises(BundleError, match=match) as info:
        Manifest.read(tmp_path)
    assert "greeks_f64_b256_a16" in str(info.value)


def test_manifest_missing_and_bad_format(tmp_path):
    with pytest.raises(BundleError, match="manifest.json missing"):
        Manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 2, "kernels": []}))
    with pytest.raises(BundleError, match="format must be 1"):
        Manifest.read(tmp_path)


def test_param_info_mismatch_names_kernel_and_param(tmp_path, mock):
    e = kernel_entry("greeks", "f64", 256, 128, True)
    bad = [[p["offset"], p["size"]] for p in e["params"]]
    bad[24] = [bad[24][0], 8]          # the cubin says n is 8 bytes
    write_bundle(tmp_path, [e], cubin_params={e["variant"]: bad})
    with pytest.raises(BundleError, match=r"greeks_f64_b256_a16: param 24 \(n\): manifest says offset \d+ size 4, "
                                          r"the cubin says offset \d+ size 8"):
        Bundle(mock, Manifest.read(tmp_path), "sm_90")
    write_bundle(tmp_path, [e], cubin_params={e["variant"]: bad[:-1]})
    with pytest.raises(BundleError, match="takes 26 params, the manifest lists 27"):
        Bundle(mock, Manifest.read(tmp_path), "sm_90")


def test_no_kernels_for_arch(tmp_path, mock):
    write_bundle(tmp_path, [kernel_entry("greeks", "f64", 256, 128, True, arch="sm_80")])
    with pytest.raises(BundleError, match="no kernels for sm_90"):
        Bundle(mock, Manifest.read(tmp_path), "sm_90")


def test_bundle_records_load_time(ctx):
    assert ctx.bundle.load_seconds > 0
    assert all(k.load_seconds >= 0 for k in ctx.bundle.kernels.values())
    assert ctx.driver.counts["module_load"] == len(default_entries())


# ---- scratch ------------------------------------------------------------------------------------
def test_profile_scratch_refused(tmp_path, mock):
    e = kernel_entry("greeks", "f64", 256, 128, True, scratch={"global": 0, "global_align": 1, "profile": 64})
    write_bundle(tmp_path, [e])
    with pytest.raises(BundleError, match="greeks_f64_b256_a16: needs 64 bytes of profile scratch"):
        Bundle(mock, Manifest.read(tmp_path), "sm_90")


def test_global_scratch_without_param_refused(tmp_path, mock):
    e = kernel_entry("implied_vol", "f64", 128, 128, False, source="cuda",
                     scratch={"global": 32, "global_align": 16, "profile": 0})
    write_bundle(tmp_path, [e])
    with pytest.raises(BundleError, match="global scratch .* no scratch parameter"):
        Bundle(mock, Manifest.read(tmp_path), "sm_90")


def test_global_scratch_allocated_once_and_passed(tmp_path, mock, rng):
    entries = [kernel_entry("greeks", "f64", 256, 128, True, scratch={"global": 100, "global_align": 16, "profile": 0})]
    write_bundle(tmp_path, entries)
    c = rt.init(driver=mock, bundle_dir=tmp_path, staging_elements=1024)
    try:
        d = _bsm_inputs(rng, 1000, np.float64)
        ops.greeks(**d, dtype=np.float64, shape=(1000,))
        k = c.bundle.kernels["greeks_f64_b256_a16"]
        ptr = k.scratch["global_scratch"]
        assert ptr and k.scratch_grid >= 4                    # 4 blocks of 256 for 1000 elements
        assert mock.sizes[ptr] >= 4 * 112                    # 100 bytes rounded to the 16-byte alignment
        assert mock.launches[-1]["args"][25] == ptr and mock.launches[-1]["args"][26] == 0
        allocs = mock.counts["mem_alloc"]
        ops.greeks(**d, dtype=np.float64, shape=(1000,))
        assert mock.counts["mem_alloc"] == allocs            # not re-allocated
    finally:
        rt.reset()


# ---- argument packing -----------------------------------------------------------------------------
def test_arg_buffer_layout_matches_manifest(ctx):
    k = ctx.bundle.kernels["greeks_f64_b256_a16"]
    buf = ArgBuffer(k)
    vals = tuple((0x10000 + 16 * i) if kind == "ptr" else (i % 2) for i, (_, kind) in enumerate(FAMILY_PARAMS["greeks"]))
    vals = vals[:-1] + (123456,)
    buf.pack(*vals)
    base = buf.values.ctypes.data
    for i, p in enumerate(k.spec.params):
        assert int(buf.pointers[i]) == base + p.offset
        raw = bytes(buf.values[p.offset:p.offset + p.size])
        want = vals[i] if i < len(vals) else 0
        assert int.from_bytes(raw, "little", signed=p.kind != "ptr") == want, p.name
    address_of_array = buf.pointers.ctypes.data
    assert buf.address == address_of_array
    buf.set(24, 7)   # in-place update of n
    assert buf.read()[24] == 7


def test_arg_buffer_rejects_bad_values(ctx):
    buf = ArgBuffer(ctx.bundle.kernels["greeks_f64_b256_a16"])
    vals = [0] * 25
    vals[24] = 2**31   # n beyond i32
    with pytest.raises(ValueError, match=r"parameter 24 \(n\)"):
        buf.pack(*vals)
    with pytest.raises(TypeError, match="24 values for 25"):
        buf.pack(*vals[:-1])


def test_grid_for():
    assert grid_for(0, 256) == (1, 1, 1)
    assert grid_for(1, 256) == (1, 1, 1)
    assert grid_for(256, 256) == (1, 1, 1)
    assert grid_for(257, 256) == (2, 1, 1)
    assert grid_for(2**20 + 3, 4096) == (257, 1, 1)


# ---- variant selection ----------------------------------------------------------------------------
def test_variant_by_dtype_alignment_and_size(ctx):
    sel = ctx.bundle.select
    assert sel("greeks", "f64", 1000, True, 132).variant == "greeks_f64_b256_a16"       # small n: small blocks
    assert sel("greeks", "f64", 132 * 4096, True, 132).variant == "greeks_f64_b4096_a16"  # fills every SM
    assert sel("greeks", "f64", 131 * 4096, True, 132).variant == "greeks_f64_b256_a16"
    assert sel("greeks", "f32", 10, True, 132).variant == "greeks_f32_b256_a16"
    assert sel("greeks", "f64", 10, False, 132).variant == "greeks_f64_b256"             # misaligned pointers
    assert not sel("greeks", "f64", 10**8, False, 132).spec.aligned16


def test_variant_choice_follows_the_rule_at_every_boundary(tmp_path, mock):
    # Three block sizes: the largest that still gives every SM a block, else the smallest.
    write_bundle(tmp_path, [kernel_entry("greeks", "f32", epb, epb // 4, a) for epb in (256, 1024, 4096)
                            for a in (False, True)])
    b = Bundle(mock, Manifest.read(tmp_path), "sm_90")
    for aligned in (False, True):
        cands = [k for k in b.kernels.values() if k.spec.aligned16 == aligned]
        for sm in (1, 7, 132):
            for n in sorted({1, 255, 256, 257} | {epb * sm + d for epb in (256, 1024, 4096) for d in (-1, 0, 1)}):
                filling = [k for k in cands if -(-n // k.spec.elements_per_block) >= sm]
                want = (max(filling, key=lambda k: k.spec.elements_per_block) if filling
                        else min(cands, key=lambda k: k.spec.elements_per_block))
                assert b.select("greeks", "f32", n, aligned, sm) is want, (n, sm, aligned)


def test_variant_missing_is_clear(tmp_path, mock):
    write_bundle(tmp_path, [kernel_entry("greeks", "f64", 256, 128, True)])
    b = Bundle(mock, Manifest.read(tmp_path), "sm_90")
    with pytest.raises(BundleError, match="no greeks kernel for dtype f64 that accepts unaligned pointers"):
        b.select("greeks", "f64", 10, False, 132)
    with pytest.raises(BundleError, match="no greeks kernel for dtype f32"):
        b.select("greeks", "f32", 10, True, 132)


# ---- host path end to end -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 17, CHUNK, CHUNK + 1, 5 * CHUNK + 3])
def test_greeks_host_path(ctx, rng, dtype, n):
    d = _bsm_inputs(rng, n, dtype)
    out = ops.greeks(**d, dtype=dtype, shape=(n,))
    want = expected_greeks(**_ref(d))
    assert set(out) == set(want)
    for k in want:
        assert isinstance(out[k], np.ndarray) and out[k].dtype == dtype and out[k].shape == (n,)
        _close(out[k], want[k], dtype)


def test_greeks_broadcast_scalars_and_shapes(ctx, rng):
    spot = rng.uniform(80, 120, (3, 4))
    strike = rng.uniform(80, 120, (1, 4))          # broadcast along rows: copied once on the host
    out = ops.greeks(spot, strike, 0.25, 0.02, 0.3, 0.01, False, dtype=np.float64, shape=(3, 4))
    want = expected_greeks(spot, strike, 0.25, 0.02, 0.3, 0.01, False)
    for k in want:
        assert out[k].shape == (3, 4)
        _close(out[k], want[k], np.float64)
    # scalar-only call: 0-d results
    out = ops.greeks(100.0, 95.0, 1.0, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=())
    assert out["price"].shape == ()
    _close(out["price"], expected_greeks(100.0, 95.0, 1.0, 0.01, 0.2, 0.0, True)["price"], np.float64)


@pytest.mark.parametrize("bad", [["100", "101"], np.array([100 + 1j, 101]), [None, 100.0], np.complex128(100)])
def test_host_path_refuses_what_is_not_real_numbers(ctx, bad):
    """As the CPU backend: no parsing of strings, no dropped imaginary parts, no None as NaN."""
    with pytest.raises(TypeError, match="^spot: must be a real number"):
        tickgpu.greeks(bad, 100.0, 1.0, 0.0, 0.2, backend="gpu")
    with pytest.raises(TypeError, match="^spot: must be a real number"):
        tickgpu.greeks(bad, 100.0, 1.0, 0.0, 0.2, backend="cpu")


@pytest.mark.parametrize("bad", [["100"] * 4, np.array([100 + 1j] * 4), [None] * 4, "100", 100 + 0j])
def test_device_path_refuses_host_values_that_are_not_real_numbers(ctx, mock, bad):
    """A host value mixed with GPU arrays is checked as on the host path, for every operation."""
    spot = FakeGpuArray(mock, np.full(4, 100.0))
    with pytest.raises(TypeError, match="^strike: must be a real number"):
        tickgpu.greeks(spot, bad, 1.0, 0.0, 0.2, backend="gpu")
    with pytest.raises(TypeError, match="^strike: must be a real number"):
        tickgpu.implied_vol(FakeGpuArray(mock, np.full(4, 5.0)), 100.0, bad, 1.0, 0.0, backend="gpu")
    g = tickgpu.greeks(spot, np.arange(96, 100), 1.0, 0.0, 0.2, backend="gpu")    # integers are real
    _close(_read(mock, g.price), expected_greeks(100.0, np.arange(96.0, 100.0), 1.0, 0.0, 0.2, 0.0, True)["price"],
           np.float64)


def test_stride_zero_inputs_take_one_element(ctx, mock, rng):
    """Pipeline chunks give a single value one element of staging and stride 0."""
    n = 2 * CHUNK + 40
    spot = rng.uniform(50, 150, n)
    out = ops.greeks(spot, 100.0, 1.0, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=(n,))
    _close(out["theta"], expected_greeks(spot, 100.0, 1.0, 0.01, 0.2, 0.0, True)["theta"], np.float64)
    args = mock.launches[-1]["args"]
    strides = [args[2 * i + 1] for i in range(7)]
    assert strides == [1, 0, 0, 0, 0, 0, 0]
    plan = ctx.plans[("greeks", "d", 48, 2, (), None, 0b1)]
    assert plan.layout.in_bytes == 48 * 8 + 6 * 64          # one array slot, six one-element slots


def test_empty_arrays_touch_nothing(ctx, mock):
    before = len(mock.calls)
    out = ops.greeks(np.empty(0), 100.0, 1.0, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=(0,))
    assert out["price"].shape == (0,) and len(mock.calls) == before


@pytest.mark.parametrize("bad", [np.array(["x"], dtype=object), ["x"], np.array([True]), None])
def test_empty_calls_refuse_what_is_not_real_numbers(ctx, mock, bad):
    """An empty broadcast shape computes nothing, but a value that is not real numbers is refused
    as at any other size, with the CPU backend's message, on the host path and with a GPU array."""
    for backend in ("cpu", "gpu"):
        with pytest.raises(TypeError, match=r"^div: must be a real number"):
            tickgpu.greeks(np.ones((0, 1)), 100.0, 1.0, 0.01, 0.2, bad, backend=backend)
        with pytest.raises(TypeError, match=r"^div: must be a real number"):
            tickgpu.implied_vol(np.ones((0, 1)), 100.0, 100.0, 1.0, 0.01, bad, backend=backend)
    before = len(mock.calls)
    with pytest.raises(TypeError, match=r"^div: must be a real number"):
        tickgpu.greeks(FakeGpuArray(mock, np.empty(0)), 100.0, 1.0, 0.01, 0.2, bad, backend="gpu")
    assert not any(c.startswith("cuLaunch") or c.startswith("cuGraph") for c in mock.calls[before:])
    for backend in ("cpu", "gpu"):
        with pytest.raises(ValueError, match=r"^strike: an integer beyond float64's range"):
            tickgpu.greeks(np.ones((0, 1)), 10**400, 1.0, 0.01, 0.2, backend=backend)
        with pytest.raises(ValueError, match=r"^strike: an integer beyond float64's range"):
            tickgpu.implied_vol(np.ones((0, 1)), 100.0, 10**400, 1.0, 0.01, backend=backend)
    with pytest.raises(ValueError, match=r"^strike: an integer beyond float64's range"):
        tickgpu.greeks(FakeGpuArray(mock, np.empty(0)), 10**400, 1.0, 0.01, 0.2, backend="gpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 33, 3 * CHUNK + 5])
def test_implied_vol_host_path(ctx, rng, dtype, n):
    d = _bsm_inputs(rng, n, dtype)
    d.pop("vol")
    price = rng.uniform(1, 20, n).astype(dtype)
    vol, status = ops.implied_vol(price, **d, dtype=dtype, shape=(n,))
    want_vol, want_status = expected_iv(np.float64(price), **_ref(d))
    assert vol.dtype == dtype and status.dtype == np.int8
    _close(vol, want_vol, dtype)
    np.testing.assert_array_equal(status, want_status)


@pytest.mark.parametrize("n", [1, 50, 4 * CHUNK + 1])
def test_surface_host_path(ctx, rng, n):
    strikes, expiries = np.sort(rng.uniform(50, 150, 7)), np.sort(rng.uniform(0.1, 3, 5))
    vols = rng.uniform(0.1, 0.5, (5, 7))
    k, t = rng.uniform(40, 160, n), rng.uniform(0, 4, n)
    for mode, what in ((0, 0), (1, 1)):
        out = ops.surface_eval(strikes, expiries, vols, mode, k, t, what=what, shape=(n,))
        _close(out, expected_surface(strikes, expiries, vols.ravel(), mode, k, t, what), np.float64)


def test_surface_bad_grid(ctx):
    with pytest.raises(ValueError, match="vols has 5 values for 2 expiries x 3 strikes"):
        ops.surface_eval(np.arange(3.0), np.arange(2.0), np.ones(5), 0, 1.0, 1.0, what=0, shape=())
    with pytest.raises(ValueError, match="mode and what"):
        ops.surface_eval(np.arange(3.0), np.arange(2.0), np.ones(6), 3, 1.0, 1.0, what=0, shape=())


# ---- graphs ---------------------------------------------------------------------------------------
def test_graph_per_bucket_captured_once_and_replayed(ctx, mock, rng):
    d = _bsm_inputs(rng, 20, np.float64)
    ops.greeks(**d, dtype=np.float64, shape=(20,))
    r = ctx.runners[("greeks", "f64", 0)]
    instantiated = mock.counts["graph_instantiate"]
    s0 = dict(r.stats)
    for _ in range(5):                                   # same bucket: replay only
        ops.greeks(**d, dtype=np.float64, shape=(20,))
    assert r.stats["captures"] == s0["captures"] == 1
    assert r.stats["replays"] == s0["replays"] + 5
    assert r.stats["kernel_updates"] == s0["kernel_updates"] and r.stats["copy_updates"] == s0["copy_updates"]
    d2 = _bsm_inputs(rng, 40, np.float64)                 # new bucket: its own graph, nothing re-pointed
    out = ops.greeks(**d2, dtype=np.float64, shape=(40,))
    assert r.stats["captures"] == 2 and mock.counts["graph_instantiate"] == instantiated + 1
    assert r.stats["kernel_updates"] == s0["kernel_updates"] and r.stats["copy_updates"] == s0["copy_updates"]
    assert mock.launches[-1]["n"] == 48 and mock.launches[-1]["grid"] == (1, 1, 1)
    _close(out["vega"], expected_greeks(**_ref(d2))["vega"], np.float64)
    for _ in range(3):                                   # back and forth: no capture, no update
        out = ops.greeks(**d, dtype=np.float64, shape=(20,))
        _close(out["charm"], expected_greeks(**_ref(d))["charm"], np.float64)
        out = ops.greeks(**d2, dtype=np.float64, shape=(40,))
        _close(out["rho"], expected_greeks(**_ref(d2))["rho"], np.float64)
    assert r.stats["captures"] == 2 and r.stats["kernel_updates"] == s0["kernel_updates"]


def test_single_values_in_ticks_change_no_graph(ctx, mock, rng):
    """A tick's single values fill their slots (stride 1): no pattern ever re-points a graph, and
    an unchanged value is not written again."""
    n = 30
    d = _bsm_inputs(rng, n, np.float64)
    ops.greeks(**d, dtype=np.float64, shape=(n,))
    r = ctx.runners[("greeks", "f64", 0)]
    plan = ctx.plans[("greeks", "d", 32, 0, (), None, None)]
    s0 = dict(r.stats)
    for vol in (0.3, 0.3, 0.35, -0.0, 0.0):
        mixed = dict(d, t=0.5, rate=np.float64(0.01), vol=np.array(vol), div=np.array([0.02]), call=False)
        out = ops.greeks(**mixed, dtype=np.float64, shape=(n,))
        want = expected_greeks(**_ref(dict(d, t=0.5, rate=0.01, vol=vol, div=0.02, call=False)))
        for k in want:
            _close(out[k], want[k], np.float64)
        assert np.signbit(plan.slots[4][:n]).all() == np.signbit(vol)
    assert r.stats["kernel_updates"] == s0["kernel_updates"] and r.stats["captures"] == s0["captures"]
    assert r.stats["copy_updates"] == s0["copy_updates"]
    assert [mock.launches[-1]["args"][2 * i + 1] for i in range(7)] == [1] * 7
    slots = plan.slots
    before = slots[2][:n].copy()
    slots[2][:n] = -1.0                                   # the plan believes t is still there...
    ops.greeks(**dict(d, t=0.5, rate=0.01, vol=0.3, div=0.02, call=False), dtype=np.float64, shape=(n,))
    assert (slots[2][:n] == -1.0).all()                   # ...so an unchanged value is not rewritten
    slots[2][:n] = before
    ops.greeks(**dict(d, t=0.5), dtype=np.float64, shape=(40,) if False else (n,))
    out = ops.greeks(**d, dtype=np.float64, shape=(n,))   # back to arrays: right again
    _close(out["gamma"], expected_greeks(**_ref(d))["gamma"], np.float64)


def test_a_refused_call_leaves_no_stale_copy_sizes(ctx, rng):
    """Sizes 1 and 3 share a bucket. A call of 3 refused half way (its third input is not numbers)
    has already rewritten the first two rows' copy sizes; the next call of 3 must copy all of every
    array, not what the call of 1 left in the table (it once copied one element and computed the
    other two from stale staging)."""
    for bad_at in range(7):
        small = _bsm_inputs(rng, 1, np.float64)
        ops.greeks(**small, dtype=np.float64, shape=(1,))
        d = _bsm_inputs(rng, 3, np.float64)
        names = list(d)
        refused = dict(d, **{names[bad_at]: np.array(["x"] * 3, dtype=object)})
        with pytest.raises(TypeError):
            ops.greeks(**refused, dtype=np.float64, shape=(3,))
        out = ops.greeks(**d, dtype=np.float64, shape=(3,))
        want = expected_greeks(**_ref(d))
        for k in want:
            _close(out[k], want[k], np.float64)
        single = dict(d, vol=0.25)                      # and a slot's single value after a refusal
        with pytest.raises(TypeError):
            ops.greeks(**dict(single, t=None), dtype=np.float64, shape=(3,))
        out = ops.greeks(**single, dtype=np.float64, shape=(3,))
        _close(out["price"], expected_greeks(**_ref(single))["price"], np.float64)


def test_staging_shared_by_plans_is_refilled(ctx, rng):
    """Two buckets' plans share runner 0's staging: a value one plan wrote is not trusted by another."""
    a, b = rng.uniform(50, 150, 20), rng.uniform(50, 150, 40)
    for _ in range(2):
        for spot, t in ((a, 0.5), (b, 0.7), (a, 0.5)):
            out = ops.greeks(spot, 100.0, t, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=spot.shape)
            _close(out["price"], expected_greeks(spot, 100.0, t, 0.01, 0.2, 0.0, True)["price"], np.float64)
        n = 3 * CHUNK + 1                                  # a pipeline writes runner 0's staging too
        spot = rng.uniform(50, 150, n)
        out = ops.greeks(spot, 100.0, 0.9, 0.01, 0.2, 0.0, True, dtype=np.float64, shape=(n,))
        _close(out["price"], expected_greeks(spot, 100.0, 0.9, 0.01, 0.2, 0.0, True)["price"], np.float64)


def test_host_inputs_conversions(ctx, rng):
    n = 3 * CHUNK + 7                                    # a pipeline, so chunk offsets apply too
    d = _bsm_inputs(rng, n, np.float64)
    wide = np.empty((n, 2))
    wide[:, 0] = d["strike"]
    calls_int = d["call"].astype(np.int64)
    args = dict(spot=d["spot"].astype(np.float32),         # another dtype: converted
                strike=wide[:, 0],                          # strided: copied
                t=d["t"][::-1].copy()[::-1],                # negative stride
                rate=d["rate"].astype(">f8"),               # big-endian
                vol=0.25, div=np.float32(0.01), call=calls_int)
    out = ops.greeks(**args, dtype=np.float64, shape=(n,))
    want = expected_greeks(**_ref(dict(d, spot=d["spot"].astype(np.float32), vol=0.25,
                                       div=float(np.float32(0.01)))))
    for k in want:
        _close(out[k], want[k], np.float64)
    # 2-D broadcast across a pipeline, flags as uint8 and bool
    spot = rng.uniform(80, 120, (5, CHUNK))
    strike = rng.uniform(80, 120, (1, CHUNK))
    for flags in (np.ones((5, 1), np.uint8), np.zeros(CHUNK, bool)):
        out = ops.greeks(spot, strike, 0.5, 0.02, 0.3, 0.0, flags, dtype=np.float32, shape=(5, CHUNK))
        want = expected_greeks(spot, strike, 0.5, 0.02, 0.3, 0.0, np.broadcast_to(flags, (5, CHUNK)))
        for k in want:
            assert out[k].shape == (5, CHUNK) and out[k].dtype == np.float32
            _close(out[k], want[k], np.float32)


def test_pipeline_waits_for_a_runner_before_reusing_it(ctx, mock, rng):
    """The chunk order tg_hot_pipeline follows, checked on its Python twin: a chunk is staged into
    a runner only after that runner's previous chunk was waited for and copied out."""
    events = []
    real_launch, real_sync = mock.graph_launch, mock.stream_synchronize
    mock.graph_launch = lambda e, s, sync=False: (events.append(("launch", s)), real_launch(e, s, sync=sync))
    mock.stream_synchronize = lambda s: (events.append(("sync", s)), real_sync(s))
    n = 6 * CHUNK + 5
    d = _bsm_inputs(rng, n, np.float64)
    out = ops.greeks(**d, dtype=np.float64, shape=(n,))
    _close(out["volga"], expected_greeks(**_ref(d))["volga"], np.float64)
    launches = [s for kind, s in events if kind == "launch"]
    streams = [ctx.runners[("greeks", "f64", i)].stream for i in range(3)]
    assert launches == [streams[0], streams[1]] * 3 + [streams[2]]
    pending = set()
    for kind, s in events:
        if kind == "launch":
            assert s not in pending, "a runner was reused before its chunk was collected"
            pending.add(s)
        else:
            pending.discard(s)
    assert not pending


def test_small_ticks_run_on_mapped_staging(ctx, mock, rng):
    """Up to `mapped_elements` a tick's graph is the kernel alone on the staging's device mapping;
    above, copy -> kernel -> copy on device buffers. Results are right either way."""
    if ctx.mapped_elements:
        ctx.mapped_elements = 32
    for n in (20, 40):
        d = _bsm_inputs(rng, n, np.float64)
        out = ops.greeks(**dict(d, vol=0.25), dtype=np.float64, shape=(n,))
        _close(out["delta"], expected_greeks(**_ref(dict(d, vol=0.25)))["delta"], np.float64)
        plan = ctx.plans[("greeks", "d", ops.bucket(n, CHUNK), 0, (), None, None)]
        r, args = plan.runner, mock.launches[-1]["args"]
        kinds = [op[0] for op in mock.execs[plan.graph.exec]]
        if ctx.mapped_elements and n <= 32:
            assert plan.mapped and kinds == ["kernel"]
            assert r.in_host <= args[0] < r.in_host + r.in_capacity          # spot, read in place
            assert r.out_host <= args[14] < r.out_host + r.out_capacity      # price, written in place
        else:
            assert not plan.mapped and kinds == ["copy", "kernel", "copy"]
            assert r.in_dev <= args[0] < r.in_dev + r.in_capacity
            assert r.out_dev <= args[14] < r.out_dev + r.out_capacity


def test_reset_plans_chooses_variants_anew(ctx, mock, rng, monkeypatch):
    """Tick plans bind their variant at warm-up; reset_plans makes the next call choose again."""
    ops.warmup(ctx)
    forced = ctx.bundle.kernels["greeks_f64_b4096"]
    monkeypatch.setattr(ctx.bundle, "select", lambda *a, **kw: forced)
    d = _bsm_inputs(rng, 40, np.float64)
    ops.greeks(**d, dtype=np.float64, shape=(40,))
    assert mock.launches[-1]["variant"] != "greeks_f64_b4096"       # the warm plan's choice
    ctx.reset_plans()
    out = ops.greeks(**d, dtype=np.float64, shape=(40,))
    assert mock.launches[-1]["variant"] == "greeks_f64_b4096"
    _close(out["phi"], expected_greeks(**_ref(d))["phi"], np.float64)


def test_copies_move_only_the_layout(ctx, mock, rng):
    n = 10
    d = _bsm_inputs(rng, n, np.float64)
    ops.greeks(**d, dtype=np.float64, shape=(n,))
    plan = ctx.plans[("greeks", "d", 16, 0, (), None, None)]
    r = plan.runner
    in_bytes, out_bytes = plan.graph._copy_bytes
    # every input has a slot of the bucket (16 elements): 128 bytes, 64 for call
    assert in_bytes == 6 * 128 + 64 and out_bytes == 10 * 128
    assert in_bytes < r.in_capacity and out_bytes < r.out_capacity


def test_no_allocation_after_warmup(ctx, mock, rng):
    ops.warmup(ctx)
    counts = dict(mock.counts)
    # a bigger grid than warm-up's must fit the staging headroom
    strikes, expiries, vols = np.linspace(50, 150, 40), np.linspace(0.1, 3, 20), np.full((20, 40), 0.2)
    for n in (1, 7, 64, 65, 300, 3):
        for dtype in (np.float64, np.float32):
            d = _bsm_inputs(rng, n, dtype)
            ops.greeks(**d, dtype=dtype, shape=(n,))
            d.pop("vol")
            ops.implied_vol(np.full(n, 5.0, dtype), **d, dtype=dtype, shape=(n,))
        ops.surface_eval(strikes, expiries, vols, 0, np.full(n, 100.0), 0.7, what=0, shape=(n,))
    assert mock.counts == counts


def test_warmup_launches_every_variant_and_graph(ctx, mock):
    info = ops.warmup(ctx)
    launched = {l["variant"] for l in mock.launches}
    assert launched == set(ctx.bundle.kernels)
    assert info["kernels"] == len(default_entries())
    buckets = len(ops.staged.bucket_sizes(CHUNK))       # 16, 32, 48, 64
    # (greeks, iv) x (f64, f32): a graph per tick bucket on runner 0, and the shared graphs of
    # runners 0, 1, 2 (pipeline chunks); surface f64: the shared graph of each of its runners
    assert info["graphs"] == 4 * (buckets + 3) + 3
    for (fam, _, index), r in ctx.runners.items():
        assert r.stats["captures"] == (buckets + 1 if index == 0 and fam != "surface" else 1)
        assert r.stats["replays"] >= 1 and not r.stats.get("update_refusals")
    assert ctx.warm


def test_first_call_after_warmup_builds_nothing(ctx, mock, rng):
    """Any tick size, any broadcast pattern: the plan and graph are there already."""
    ops.warmup(ctx)
    plans, counts = len(ctx.plans), dict(mock.counts)
    stats = {k: dict(r.stats) for k, r in ctx.runners.items()}
    for n in (1, 9, 16, 17, 33, 64):
        for dtype in (np.float64, np.float32):
            d = _bsm_inputs(rng, n, dtype)
            out = ops.greeks(d["spot"], d["strike"], 0.5, 0.01, 0.2, 0.0, True, dtype=dtype, shape=(n,))
            _close(out["price"], expected_greeks(d["spot"].astype(np.float64), d["strike"], 0.5, 0.01, 0.2, 0.0,
                                                 True)["price"], dtype)
            d.pop("vol")
            ops.implied_vol(np.full(n, 5.0, dtype), **d, dtype=dtype, shape=(n,))
    assert len(ctx.plans) == plans and mock.counts == counts
    for k, r in ctx.runners.items():
        for what in ("captures", "kernel_updates", "copy_updates"):
            assert r.stats[what] == stats[k][what], (k, what)
    # A pipeline with a new pattern makes plans (Python) and re-points the shared graphs: no capture
    n = 3 * CHUNK + 5
    d = _bsm_inputs(rng, n, np.float64)
    ops.greeks(d["spot"], 100.0, 0.5, 0.01, d["vol"], 0.0, True, dtype=np.float64, shape=(n,))
    assert mock.counts == counts
    assert all(r.stats["captures"] == stats[k]["captures"] for k, r in ctx.runners.items())


# ---- device-array path (a CAI array in mock "device" memory) --------------------------------------
def _read(mock, arr):
    from tickgpu.runtime.arrays import DeviceArray

    assert isinstance(arr, DeviceArray)
    return arr.get()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_inputs_device_outputs(ctx, mock, rng, dtype):
    n = 300
    d = _bsm_inputs(rng, n, dtype)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v), stream=7 if k == "spot" else None) for k, v in d.items()}
    dev["rate"] = 0.02                                    # a Python scalar: constant ring
    dev["div"] = d["div"]                                 # a host array mixed in: uploaded
    out = ops.greeks(**dev, dtype=dtype, shape=(n,))
    want = expected_greeks(**_ref(dict(d, rate=0.02)))
    for k in want:
        got = _read(mock, out[k])
        assert got.dtype == dtype and got.shape == (n,)
        _close(got, want[k], dtype)
    assert "cuStreamSynchronize" in mock.calls           # an upload was used: finish before reuse


def test_device_path_launches_on_producer_stream(ctx, mock, rng, monkeypatch):
    from tickgpu.runtime import direct

    n = 32
    d = _bsm_inputs(rng, n, np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v), stream=0x5151) for k, v in d.items()}
    made = []

    def library_empty(x, shape, dtypes, device_id, stream=None):   # outputs from "the producer's library"
        made.extend(FakeGpuArray(mock, np.zeros(shape, dt), stream=0x5151) for dt in dtypes)
        return [(o, o.ptr) for o in made]

    monkeypatch.setattr(direct, "empty_outputs", library_empty)
    launched_streams = []
    real = mock.launch

    def spy(func, grid, block, shared, stream, params, **kw):
        launched_streams.append(stream)
        return real(func, grid, block, shared, stream, params, **kw)

    mock.launch = spy
    mock.calls.clear()
    out = ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert launched_streams == [0x5151]
    assert "cuStreamSynchronize" not in mock.calls       # stream-ordered: no host wait
    assert out["price"] is made[0]
    got = np.frombuffer(ctypes.string_at(made[0].ptr, 8 * n), dtype=np.float64)
    _close(got, expected_greeks(**_ref(d))["price"], np.float64)


def test_device_path_takes_the_outputs_stream_where_the_inputs_name_none(ctx, mock, rng, monkeypatch):
    from tickgpu.runtime import direct

    n = 16
    d = _bsm_inputs(rng, n, np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in d.items()}   # no stream named

    def library_empty(x, shape, dtypes, device_id, stream=None):   # a library whose new arrays name their stream
        outs = [FakeGpuArray(mock, np.zeros(shape, dt), stream=0x6262) for dt in dtypes]
        return [(o, o.ptr) for o in outs]

    monkeypatch.setattr(direct, "empty_outputs", library_empty)
    real = mock.launch
    seen = []
    mock.launch = lambda *a, **kw: (seen.append(a[4]), real(*a, **kw))
    mock.calls.clear()
    ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert seen == [0x6262]
    assert "cuStreamSynchronize" not in mock.calls


def test_jax_inputs_give_jax_outputs_through_dlpack(ctx, mock, rng, monkeypatch):
    """JAX cannot make an uninitialised array for the kernel to write: the outputs are the
    runtime's own, finished, then handed to ``jax.dlpack.from_dlpack`` (zero-copy)."""
    import types

    from tickgpu.runtime.arrays import DeviceArray, _from_dlpack

    adopted = []

    class FakeJaxArray:   # what from_dlpack gives back: it holds the capsule as XLA holds the tensor
        def __init__(self, src):
            assert not ctx.lock._is_owned(), "adopted under the runtime's lock"
            self.view = _from_dlpack(src, None)
            adopted.append((src, self))

    jax = types.ModuleType("jax")
    jax.dlpack = types.SimpleNamespace(from_dlpack=FakeJaxArray)
    monkeypatch.setitem(sys.modules, "jax", jax)
    JaxLike = type("ArrayImpl", (FakeGpuArray,), {"__module__": "jaxlib._jax"})
    n = 37
    d = _bsm_inputs(rng, n, np.float32)
    dev = {k: JaxLike(mock, np.ascontiguousarray(v)) for k, v in d.items()}
    out = ops.greeks(**dev, dtype=np.float32, shape=(n,))
    want = expected_greeks(**_ref(d))
    assert len(adopted) == len(want)
    for k in want:
        j = out[k]
        assert isinstance(j, FakeJaxArray)
        src = next(s for s, a in adopted if a is j)
        assert isinstance(src, DeviceArray) and j.view.ptr == src.ptr and j.view.shape == (n,)
        _close(np.frombuffer(ctypes.string_at(src.ptr, 4 * n), dtype=np.float32), want[k], np.float32)
    assert "cuStreamSynchronize" in mock.calls            # handed over finished
    # Without JAX imported (so no JAX array could have been passed), nothing is adopted.
    monkeypatch.delitem(sys.modules, "jax")
    adopted.clear()
    assert isinstance(ops.greeks(**dev, dtype=np.float32, shape=(n,))["price"], DeviceArray)
    assert not adopted


def test_unordered_interfaces_are_read_through_dlpack_on_the_launch_stream(mock):
    """A version 2 interface names no stream and promises nothing (JAX's points at buffers still
    being written): a producer that also has __dlpack__ is read through DLPack, asked for the
    stream the runtime launches on. Version 3, and PyTorch's version 2 (ordered on its current
    stream), are read through the interface."""
    from tickgpu.runtime.arrays import device_view, dlpack_capsule, view_or_none

    asked = []

    class V2WithDlpack(FakeGpuArray):
        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 2}

        def __dlpack_device__(self):
            return 2, 0

        def __dlpack__(self, stream=None, **kw):
            asked.append(stream)
            return dlpack_capsule(self, self.ptr, self.shape, self.dtype, (2, 0))

    TorchLike = type("Tensor", (V2WithDlpack,), {"__module__": "torch"})
    host = np.arange(12, dtype=np.float64)
    for read in (lambda x: view_or_none(x, "spot", 1), lambda x: device_view(x, "spot", 1)):
        asked.clear()
        v = read(V2WithDlpack(mock, host))
        assert asked == [1] and v.capsule is not None and v.shape == (12,) and v.dtype == np.float64
        t = TorchLike(mock, host)
        v = read(t)
        assert asked == [1] and v.capsule is None and v.ptr == t.ptr          # its interface, not DLPack
        v = read(FakeGpuArray(mock, host))                                   # version 3
        assert asked == [1] and v.capsule is None


def test_view_or_none_probes_once_and_agrees_with_device_view(mock):
    from tickgpu.runtime.arrays import device_view, is_device_array, view_or_none

    class Counting(FakeGpuArray):
        probes = 0

        @property
        def __cuda_array_interface__(self):
            Counting.probes += 1
            return super().__cuda_array_interface__

    class CpuTensorLike:   # PyTorch's CPU tensors raise on the interface
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("not on a GPU")

    a = Counting(mock, np.arange(6.0).reshape(2, 3), stream=7)
    v = view_or_none(a, "spot")
    assert Counting.probes == 1
    w = device_view(a, "spot")
    assert (v.ptr, v.shape, v.dtype, v.contiguous, v.stream) == (w.ptr, w.shape, w.dtype, w.contiguous, w.stream)
    assert (v.ptr, v.shape, v.dtype, v.stream) == (a.ptr, (2, 3), np.dtype(np.float64), 7)
    for x in (1.0, 3, True, None, np.ones(3), np.float32(2), [1.0, 2.0], CpuTensorLike()):
        assert view_or_none(x, "x") is None and not is_device_array(x)


def test_device_path_without_named_stream_uses_legacy_stream(ctx, mock, rng):
    n = 16
    d = _bsm_inputs(rng, n, np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in d.items()}
    real = mock.launch
    seen = []
    mock.launch = lambda *a, **kw: (seen.append(a[4]), real(*a, **kw))
    ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert seen == [1]                                   # CU_STREAM_LEGACY


def test_device_path_misaligned_uses_unaligned_variant(ctx, mock, rng):
    n = 48
    d = _bsm_inputs(rng, n, np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v), offset=8 if k == "spot" else 0) for k, v in d.items()}
    out = ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert mock.launches[-1]["variant"] == "greeks_f64_b256"          # a pointer off by 8 bytes
    _close(_read(mock, out["gamma"]), expected_greeks(**_ref(d))["gamma"], np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in d.items()}
    ops.greeks(**dev, dtype=np.float64, shape=(n,))
    assert mock.launches[-1]["variant"] == "greeks_f64_b256_a16"      # aligned, n % 16 == 0
    d = _bsm_inputs(rng, n + 1, np.float64)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in d.items()}
    out = ops.greeks(**dev, dtype=np.float64, shape=(n + 1,))
    assert mock.launches[-1]["variant"] == "greeks_f64_b256"          # aligned, but n % 16 != 0
    _close(_read(mock, out["vanna"]), expected_greeks(**_ref(d))["vanna"], np.float64)


def test_device_path_implied_vol_and_surface(ctx, mock, rng):
    n = 77
    d = _bsm_inputs(rng, n, np.float64)
    d.pop("vol")
    price = rng.uniform(1, 10, n)
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in d.items()}
    vol, status = ops.implied_vol(FakeGpuArray(mock, price), **dev, dtype=np.float64, shape=(n,))
    wv, ws = expected_iv(price, **_ref(d))
    _close(_read(mock, vol), wv, np.float64)
    np.testing.assert_array_equal(_read(mock, status), ws)
    strikes, expiries, vols = np.array([80.0, 100.0, 120.0]), np.array([0.5, 1.0]), rng.uniform(0.1, 0.3, (2, 3))
    k = rng.uniform(70, 130, n)
    allocs = mock.counts["mem_alloc"]
    for _ in range(3):   # the grid is uploaded once and reused
        out = ops.surface_eval(strikes, expiries, vols, 1, FakeGpuArray(mock, k), 0.75, what=0, shape=(n,))
        _close(_read(mock, out), expected_surface(strikes, expiries, vols.ravel(), 1, k, 0.75, 0), np.float64)
    assert mock.counts["mem_alloc"] - allocs == 1 + 3 * 2   # grid once; per call: input + output array
    vols2 = vols.copy()
    vols2[0, 0] += 0.1                                      # a changed grid is re-uploaded, never read stale
    out = ops.surface_eval(strikes, expiries, vols2, 1, FakeGpuArray(mock, k), 0.75, what=0, shape=(n,))
    _close(_read(mock, out), expected_surface(strikes, expiries, vols2.ravel(), 1, k, 0.75, 0), np.float64)


def test_device_path_rejections(ctx, mock, rng):
    n = 8
    d = {k: np.ascontiguousarray(v) for k, v in _bsm_inputs(rng, n, np.float64).items()}
    base = {k: FakeGpuArray(mock, v) for k, v in d.items()}

    def call(**over):
        return ops.greeks(**dict(base, **over), dtype=np.float64, shape=(n,))

    with pytest.raises(TypeError, match="spot: GPU array has dtype float32, the call asks for float64"):
        call(spot=FakeGpuArray(mock, d["spot"].astype(np.float32)))
    with pytest.raises(ValueError, match="strike: GPU array of shape .* is not C-contiguous"):
        call(strike=FakeGpuArray(mock, np.zeros(2 * n), strides=(16,)).__class__(mock, np.zeros(n), strides=(16,)))
    with pytest.raises(ValueError, match=r"t: GPU array of shape \(3,\) must have the broadcast shape \(8,\)"):
        call(t=FakeGpuArray(mock, np.ones(3)))
    with pytest.raises(TypeError, match="call: GPU array must be bool or uint8"):
        call(call=FakeGpuArray(mock, np.ones(n)))
    # a one-element GPU array broadcasts (stride 0)
    out = call(vol=FakeGpuArray(mock, np.array([0.3])))
    _close(_read(mock, out["price"]), expected_greeks(**_ref(dict(d, vol=0.3)))["price"], np.float64)


# ---- errors ---------------------------------------------------------------------------------------
def test_failed_load_names_error_and_kernel(mock, bundle_dir):
    mock.fail["cuModuleLoadData"] = "CUDA_ERROR_NO_BINARY_FOR_GPU"
    with pytest.raises(CudaError) as info:
        rt.init(driver=mock, bundle_dir=bundle_dir)
    e = info.value
    assert isinstance(e, TickGpuError)
    assert e.name == "CUDA_ERROR_NO_BINARY_FOR_GPU" and e.op == "cuModuleLoadData" and e.kernel
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in str(e) and e.kernel in str(e)
    rt.reset()


def test_failed_launch_names_kernel(ctx, mock, rng):
    mock.fail["cuLaunchKernel"] = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
    dev = {k: FakeGpuArray(mock, np.ascontiguousarray(v)) for k, v in _bsm_inputs(rng, 4, np.float64).items()}
    with pytest.raises(CudaError, match=r"cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES "
                                        r"\(kernel greeks_f64_b256\)"):
        ops.greeks(**dev, dtype=np.float64, shape=(4,))


def test_failed_capture_leaves_stream_usable(ctx, mock, rng):
    mock.fail["cuLaunchKernel"] = "CUDA_ERROR_INVALID_VALUE"
    d = _bsm_inputs(rng, 4, np.float64)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        ops.greeks(**d, dtype=np.float64, shape=(4,))
    assert not mock.captures                             # capture was ended
    del mock.fail["cuLaunchKernel"]
    ctx.runners.clear()
    out = ops.greeks(**d, dtype=np.float64, shape=(4,))
    _close(out["rho"], expected_greeks(**_ref(d))["rho"], np.float64)


def test_real_driver_error_naming():
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver as cu

    from tickgpu.runtime.driver import Driver

    d = Driver()
    with pytest.raises(CudaError) as info:
        d._check((cu.CUresult.CUDA_ERROR_INVALID_IMAGE,), "cuModuleLoadData", "greeks_f64_b256")
    assert info.value.name == "CUDA_ERROR_INVALID_IMAGE" and info.value.code == 200
    assert str(info.value) == "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE (kernel greeks_f64_b256)"
    assert d._check((cu.CUresult.CUDA_SUCCESS, 5), "x") == 5


# ---- environment without a GPU ------------------------------------------------------------------
def _libcuda_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_libcuda_loadable(), reason="libcuda.so.1 is present on this machine")
@pytest.mark.parametrize("bad", ["abc", "-1", "1.5", " ", "\u0661"])
def test_a_device_number_that_is_not_one_is_named(monkeypatch, bundle_dir, bad):
    """TICKGPU_DEVICE that is not a device number: BackendUnavailable naming it, not int()'s error."""
    from tickgpu.runtime.device import env_ordinal

    monkeypatch.setenv("TICKGPU_DEVICE", bad)
    with pytest.raises(BackendUnavailable, match=r"^TICKGPU_DEVICE=.*: must be a device number"):
        env_ordinal()
    with pytest.raises(BackendUnavailable, match=r"^TICKGPU_DEVICE=.*: must be a device number"):
        rt.init(driver=MockDriver(), bundle_dir=bundle_dir)
    rt.reset()
    monkeypatch.setenv("TICKGPU_DEVICE", " 0 ")
    assert env_ordinal() == 0


def test_available_false_with_reason():
    rt.reset()
    try:
        assert rt.available() is False
        reason = rt.unavailable_reason()
        assert reason and ("libcuda" in reason or "cuda-bindings" in reason)
        with pytest.raises(BackendUnavailable, match="warmup: no usable GPU"):
            rt.warmup()
    finally:
        rt.reset()


@pytest.mark.skipif(_libcuda_loadable(), reason="libcuda.so.1 is present on this machine")
def test_hot_path_reports_no_driver():
    from tickgpu._native import ffi, lib

    assert lib.tg_hot_init() == lib.TG_ENODRIVER
    res = ffi.new("int *", 99)
    assert lib.tg_hot_graph_replay(1, 0, res) == lib.TG_ENODRIVER and res[0] == 0
    assert lib.tg_hot_launch_sync(1, 1, 1, 1, 32, 1, 1, 0, 0, ffi.NULL, res) == lib.TG_ENODRIVER
    assert lib.tg_hot_roundtrip(ffi.NULL, 0, 1, 0, ffi.NULL, 0, res) == lib.TG_ENODRIVER
    assert lib.tg_hot_ctx_set_current(1, res) == lib.TG_ENODRIVER
    assert lib.tg_hot_graph_set_kernel(1, 1, 1, 1, 1, 1, 32, 1, 1, 0, ffi.NULL, res) == lib.TG_ENODRIVER
    assert ffi.string(lib.tg_hot_error_name(1)) == b"CUDA_ERROR_UNRECOGNIZED"


def test_hot_stage_copies_and_checks():
    from tickgpu._native import ffi, lib

    a, b = np.arange(5.0), np.zeros(5)
    table = np.array([[b.ctypes.data, a.ctypes.data, 40]], dtype=np.uint64)
    assert lib.tg_hot_stage(ffi.cast("tg_hot_copy *", table.ctypes.data), 1) == lib.TG_OK
    np.testing.assert_array_equal(a, b)
    bad = np.array([[b.ctypes.data, a.ctypes.data, 8], [0, a.ctypes.data, 8]], dtype=np.uint64)
    b[:] = 0
    assert lib.tg_hot_stage(ffi.cast("tg_hot_copy *", bad.ctypes.data), 2) == lib.TG_EINVAL
    assert not b.any()                                   # a bad list copies nothing
    assert lib.tg_hot_stage(ffi.NULL, 1) == lib.TG_EINVAL
    assert lib.tg_hot_stage(ffi.NULL, 0) == lib.TG_OK
    assert ffi.sizeof("tg_hot_copy") == 24


def test_is_device_array_without_importing_libraries(mock):
    from tickgpu.runtime.arrays import is_device_array

    class DL:
        def __init__(self, kind):
            self.kind = kind

        def __dlpack_device__(self):
            return (self.kind, 0)

    class BadCAI:
        @property
        def __cuda_array_interface__(self):
            raise AttributeError("not on the GPU")

    assert not is_device_array(np.ones(3)) and not is_device_array(1.0) and not is_device_array([1.0])
    assert is_device_array(FakeGpuArray(mock, np.ones(3)))
    assert is_device_array(DL(2)) and is_device_array(DL(13)) and not is_device_array(DL(1))
    assert not is_device_array(BadCAI())


def test_dlpack_only_array_is_read(mock):
    from tickgpu.runtime.arrays import device_view

    host = np.arange(12.0).reshape(3, 4)[:, ::2]      # non-contiguous, to see strides read

    class DLOnly:
        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

    v = device_view(DLOnly(host), "x", dlpack_stream=5)
    assert v.ptr == host.ctypes.data and v.shape == (3, 2) and v.dtype == np.float64
    assert not v.contiguous and v.device_id == 0
    v = device_view(DLOnly(np.ones(4, np.float32)), "x")
    assert v.contiguous and v.dtype == np.float32 and v.size == 4


def test_no_torch_or_triton_imported(bundle_dir):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np
        import tickgpu, tickgpu.runtime as rt
        from tickgpu.runtime import ops
        from cuda_mock import MockDriver
        rt.available(); rt.unavailable_reason()
        rt.init(driver=MockDriver(), bundle_dir={str(bundle_dir)!r})
        tickgpu.warmup()                     # the runtime's, then the public calls it ends with
        g = tickgpu.greeks(np.ones(10) * 100, 100.0, 1.0, 0.0, 0.2, backend="gpu")
        assert abs(float(g.price[0]) - (100 + 100 + 1.0 * 0.0 + 0.2 - 0.0 + 0.5)) < 1e-12, g.price
        bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'cupy', 'jax'))
        print("IMPORTED", bad)
        assert not bad, bad
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout


def test_import_makes_no_driver_call():
    code = ("import sys, tickgpu, tickgpu.runtime, tickgpu.runtime.ops;"
            "assert 'cuda.bindings.driver' not in sys.modules, 'driver imported at import time'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- size buckets -----------------------------------------------------------------------------------
def test_bucket_bounds(rng):
    chunk = 1 << 17
    for n in list(rng.integers(1, chunk, 3000)) + [1, 15, 16, 17, 127, 128, 129, chunk - 1, chunk]:
        b = ops.bucket(int(n), chunk)
        assert b >= n and b % 16 == 0 and b <= chunk
        assert b - n < 16 or (b - n) <= n / 8, (n, b)
    assert ops.bucket(1000, 64) == 64


def test_sizes_within_a_bucket_replay_without_update(ctx, mock, rng):
    r = None
    for n in (49, 50, 60, 64, 55):                        # all in bucket 64 (the chunk)
        d = _bsm_inputs(rng, n, np.float64)
        out = ops.greeks(**d, dtype=np.float64, shape=(n,))
        for k, v in expected_greeks(**_ref(d)).items():
            assert out[k].shape == (n,) and out[k].flags.c_contiguous
            _close(out[k], v, np.float64)
        r = ctx.runners[("greeks", "f64", 0)]
        if n == 49:
            s0 = dict(r.stats)
        assert mock.launches[-1]["n"] == 64               # the kernel runs the bucket
    assert r.stats["kernel_updates"] == s0["kernel_updates"] and r.stats["copy_updates"] == s0["copy_updates"]


def test_warmup_prebuilds_tick_plans(ctx, mock, rng):
    ops.warmup(ctx)
    plans = len(ctx.plans)
    for n in (1, 5, 17, 40, 64):
        ops.greeks(**_bsm_inputs(rng, n, np.float32), dtype=np.float32, shape=(n,))
    assert len(ctx.plans) == plans                        # every all-array tick found its plan


def test_refused_graph_update_recaptures(ctx, mock, rng):
    strikes, expiries = np.array([80.0, 100.0, 120.0]), np.array([0.5, 1.0])
    vols = rng.uniform(0.1, 0.3, (2, 3))
    k = rng.uniform(70, 130, 20)
    ops.surface_eval(strikes, expiries, vols, 0, k, 0.5, what=0, shape=(20,))
    r = ctx.runners[("surface", "f64", 0)]
    mock.fail["cuGraphExecMemcpyNodeSetParams"] = "CUDA_ERROR_INVALID_VALUE"
    strikes2, vols2 = np.linspace(60, 140, 9), rng.uniform(0.1, 0.3, (2, 9))   # another layout
    out = ops.surface_eval(strikes2, expiries, vols2, 1, k, 0.5, what=1, shape=(20,))
    assert r.stats["update_refusals"] == 1 and r.stats["captures"] == 2
    assert "CUDA_ERROR_INVALID_VALUE" in r.last_update_error
    _close(out, expected_surface(strikes2, expiries, vols2.ravel(), 1, k, 0.5, 1), np.float64)
    # a refused kernel-node update (a pipeline with another pattern) recaptures that graph too
    n = 2 * CHUNK + 3
    d = _bsm_inputs(rng, n, np.float64)
    ops.greeks(**d, dtype=np.float64, shape=(n,))
    mock.fail["cuGraphExecKernelNodeSetParams"] = "CUDA_ERROR_INVALID_VALUE"
    g = ctx.runners[("greeks", "f64", 1)]
    out = ops.greeks(**dict(d, vol=0.4), dtype=np.float64, shape=(n,))
    assert g.stats["update_refusals"] == 1 and g.stats["captures"] == 2
    _close(out["vanna"], expected_greeks(**_ref(dict(d, vol=0.4)))["vanna"], np.float64)


def test_a_bound_launch_reads_the_arguments_of_each_launch(ctx, mock):
    """Launcher.bind fixes grid and stream; arguments rewritten between launches take effect. On the
    mock (no native hot path) it takes the launcher's own launch (the native call is tested on the
    stand-in libcuda, test_hot_path.py)."""
    n = 40
    x = np.arange(n, dtype=np.float32)
    dx, dy = mock.mem_alloc(4 * n), mock.mem_alloc(4 * n)
    mock.memcpy_htod(dx, x.ctypes.data, x.nbytes)
    lau = ctx.launcher("scale", "f32", n, False)
    lau.args.pack(dx, dy, n)
    bound = lau.bind(n, ctx.stream)
    assert bound.grid == lau.grid(n) and "scale" in repr(bound)
    before = len(mock.launches)
    bound(sync=True)
    y = np.empty(n, np.float32)
    mock.memcpy_dtoh(y.ctypes.data, dy, y.nbytes)
    np.testing.assert_array_equal(y, (x.astype(np.float64) * np.float64(np.float32(1.0001)) + 1.0).astype(np.float32))
    lau.args.set(2, n // 2)                       # only the first half this time
    mock.memcpy_htod(dy, np.zeros(n, np.float32).ctypes.data, 4 * n)
    bound()
    mock.memcpy_dtoh(y.ctypes.data, dy, y.nbytes)
    assert (y[: n // 2] != 0).all() and (y[n // 2:] == 0).all()
    assert [launch["n"] for launch in mock.launches[before:]] == [n, n // 2]
    with pytest.raises(TypeError, match="give n or grid"):
        lau.bind()
    with pytest.raises(ValueError, match="grid must be three sizes"):
        lau.bind(grid=(0, 1, 1))


def test_choose_refuses_what_it_cannot_decide_on():
    from tickgpu import dispatch

    for backend in ("cuda", None, "GPU"):
        with pytest.raises(ValueError, match=r"^backend: must be 'auto', 'cpu' or 'gpu'"):
            dispatch.choose("greeks", 1000, backend)
    with pytest.raises(ValueError, match=r"^n: must be >= 0, got -5"):
        dispatch.choose("greeks", -5, "auto")
    for n in (float("nan"), "1000", 2.5, True):
        with pytest.raises(TypeError, match=r"^n: must be an int"):
            dispatch.choose("greeks", n, "auto")
    assert dispatch.choose("no such op", 10**9, "auto") == "cpu"
    assert dispatch.choose("greeks", np.int64(10), "auto") in ("cpu", "gpu")


def test_gpu_reason_says_it_was_disabled(monkeypatch):
    from tickgpu import dispatch

    monkeypatch.setenv("TICKGPU_DISABLE_GPU", "1")
    assert dispatch.gpu_reason() == "disabled by TICKGPU_DISABLE_GPU"


# ---- random call sequences: the staged path's cached state never leaks between calls -----------------
def _random_input(rng, n, dtype, flag: bool):
    """One input of a staged call, as a caller might pass it: (the value passed, its float64 reference
    as the kernel reads it). Arrays of the call's dtype and other dtypes, strided and reversed views,
    lists, 0-d and one-element arrays, NumPy and Python numbers; flags as bools, bool / uint8 / int
    arrays."""
    if flag:
        kind = rng.integers(5)
        if kind == 0:
            v = bool(rng.integers(2))
            return v, np.full(n, v)
        c = rng.random(n) < 0.5
        if kind == 1:
            return c, c
        if kind == 2:
            return c.astype(np.uint8), c
        if kind == 3:
            return c.astype(np.int64), c
        return np.bool_(c[0]), np.full(n, c[0])
    base = rng.uniform(0.5, 2.0, n)
    kind = rng.integers(9)
    if kind == 0:
        x = base.astype(dtype)                                  # the per-tick case: read in place
    elif kind == 1:
        x = base.astype(np.float32 if np.dtype(dtype) == np.float64 else np.float64)   # converted
    elif kind == 2:
        wide = np.empty((n, 2), dtype)
        wide[:, 0] = base
        x = wide[:, 0]                                          # strided
    elif kind == 3:
        x = base.astype(dtype)[::-1].copy()[::-1]               # reversed view
    elif kind == 4:
        x = base.tolist()
    elif kind == 5:
        x = float(base[0])                                      # a single value, filled into its slot
    elif kind == 6:
        x = np.float64(base[0]) if rng.integers(2) else np.float32(base[0])
    elif kind == 7:
        x = np.array(base[0]) if rng.integers(2) else np.array([base[0]])
    else:
        x = -0.0 if rng.integers(2) else 0.0                    # signed zeros are different inputs
    ref = np.broadcast_to(np.asarray(x).astype(dtype).astype(np.float64).reshape(-1), (n,))
    return x, ref


def test_random_call_sequences_match_the_reference(ctx, rng):
    """Hundreds of staged calls in random order -- both ops, both dtypes, sizes sharing a bucket,
    crossing buckets and taking the pipeline, single values changing and repeating, bindings made
    and called in between, their arrays changed in place -- each equal to the reference: what one
    call leaves in staging (a slot's single value, a binding's arrays, a pipeline's chunks) never
    shows in another's results."""
    sizes = (1, 2, 15, 16, 17, 30, 31, 32, 33, 48, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5)
    bindings = []
    for step in range(400):
        dtype = (np.float64, np.float32)[rng.integers(2)]
        n = int(sizes[rng.integers(len(sizes))])
        if bindings and rng.random() < 0.2:
            op, tick, arrays, bdtype = bindings[rng.integers(len(bindings))]
            for a in arrays[:-1]:
                a[:] = rng.uniform(0.5, 2.0, a.size)          # in place: the binding reads them anew
            arrays[-1][:] = rng.random(arrays[-1].size) < 0.5
            refs = [np.asarray(a, np.float64) for a in arrays[:-1]] + [arrays[-1]]
            if op == "greeks":
                got, want = tick().as_dict(), expected_greeks(*refs)
                for k in want:
                    _close(got[k], want[k], bdtype)
            else:
                vol, status = tick()
                want_vol, want_status = expected_iv(*refs)
                _close(vol, want_vol, bdtype)
                np.testing.assert_array_equal(status, want_status)
            continue
        op = ("greeks", "implied_vol")[rng.integers(2)]
        pairs = [_random_input(rng, n, dtype, flag=i == 6) for i in range(7)]
        values, refs = [p[0] for p in pairs], [p[1] for p in pairs]
        if op == "greeks":
            got = ops.greeks(*values, dtype=dtype, shape=(n,))
            want = expected_greeks(*refs)
            for k in want:
                assert got[k].shape == (n,) and got[k].dtype == dtype, (step, k)
                _close(got[k], want[k], dtype)
        else:
            vol, status = ops.implied_vol(*values, dtype=dtype, shape=(n,))
            want_vol, want_status = expected_iv(*refs)
            assert vol.shape == status.shape == (n,) and vol.dtype == dtype
            _close(vol, want_vol, dtype)
            np.testing.assert_array_equal(status, want_status)
        if n <= CHUNK and rng.random() < 0.1:
            arrays = [rng.uniform(0.5, 2.0, n).astype(dtype) for _ in range(6)] + [rng.random(n) < 0.5]
            bind = rt.bind_greeks if op == "greeks" else rt.bind_implied_vol
            bindings.append((op, bind(*arrays, dtype=dtype), arrays, dtype))
    assert len(bindings) >= 5
