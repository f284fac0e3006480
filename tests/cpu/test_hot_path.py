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
