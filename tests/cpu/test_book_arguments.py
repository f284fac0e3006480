"""Book and message_array arguments that used to be truncated, wrapped, flattened or accepted
beyond what the machine holds: each is refused with an exception naming the argument."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tickgpu.finance.book as book_module
from tickgpu import Book
from tickgpu.finance.book import MESSAGE_DTYPE, message_array


# ---- message_array --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, err, match", [
    (dict(type=1, size=5.9, price=100, direction=1), TypeError, "size: must hold integers, got dtype float64"),
    (dict(type=1, size=5, price=100.7, direction=1), TypeError, "price: must hold integers, got dtype float64"),
    (dict(type=np.array([1, 2**32 + 1]), size=5, price=100, direction=1), ValueError,
     r"type\[1\]: 4294967297 does not fit int32"),
    (dict(type=1, size=5, price=100, direction=np.array([1, 2**32 - 1])), ValueError,
     r"direction\[1\]: 4294967295 does not fit int32"),
    (dict(type=1, size=5, price=100, direction=1, instrument=np.array([2**32])), ValueError,
     r"instrument\[0\]: 4294967296 does not fit int32"),
    (dict(type=1, size=5, price=100, direction=1, instrument=2**31), ValueError,
     r"instrument\[0\]: 2147483648 does not fit int32"),
    (dict(type=1, size=[5, 2**64], price=100, direction=1), ValueError,
     r"size\[1\]: 18446744073709551616 does not fit int64"),
    (dict(type=1, size=5, price=np.array([2**63], np.uint64), direction=1), ValueError,
     r"price\[0\]: 9223372036854775808 does not fit int64"),
    (dict(type=1, size=5, price=100, direction=1, order_id=1.5), TypeError, "order_id: must hold integers"),
    (dict(type=[1, None], size=5, price=100, direction=1), TypeError, r"type\[1\]: must be an integer, got None"),
    (dict(type=True, size=5, price=100, direction=1), TypeError, "type: must hold integers, got dtype bool"),
    (dict(type=[[1, 1], [1]], size=5, price=100, direction=1), ValueError, r"^type: not an array of one shape \("),
    (dict(type=1, size=5, price=[100, [101]], direction=1), ValueError, r"^price: not an array of one shape \("),
])
def test_message_array_never_truncates_or_wraps(kwargs, err, match):
    with pytest.raises(err, match=match):
        message_array(**kwargs)


def test_message_array_keeps_values_dtype_and_layout(rng):
    n = 50
    fields = dict(type=rng.integers(1, 8, n, dtype=np.int8), size=rng.integers(0, 2**62, n),
                  price=rng.integers(1, 2**62, n, dtype=np.uint64), direction=rng.choice([-1, 1], n),
                  order_id=rng.integers(-2**63, 2**63 - 1, n), instrument=rng.integers(0, 2**31 - 1, n))
    m = message_array(fields["type"], fields["size"], fields["price"], fields["direction"],
                      order_id=fields["order_id"], time=np.linspace(0.0, 1.5, n), instrument=fields["instrument"])
    assert m.dtype == MESSAGE_DTYPE and m.shape == (n,) and m.flags.c_contiguous
    for k, v in fields.items():
        assert m[k].tolist() == [int(x) for x in v], k
    assert m["time"].tolist() == np.linspace(0.0, 1.5, n).tolist()
    # Broadcast scalars, extremes of each field, and no message at all.
    m = message_array(2**31 - 1, 2**63 - 1, -2**63, -2**31, instrument=np.array([[0], [1]]))
    assert m.shape == (2, 1) and m[1, 0].tolist() == (0.0, 2**31 - 1, 0, 2**63 - 1, -2**63, -2**31, 1)
    assert message_array([], [], [], []).shape == (0,)


# ---- price_scale ----------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [np.longdouble("1e4000"), 2**1024, -np.longdouble("1e4000"), float("nan"),
                                   float("inf"), 0, -1.0, np.float16("inf")])
def test_price_scale_not_finite_positive_as_float64(scale):
    with pytest.raises(ValueError, match=r"^price_scale: must be finite and > 0, got"):
        Book(price_scale=scale)


@pytest.mark.parametrize("scale", [5e-324, 1e-300, 2.5e-290])
def test_price_scale_too_small_for_the_largest_price(scale):
    with pytest.raises(ValueError, match=r"^price_scale: .* is so small that prices up to 2\*\*62 ticks"):
        Book(price_scale=scale)


def test_smallest_price_scale_keeps_features_finite():
    scale = float(2**62) / sys.float_info.max
    assert np.isfinite(scale)
    b = Book(price_scale=scale)
    b.set_side(1, [2**62 - 2], [5])
    b.set_side(-1, [2**62 - 1], [5])
    f = b.features()
    for v in (f.mid, f.microprice, f.spread):
        assert np.isfinite(v), f
    assert float(f.mid) == pytest.approx((2**62 - 1.5) / scale, rel=1e-15)
    assert Book(price_scale=np.longdouble(100)).price_scale == 100.0
    assert Book(price_scale=10**300).price_scale == 1e300


# ---- set_side ------------------------------------------------------------------------------------

def test_set_side_refuses_arrays_of_more_dimensions():
    b = Book()
    b.set_side(1, [100, 90], [5, 6])
    before = b.snapshot(2)
    for prices, sizes, name in [([[100], [90]], [[5, 5]], "prices"), ([100, 90], [[5, 5]], "sizes"),
                                ([[100, 90]], [5, 5], "prices"), (np.zeros((2, 2), np.int64), np.ones((2, 2)), "prices")]:
        with pytest.raises(ValueError, match=rf"^{name}: must be one-dimensional .*got shape"):
            b.set_side(1, prices, sizes)
    np.testing.assert_array_equal(b.snapshot(2), before)


def test_ragged_levels_and_rows_name_the_argument():
    b = Book()
    for call, name in [(lambda: b.set_side(1, [[100], [99, 98]], [5, 5]), "prices"),
                       (lambda: b.set_side(1, [100, 99], [5, [5, 6]]), "sizes"),
                       (lambda: b.sync_from_orderbook_row([[101, 5], [100]]), "row")]:
        with pytest.raises(ValueError, match=rf"^{name}: not an array of one shape \("):
            call()
    assert b.level_counts() == (0, 0)


@pytest.mark.parametrize("empty", [[], (), np.zeros(0), np.zeros(0, np.int32), np.array([], dtype=object)])
def test_set_side_empty_clears_the_side(empty):
    b = Book()
    b.set_side(1, [100, 90], [5, 6])
    b.set_side(-1, [101], [7])
    b.set_side(1, empty, empty)
    assert b.level_counts() == (0, 1)
    assert np.isnan(b.features().mid)
    b.set_side(-1, [], [])
    assert b.level_counts() == (0, 0)
    b.set_side(1, 100, 5)                   # one value: one level
    assert b.snapshot(1)[0, 2:].tolist() == [100, 5]
    with pytest.raises(ValueError, match="lengths differ"):
        b.set_side(1, [], [5])


# ---- memory --------------------------------------------------------------------------------------

def test_book_larger_than_memory_is_refused_naming_the_arguments(monkeypatch):
    """2 x 64 levels of 16 bytes per instrument: 10**6 instruments need ~2 GiB up front, refused on
    a machine of 1 GiB (without allocating), as 5 * 10**7 would need ~100 GiB."""
    monkeypatch.setattr(book_module, "_physical_memory", lambda: 1 << 30)
    with pytest.raises(MemoryError, match=r"^Book: n_instruments=1000000 with initial_levels=64 per side need "
                                          r"1\.9 GiB up front, more than this machine's 1\.0 GiB"):
        Book(10**6)
    with pytest.raises(MemoryError, match=r"n_instruments=2147483647 with initial_levels=1048576"):
        Book(2**31 - 1, initial_levels=2**20)
    # Small books never consult the machine.
    monkeypatch.setattr(book_module, "_physical_memory", lambda: 0)
    assert Book(1000, initial_levels=64).n_instruments == 1000


def test_book_refused_on_any_machine_beyond_any_memory():
    with pytest.raises(MemoryError, match=r"n_instruments=2147483647 with initial_levels=2147483647"):
        Book(2**31 - 1, initial_levels=2**31 - 1, max_levels=2**31 - 1)


def test_native_allocation_failure_is_a_memory_error():
    """Under an address-space limit the core's malloc fails (TG_ENOMEM): a MemoryError naming the
    arguments, not a NativeError."""
    code = textwrap.dedent("""
        import resource
        from tickgpu import Book
        import tickgpu.finance.book as m
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
        m._physical_memory = lambda: 1 << 62     # the guard passes: the allocation itself fails
        try:
            Book(4 * 10**6, initial_levels=64)
        except MemoryError as e:
            print("MemoryError:", e)
        """)
    if not sys.platform.startswith("linux"):
        pytest.skip("needs /proc and RLIMIT_AS")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("MemoryError: Book: out of memory allocating n_instruments=4000000 with "
                               "initial_levels=64"), r.stdout + r.stderr


# ---- Book.step -----------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["type", "size", "price", "direction", "instrument"])
@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
def test_step_refuses_bools_naming_the_field(field, flag):
    """The native call takes True / False as 1 / 0: step(True, 5, 100, 1) was a submit, direction=True
    a buy, instrument=True instrument 1. A flag is no message field: TypeError, nothing applied."""
    b = Book(2)
    row = np.array([101, 5, 100, 5], np.int64)
    args = dict(type=1, size=5, price=100, direction=1, instrument=0)
    args[field] = flag
    for r in (None, row):
        with pytest.raises(TypeError, match=rf"^Book.step: {field} must be an integer, got {flag!r}$"):
            b.step(args["type"], args["size"], args["price"], args["direction"], r, instrument=args["instrument"])
    for inst in (0, 1):
        assert b.level_counts(inst) == (0, 0)


def test_step_takes_numpy_integers_and_returns_message_codes():
    from tickgpu.finance.book import MessageCode

    b = Book()
    f, code, resynced = b.step(np.int8(1), np.int64(5), np.uint32(100), np.int32(1), None, np.int64(0))
    assert code is MessageCode.OK and not resynced and b.snapshot(1)[0, 2:].tolist() == [100, 5]
    f, code, resynced = b.step(2, 9, 100, 1)
    assert code is MessageCode.OVERSIZE and b.snapshot(1)[0, 3] == 5
