"""The native hot path's host side and dispatch's GPU ranges, without a GPU.

The C round trip and pipeline (csrc/hot) run against a stand-in libcuda (fake_libcuda.c, built
here with the system C compiler) that performs each "graph launch" as host copies and logs every
launch and wait, so the order of waits, where each chunk's results land and the error path are
checked on the real C code. The copy threads are checked byte for byte on odd splits.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tickgpu.runtime import ops


# ---- native staging copies and dispatch ----------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2, 3, 0])
def test_large_staging_copies_split_across_threads(rng, threads):
    """Copy lists past the threshold are cut at page boundaries across threads: every byte once."""
    from tickgpu._native import ffi, lib

    before = lib.tg_hot_set_copy_threads(threads)
    try:
        for sizes in ([3 << 20], [5, 700_001, 1, 0, 2 << 20, 4097], [(1 << 19) + 3] * 9):
            src = [rng.integers(0, 255, s, dtype=np.uint8) for s in sizes]
            dst = [np.zeros(s, np.uint8) for s in sizes]
            table = ffi.new("tg_hot_copy[]", len(sizes))
            for i, (a, b) in enumerate(zip(src, dst)):
                table[i].dst, table[i].src, table[i].bytes = ffi.from_buffer(b), ffi.from_buffer(a), a.nbytes
            assert lib.tg_hot_stage(table, len(sizes)) == lib.TG_OK
            for a, b in zip(src, dst):
                np.testing.assert_array_equal(a, b)
    finally:
        lib.tg_hot_set_copy_threads(before)


def test_bucket_sizes_cover_every_tick():
    from tickgpu.runtime.staged import bucket_sizes

    for chunk in (64, 1 << 12, 1 << 17):
        sizes = set(bucket_sizes(chunk))
        assert max(sizes) == chunk
        for n in list(range(1, min(chunk, 5000) + 1)) + [chunk - 1, chunk]:
            b = ops.bucket(n, chunk)
            assert b in sizes
            # Room for the tick, within the chunk, whole 16-element groups (the staged path launches
            # the aligned16 variants on it), and at most 12.5% (or 16 elements) over.
            assert n <= b <= chunk and b % 16 == 0 and b - n < max(16, n / 8), (n, chunk, b)


def test_dispatch_gpu_range(monkeypatch):
    from tickgpu import dispatch

    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "gpu_range", lambda: {"greeks": (256, 524288), "implied_vol": (128, None)})
    assert dispatch.choose("greeks", 255, "auto") == "cpu"
    assert dispatch.choose("greeks", 256, "auto") == "gpu"
    assert dispatch.choose("greeks", 524287, "auto") == "gpu"
    assert dispatch.choose("greeks", 524288, "auto") == "cpu"
    assert dispatch.choose("implied_vol", 10**9, "auto") == "gpu"
    assert dispatch.choose("surface", 10**9, "auto") == "cpu"
    assert dispatch.choose("surface", 1, "auto", on_device=True) == "gpu"
    assert dispatch.crossover() == {"greeks": 256, "implied_vol": 128}
    sweep = [{"n": n, "cpu_p50_us": c, "gpu_p50_us": g} for n, c, g in
             [(16, 53, 77), (32, 79, 69), (64, 54, 60), (256, 103, 81), (1024, 187, 73), (2**18, 2856, 2725),
              (2**19, 5619, 9933), (2**20, 10431, 24771)]]
    assert dispatch.range_from_sweep(sweep) == (256, 2**19)
    assert dispatch.range_from_sweep([dict(r, gpu_p50_us=1) for r in sweep]) == (16, None)
    assert dispatch.range_from_sweep([dict(r, gpu_p50_us=1e9) for r in sweep]) is None


def test_dispatch_reads_both_file_forms(tmp_path, monkeypatch):
    from tickgpu import dispatch

    class Files:
        def __init__(self, text):
            self.text = text

        def joinpath(self, _):
            return self

        def read_text(self):
            return self.text

    for text, want in (('{"crossover_n": {"greeks": 300, "surface": null}}', {"greeks": (300, None)}),
                       ('{"gpu_range": {"greeks": [256, 524288], "implied_vol": [128, null]}}',
                        {"greeks": (256, 524288), "implied_vol": (128, None)})):
        monkeypatch.setattr(dispatch.resources, "files", lambda _pkg, t=text: Files(t))
        dispatch.gpu_range.cache_clear()
        assert dispatch.gpu_range() == want
    dispatch.gpu_range.cache_clear()


# ---- the C hot path on a stand-in libcuda (tests/cpu/fake_libcuda.c) ------------------------------
_HOT_PATH_SCRIPT = r'''
import ctypes, json, sys
import numpy as np
from tickgpu._native import ffi, lib

fake = ctypes.CDLL("libcuda.so.1")
assert lib.tg_hot_init() == lib.TG_OK, "the stand-in driver did not load"


class Copy(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]


class Graph(ctypes.Structure):
    _fields_ = [("n_copies", ctypes.c_int), ("copies", Copy * 8), ("fail_at", ctypes.c_int), ("launches", ctypes.c_int)]


def events():
    kinds, streams = (ctypes.c_int * 4096)(), (ctypes.c_size_t * 4096)()
    n = fake.fake_log(kinds, streams, 4096)
    return [("launch" if kinds[i] == 1 else "sync", streams[i]) for i in range(n)]


rng = np.random.default_rng(int(sys.argv[1]))
threads = int(sys.argv[2])
lib.tg_hot_set_copy_threads(threads)
chunk, n_in, n_out = 300_000, 3, 2            # 2.4 MB per array: the copy threads take part
# Runners: staging in (n_in slots) and out (n_out rows); the "graph" computes out0 = in0, out1 = in2
runners = []
for r in range(3):
    stage_in, stage_out = np.zeros((n_in, chunk)), np.zeros((n_out, chunk))
    g = Graph()
    g.n_copies = 2
    for j, i in enumerate((0, 2)):
        g.copies[j] = Copy(stage_out[j].ctypes.data, stage_in[i].ctypes.data, chunk * 8)
    runners.append((stage_in, stage_out, g, 0x1000 * (r + 1)))

def run(n, fail=None):
    x = [rng.standard_normal(n) for _ in range(n_in)]
    y = [np.full(n, np.nan) for _ in range(n_out)]
    k = -(-n // chunk)
    which = [c % 2 if c < k - 1 else 2 for c in range(k)]
    t_in = np.zeros((k, n_in, 3), np.uint64)
    t_out = np.zeros((k, n_out, 3), np.uint64)
    for c in range(k):
        start, m = c * chunk, min(chunk, n - c * chunk)
        stage_in, stage_out, g, _ = runners[which[c]]
        for i in range(n_in):
            t_in[c, i] = (stage_in[i].ctypes.data, x[i].ctypes.data + 8 * start, 8 * m)
        for j in range(n_out):
            t_out[c, j] = (y[j].ctypes.data + 8 * start, stage_out[j].ctypes.data, 8 * m)
    chunks = ffi.new("tg_hot_chunk[]", k)
    p_in = ffi.cast("tg_hot_copy *", ffi.from_buffer(t_in))
    p_out = ffi.cast("tg_hot_copy *", ffi.from_buffer(t_out))
    for c in range(k):
        _, _, g, stream = runners[which[c]]
        chunks[c].copies_in, chunks[c].n_in = p_in + c * n_in, n_in
        chunks[c].copies_out, chunks[c].n_out = p_out + c * n_out, n_out
        chunks[c].graph_exec, chunks[c].stream = ctypes.addressof(g), stream
    for _, _, g, _ in runners:
        g.launches, g.fail_at = 0, 0
    if fail is not None:
        runners[fail][2].fail_at = 2
    fake.fake_log_clear()
    res = ffi.new("int *")
    st = lib.tg_hot_pipeline(chunks, k, res)
    return st, res[0], x, y, events(), [runners[w][3] for w in which]

out = {}
st, code, x, y, ev, streams = run(5 * chunk + 1234)
out["ok"] = st == lib.TG_OK and code == 0
out["equal"] = bool(np.array_equal(y[0], x[0]) and np.array_equal(y[1], x[2]))
out["launch_streams"] = [s for kind, s in ev if kind == "launch"] == streams
pending, reused = set(), False
for kind, s in ev:
    if kind == "launch":
        reused |= s in pending
        pending.add(s)
    else:
        pending.discard(s)
out["no_reuse_before_wait"] = not reused and not pending
st, code, x, y, ev, streams = run(5 * chunk + 1234, fail=1)
out["error"] = [st == lib.TG_ECUDA, code == 719]
last_launch = {s: i for i, (kind, s) in enumerate(ev) if kind == "launch"}
out["waited_after_error"] = all(any(k == "sync" and t == s for k, t in ev[i + 1:]) for s, i in last_launch.items())
# The tick round trip on runner 0
stage_in, stage_out, g, stream = runners[0]
g.fail_at = 0
n = 250_000
x = [rng.standard_normal(n) for _ in range(n_in)]
y = [np.zeros(n) for _ in range(n_out)]
t_in = ffi.new("tg_hot_copy[]", n_in)
t_out = ffi.new("tg_hot_copy[]", n_out)
for i in range(n_in):
    t_in[i].dst, t_in[i].src, t_in[i].bytes = ffi.cast("void *", stage_in[i].ctypes.data), ffi.from_buffer(x[i]), 8 * n
for j in range(n_out):
    t_out[j].dst, t_out[j].src, t_out[j].bytes = ffi.from_buffer(y[j]), ffi.cast("void *", stage_out[j].ctypes.data), 8 * n
res = ffi.new("int *")
out["roundtrip"] = lib.tg_hot_roundtrip(t_in, n_in, ctypes.addressof(g), stream, t_out, n_out, res) == lib.TG_OK
out["roundtrip_equal"] = bool(np.array_equal(y[0], x[0]) and np.array_equal(y[1], x[2]))
bad = ffi.new("tg_hot_chunk[]", 1)
out["einval"] = [lib.tg_hot_pipeline(bad, 1, res) == lib.TG_EINVAL, lib.tg_hot_pipeline(ffi.NULL, 1, res) == lib.TG_EINVAL,
                 lib.tg_hot_pipeline(ffi.NULL, 0, res) == lib.TG_OK]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory):
    import shutil

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    out = tmp_path_factory.mktemp("fake_cuda") / "libcuda.so.1"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(out), str(Path(__file__).parent / "fake_libcuda.c")],
                   check=True)
    return out


@pytest.mark.parametrize("threads", [1, 4])
def test_hot_pipeline_and_roundtrip_on_a_stand_in_driver(fake_libcuda, threads):
    """tg_hot_pipeline: every chunk's results land at its offset, a runner is reused only after its
    stream was waited for, a failed launch is reported with the driver's code after every launched
    stream was waited for; tg_hot_roundtrip likewise for one tick."""
    import os

    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake_libcuda.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    r = subprocess.run([sys.executable, "-c", _HOT_PATH_SCRIPT, "7", str(threads)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"ok": True, "equal": True, "launch_streams": True, "no_reuse_before_wait": True,
                   "error": [True, True], "waited_after_error": True, "roundtrip": True, "roundtrip_equal": True,
                   "einval": [True, True, True]}, res


_BOUND_LAUNCH_SCRIPT = r'''
import ctypes, json
import numpy as np
from tickgpu._native import ffi, lib
from tickgpu.runtime.driver import CudaError, Driver
from tickgpu.runtime.launch import BoundLaunch

fake = ctypes.CDLL("libcuda.so.1")
assert lib.tg_hot_init() == lib.TG_OK, "the stand-in driver did not load"


def last():
    a, p0 = (ctypes.c_size_t * 9)(), ctypes.c_int()
    fake.fake_last_launch(a, ctypes.byref(p0))
    return list(a), p0.value


def syncs(stream):
    kinds, streams = (ctypes.c_int * 4096)(), (ctypes.c_size_t * 4096)()
    n = fake.fake_log(kinds, streams, 4096)
    return sum(1 for i in range(n) if kinds[i] == 2 and streams[i] == stream)


out = {}
value = np.array([41], np.int32)
params = ffi.new("void *[1]")
params[0] = ffi.from_buffer(value)
desc = ffi.new("tg_hot_launch_desc *")
desc.func, desc.shared_bytes, desc.stream, desc.params = 0x1234, 64, 0x7000, params
desc.grid_x, desc.grid_y, desc.grid_z, desc.block_x, desc.block_y, desc.block_z = 3, 2, 1, 128, 1, 1
res = ffi.new("int *")
s0 = syncs(0x7000)
out["run"] = lib.tg_hot_launch_desc_run(desc, 0, res) == lib.TG_OK and res[0] == 0
out["args"], out["param0"] = last()
out["no_sync"] = syncs(0x7000) == s0
value[0] = 42                     # arguments rewritten in place: the next run reads them
out["run_sync"] = lib.tg_hot_launch_desc_run(desc, 1, res) == lib.TG_OK
out["param0_after"] = last()[1]
out["synced"] = syncs(0x7000) == s0 + 1
out["einval"] = [lib.tg_hot_launch_desc_run(ffi.NULL, 1, res) == lib.TG_EINVAL]
for field in ("func", "grid_x", "block_z"):
    d2 = ffi.new("tg_hot_launch_desc *", desc[0])
    setattr(d2, field, 0)
    out["einval"].append(lib.tg_hot_launch_desc_run(d2, 1, res) == lib.TG_EINVAL)
d3 = ffi.new("tg_hot_launch_desc *", desc[0])
d3.params = ffi.NULL
out["einval"].append(lib.tg_hot_launch_desc_run(d3, 1, res) == lib.TG_EINVAL)
bad = ffi.new("tg_hot_launch_desc *", desc[0])
bad.func = 0xbad
s1 = syncs(0x7000)
out["refused"] = [lib.tg_hot_launch_desc_run(bad, 1, res) == lib.TG_ECUDA, res[0] == 1, syncs(0x7000) == s1]

# BoundLaunch over the native call: a driver whose hot path is the native core (no cuInit here),
# a launcher stand-in with a real argument buffer layout (one int32 parameter).
drv = Driver()
drv._hot, drv._ffi, drv._result = lib, ffi, ffi.new("int *")


class Spec:
    variant, block, shared, pdl = "k_b128", (128, 1, 1), 64, False


class Kernel:
    spec, func = Spec(), 0x1234


class Args:
    def __init__(self):
        self.values = np.array([7], np.int32)
        self.ptrs = np.array([self.values.ctypes.data], np.uint64)
        self.address = self.ptrs.ctypes.data


class L:
    driver, kernel, args, launches = drv, Kernel(), Args(), 0

    def launch_grid(self, grid, stream, *, sync=False):
        raise AssertionError("the native path was not taken")


lau = L()
b = BoundLaunch(lau, (5, 1, 1), 0x8000)
s2 = syncs(0x8000)
b()
out["bound_args"], out["bound_param0"] = last()
lau.args.values[0] = 8
b(sync=True)
out["bound_param0_after"], out["bound_synced"], out["launches"] = last()[1], syncs(0x8000) == s2 + 1, lau.launches
# With a context: made current before each launch, in the same native call; none without one.
sets = ctypes.c_int()
fake.fake_ctx_current.restype = ctypes.c_size_t
c0 = (fake.fake_ctx_current(ctypes.byref(sets)), sets.value)
b()
out["no_ctx_set"] = fake.fake_ctx_current(ctypes.byref(sets)) == c0[0] and sets.value == c0[1]
bc = BoundLaunch(lau, (5, 1, 1), 0x8000, 0xc7c7)
bc()
fake.cuCtxSetCurrent(ctypes.c_void_p(0x1111))        # another library makes its context current
bc(sync=True)
fake.fake_last_launch_ctx.restype = ctypes.c_size_t
out["ctx_set"] = [fake.fake_ctx_current(ctypes.byref(sets)) == 0xc7c7, sets.value == c0[1] + 3, last()[0][1] == 5,
                  fake.fake_last_launch_ctx() == 0xc7c7]     # current when the launch was made
try:
    BoundLaunch(lau, (5, 1, 1), 0x8000, 0xbad)()
    out["ctx_error"] = None
except CudaError as e:
    out["ctx_error"] = [e.op, e.code, e.kernel]
Kernel.func = 0xbad
try:
    BoundLaunch(lau, (5, 1, 1), 0x8000)(sync=True)
    out["error"] = None
except CudaError as e:
    out["error"] = [e.op, e.name, e.code, e.kernel]
print(json.dumps(out))
'''


def test_a_bound_launch_is_one_native_call_with_arguments_read_at_each_launch(fake_libcuda):
    """tg_hot_launch_desc_run launches what its descriptor says (and waits only when asked), reads
    the argument values at each run, refuses a bad descriptor without calling the driver, and reports
    the driver's refusal; BoundLaunch drives it, and a refused launch raises CudaError with the
    driver's name, the call and the kernel."""
    import os

    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake_libcuda.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    r = subprocess.run([sys.executable, "-c", _BOUND_LAUNCH_SCRIPT], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"run": True, "args": [0x1234, 3, 2, 1, 128, 1, 1, 64, 0x7000], "param0": 41, "no_sync": True,
                   "run_sync": True, "param0_after": 42, "synced": True, "einval": [True] * 5,
                   "refused": [True, True, True],
                   "bound_args": [0x1234, 5, 1, 1, 128, 1, 1, 64, 0x8000], "bound_param0": 7,
                   "bound_param0_after": 8, "bound_synced": True, "launches": 2,
                   "no_ctx_set": True, "ctx_set": [True, True, True, True],
                   "ctx_error": ["cuCtxSetCurrent", 201, "k_b128"],
                   "error": ["cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", 1, "k_b128"]}, res
