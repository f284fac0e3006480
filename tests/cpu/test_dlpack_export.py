"""DLPack export of tickgpu's own arrays (`DeviceArray`, pool views): the capsule's layout, who
keeps the memory alive and for how long, refusals, and the process's exit with exports alive.
NumPy is the consumer here: the host-backend pool's "device" memory is host memory, exported as
DLPack's CPU device."""
import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

from tickgpu._native import lib
from tickgpu.memory import DevicePool
from tickgpu.runtime.arrays import DeviceArray, _capsule_read, _from_dlpack

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver  # noqa: E402


@pytest.fixture
def pool():
    p = DevicePool(backend="host")
    yield p
    gc.collect()
    p.close()


def _fill(buf, values: np.ndarray) -> None:
    ctypes.memmove(buf.ptr, np.ascontiguousarray(values).ctypes.data, values.nbytes)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int8, np.uint8, np.bool_, np.int32,
                                   np.int64])
@pytest.mark.parametrize("shape", [(0,), (1,), (17,), (3, 5), (2, 3, 4)])
def test_numpy_reads_a_pool_view_in_place(pool, rng, dtype, shape):
    want = (rng.random(shape) * 100).astype(dtype)
    buf = pool.alloc(max(want.nbytes, 1))
    _fill(buf, want)
    view = buf.as_array(dtype, shape)
    live = lib.tg_dlpack_live()
    got = np.from_dlpack(view)
    assert lib.tg_dlpack_live() == live + 1
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    np.testing.assert_array_equal(got, want)
    if want.size:
        assert got.ctypes.data == buf.ptr              # no copy
        assert got.strides == want.strides
    del got
    gc.collect()
    assert lib.tg_dlpack_live() == live                # the consumer's release called the deleter


def test_the_export_holds_its_owner_until_released(pool):
    view = pool.alloc(64).as_array(np.float32, (16,))
    alive = weakref.ref(view)
    capsule = view.__dlpack__()
    got = np.from_dlpack(pool.alloc(64).as_array(np.float32, (16,)))   # a second, consumed export
    del view
    gc.collect()
    assert alive() is not None                         # the capsule holds the view
    del capsule                                        # never consumed: its destructor releases
    gc.collect()
    assert alive() is None
    del got


def test_the_deleter_may_run_on_another_thread(pool):
    view = pool.alloc(64).as_array(np.float64, (8,))
    alive = weakref.ref(view)
    capsule = view.__dlpack__()
    del view
    # What a consumer does: take the tensor (rename the capsule), then call its deleter later.
    addr = _capsule_read(capsule, b"dltensor")
    rename = ctypes.pythonapi["PyCapsule_SetName"]
    rename.restype, rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    used = ctypes.c_char_p(b"used_dltensor")
    assert rename(capsule, used) == 0
    del capsule                                        # consumed: dropping it releases nothing
    gc.collect()
    assert alive() is not None
    # DLManagedTensor: DLTensor (48 bytes on 64-bit), manager_ctx, deleter.
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(addr + 56).value)
    t = threading.Thread(target=deleter, args=(addr,))
    t.start()
    t.join()
    gc.collect()
    assert alive() is None


def _mock_context():
    mock = MockDriver()
    freed = []

    class Memory:
        def device(self, nbytes):
            p = mock.mem_alloc(nbytes)
            return p, p

        def free_device(self, token):
            freed.append(token)

    ctx = type("Ctx", (), {})()
    ctx.memory, ctx.ordinal, ctx.driver = Memory(), 3, mock
    return ctx, freed


def test_device_array_exports_a_cuda_tensor_and_lives_while_it_is_held():
    ctx, freed = _mock_context()
    a = DeviceArray(ctx, (4, 6), np.float32)
    assert a.__dlpack_device__() == (2, 3)
    v = _from_dlpack(a, None)                 # tickgpu's own reader: the fields as a consumer sees them
    assert (v.ptr, v.shape, v.dtype, v.device_id, v.contiguous) == (a.ptr, (4, 6), np.float32, 3, True)
    ptr = a.ptr
    del a
    gc.collect()
    assert freed == []                        # the capsule the view holds keeps the array alive
    del v
    gc.collect()
    assert freed == [ptr]


def test_a_consumer_that_refuses_the_tensor_keeps_its_error_and_releases_the_array():
    """NumPy cannot read a CUDA tensor: its own error comes through, and the array is freed."""
    ctx, freed = _mock_context()
    a = DeviceArray(ctx, (5,), np.float64)
    live = lib.tg_dlpack_live()
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)) as e:
        np.from_dlpack(a)
    assert not isinstance(e.value, SystemError), e.value
    ptr = a.ptr
    del a, e
    gc.collect()
    assert lib.tg_dlpack_live() == live and freed == [ptr]


def test_export_refusals():
    ctx, _ = _mock_context()
    a = DeviceArray(ctx, (4,), np.float64)
    with pytest.raises(BufferError, match="copy=True"):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError, match=r"dl_device \(2, 0\)"):
        a.__dlpack__(dl_device=(2, 0))
    assert a.__dlpack__(dl_device=(2, 3), max_version=(1, 0), stream=7) is not None
    c = DeviceArray(ctx, (4,), np.complex64)
    with pytest.raises(BufferError, match="complex64"):
        c.__dlpack__()


def test_the_process_exits_cleanly_with_exports_alive():
    """Unconsumed capsules and consumers' arrays still alive, some in reference cycles, when the
    interpreter shuts down: it exits normally (the release is left alone once finalizing)."""
    script = textwrap.dedent("""
        import numpy as np
        from tickgpu.memory import DevicePool
        pool = DevicePool(backend="host")
        class Node:
            pass
        keep = []
        for i in range(4):
            v = pool.alloc(64).as_array(np.float32, (16,))
            n = Node(); n.me = n
            n.cap = v.__dlpack__()              # unconsumed, in a cycle
            m = Node(); m.me = m
            m.arr = np.from_dlpack(v)           # consumed, the consumer's array in a cycle
            keep.append(np.from_dlpack(v))      # consumed, alive at exit
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])
    assert "Exception ignored" not in r.stderr, r.stderr[-2000:]


def test_device_array_says_what_it_is():
    ctx, _ = _mock_context()
    a = DeviceArray(ctx, (4, 6), np.float32)
    assert (a.ndim, a.size, a.nbytes, len(a)) == (2, 24, 96, 4)
    assert repr(a) == f"<DeviceArray shape=(4, 6) dtype=float32 cuda:3 ptr={a.ptr:#x}>"
    z = DeviceArray(ctx, (), np.float64)
    assert (z.ndim, z.size, z.nbytes) == (0, 1, 8)
    with pytest.raises(TypeError, match="0-d"):
        len(z)
