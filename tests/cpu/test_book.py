"""Book against an independent pure-Python level book on synthetic streams, and bad input.

The synthetic generator tracks individual orders (so every cancel and execution it emits refers
to a resting order); the reference book is a dict of price -> size per side. Neither shares code
with the native core.
"""
from __future__ import annotations

import numpy as np
import pytest

from tickgpu import Book, BookFeatures
from tickgpu.finance.book import (
    EMPTY_ASK_PRICE,
    EMPTY_BID_PRICE,
    MESSAGE_DTYPE,
    BookError,
    MessageCode,
    TradingState,
    message_array,
)
from tickgpu._native import ffi

SCALE = 10_000


# ---- an independent reference ---------------------------------------------------------------

class RefBook:
    """dict price -> size per side per instrument; LOBSTER semantics, no validation shortcuts."""

    def __init__(self, n):
        self.bids = [dict() for _ in range(n)]
        self.asks = [dict() for _ in range(n)]
        self.state = [TradingState.TRADING] * n

    def apply(self, m):
        t, inst = int(m["type"]), int(m["instrument"])
        if t == 7:
            self.state[inst] = {-1: TradingState.HALTED, 0: TradingState.QUOTING, 1: TradingState.TRADING}[int(m["price"])]
            return
        if t in (5, 6):
            return
        side = self.bids[inst] if m["direction"] == 1 else self.asks[inst]
        p, z = int(m["price"]), int(m["size"])
        if t == 1:
            side[p] = side.get(p, 0) + z
        else:
            assert side[p] >= z
            side[p] -= z
            if side[p] == 0:
                del side[p]

    def snapshot(self, levels, inst):
        out = np.zeros((levels, 4), np.int64)
        out[:, 0] = EMPTY_ASK_PRICE
        out[:, 2] = EMPTY_BID_PRICE
        for k, p in enumerate(sorted(self.asks[inst])[:levels]):
            out[k, 0:2] = p, self.asks[inst][p]
        for k, p in enumerate(sorted(self.bids[inst], reverse=True)[:levels]):
            out[k, 2:4] = p, self.bids[inst][p]
        return out


def synthetic_stream(seed: int, n: int, n_instruments: int = 8) -> np.ndarray:
    """Submits, partial cancels, deletes, executions at the best level, hidden executions, cross
    trades and halts over many instruments; full depth (levels up to ~300 ticks from the mid)."""
    rng = np.random.default_rng(seed)
    mids = 100_000 + 5_000 * np.arange(n_instruments)
    orders: dict[int, list] = {}          # id -> [instrument, direction, price, remaining]
    ids = [[[], []] for _ in range(n_instruments)]   # per instrument, per side (0 bid, 1 ask): order ids
    halt_cycle = [0] * n_instruments
    out = np.zeros(n, MESSAGE_DTYPE)
    next_id = 1
    for i in range(n):
        inst = int(rng.integers(n_instruments))
        direction = 1 if rng.random() < 0.5 else -1
        s = 0 if direction == 1 else 1
        live = ids[inst][s]
        r = rng.random()
        rec = out[i]
        rec["time"] = 34_200 + i * 1e-3
        rec["instrument"] = inst
        rec["direction"] = direction
        if not live or r < 0.42:
            # Mostly near the top, sometimes deep (forces growth past the preallocated levels).
            k = int(rng.geometric(0.25)) if rng.random() < 0.9 else int(rng.integers(1, 300))
            price = int(mids[inst] - direction * k * 10)
            size = int(rng.integers(1, 500))
            orders[next_id] = [inst, direction, price, size]
            live.append(next_id)
            rec["type"], rec["order_id"], rec["size"], rec["price"] = 1, next_id, size, price
            next_id += 1
        elif r < 0.92:
            if r < 0.57:
                kind = 2
                oid = live[int(rng.integers(len(live)))]
            elif r < 0.74:
                kind = 3
                oid = live[int(rng.integers(len(live)))]
            else:
                kind = 4
                best = max if direction == 1 else min
                top = best(orders[o][2] for o in live)
                at_top = [o for o in live if orders[o][2] == top]
                oid = at_top[int(rng.integers(len(at_top)))]
            price, rem = orders[oid][2], orders[oid][3]
            if kind == 2 and rem < 2:
                kind = 3
            size = rem if kind == 3 else int(rng.integers(1, rem)) if kind == 2 else int(rng.integers(1, rem + 1))
            orders[oid][3] -= size
            if orders[oid][3] == 0:
                live.remove(oid)
                del orders[oid]
            rec["type"], rec["order_id"], rec["size"], rec["price"] = kind, oid, size, price
        elif r < 0.97:
            rec["type"], rec["size"], rec["price"] = 5, int(rng.integers(1, 300)), int(mids[inst])
        elif r < 0.985:
            rec["type"], rec["size"], rec["price"] = 6, int(rng.integers(0, 1000)), int(mids[inst])
        else:
            rec["type"], rec["direction"] = 7, -1
            rec["price"] = (-1, 0, 1)[halt_cycle[inst] % 3]
            halt_cycle[inst] += 1
    return out


def features_from_snapshots(snaps: np.ndarray, levels: int) -> dict[str, np.ndarray]:
    """NumPy float64 features from snapshots (n, levels, 4), the definitions in BookFeatures."""
    ap, az = snaps[:, 0, 0].astype(float), snaps[:, 0, 1].astype(float)
    bp, bz = snaps[:, 0, 2].astype(float), snaps[:, 0, 3].astype(float)
    both = (az > 0) & (bz > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mid = np.where(both, (ap + bp) / 2 / SCALE, np.nan)
        spread = np.where(both, (ap - bp) / SCALE, np.nan)
        micro = np.where(both, (bp * az + ap * bz) / (az + bz) / SCALE, np.nan)
        imb = np.where(az + bz > 0, (bz - az) / (az + bz), np.nan)
        bsum = snaps[:, :levels, 3].sum(1).astype(float)
        asum = snaps[:, :levels, 1].sum(1).astype(float)
        dimb = np.where(asum + bsum > 0, (bsum - asum) / (asum + bsum), np.nan)
    return dict(mid=mid, spread=spread, microprice=micro, imbalance=imb, depth_imbalance=dimb,
                bid_depth=snaps[:, :levels, 3], ask_depth=snaps[:, :levels, 1])


# ---- synthetic streams -------------------------------------------------------------------------

@pytest.fixture(params=[11, 12, "fresh"])
def stream_seed(request, rng):
    return int(rng.integers(2**31)) if request.param == "fresh" else request.param


def test_generator_covers_every_kind():
    msgs = synthetic_stream(5, 6000)
    kinds = set(np.unique(msgs["type"]).tolist())
    assert kinds == {1, 2, 3, 4, 5, 6, 7}
    assert len(np.unique(msgs["instrument"])) == 8


def test_snapshots_match_reference_after_every_message(stream_seed):
    n_inst = 8
    msgs = synthetic_stream(stream_seed, 12_000, n_inst)
    book = Book(n_inst, initial_levels=4)   # small, so levels grow by realloc during the stream
    ref = RefBook(n_inst)
    depths = (1, 3, 10, 400)
    deepest = 0
    for i, m in enumerate(msgs):
        book.apply_one(int(m["type"]), int(m["size"]), int(m["price"]), int(m["direction"]), int(m["instrument"]))
        ref.apply(m)
        inst = int(m["instrument"])
        d = depths[i % len(depths)]
        np.testing.assert_array_equal(book.snapshot(d, inst), ref.snapshot(d, inst), err_msg=f"message {i}")
        assert book.trading_state(inst) == ref.state[inst]
        deepest = max(deepest, len(ref.bids[inst]), len(ref.asks[inst]))
    for inst in range(n_inst):
        nb, na = book.level_counts(inst)
        assert (nb, na) == (len(ref.bids[inst]), len(ref.asks[inst]))
        np.testing.assert_array_equal(book.snapshot(max(nb, na) + 2, inst), ref.snapshot(max(nb, na) + 2, inst))
    assert deepest > 16   # levels grew well past the 4 preallocated


@pytest.mark.parametrize("levels", [1, 5])
def test_batch_features_match_numpy(stream_seed, levels):
    n_inst = 8
    msgs = synthetic_stream(stream_seed, 8_000, n_inst)
    ref = RefBook(n_inst)
    snaps = np.empty((len(msgs), levels, 4), np.int64)
    for i, m in enumerate(msgs):
        ref.apply(m)
        snaps[i] = ref.snapshot(levels, int(m["instrument"]))
    book = Book(n_inst)
    got = {}
    for chunk in np.array_split(np.arange(len(msgs)), 7):   # several batches of different sizes
        f = book.apply(msgs[chunk], features=levels)
        assert isinstance(f, BookFeatures) and f.levels == levels
        assert np.all(f.codes == MessageCode.OK)
        for k in ("mid", "spread", "microprice", "imbalance", "depth_imbalance", "bid_depth", "ask_depth"):
            got.setdefault(k, []).append(getattr(f, k))
    want = features_from_snapshots(snaps, levels)
    for k, v in want.items():
        np.testing.assert_allclose(np.concatenate(got[k]), v, rtol=1e-14, atol=0, equal_nan=True, err_msg=k)


def test_features_now_match_snapshot(rng):
    book = Book(2)
    msgs = synthetic_stream(int(rng.integers(2**31)), 3000, 2)
    book.apply(msgs)
    for inst in range(2):
        f = book.features(4, inst)
        want = features_from_snapshots(book.snapshot(4, inst)[None], 4)
        assert f.mid.shape == () and f.bid_depth.shape == (4,)
        for k, v in want.items():
            np.testing.assert_allclose(getattr(f, k), v[0], rtol=1e-14, equal_nan=True, err_msg=k)


# ---- semantics at the edges ----------------------------------------------------------------

def test_empty_book_encoding_and_nan_features():
    book = Book()
    snap = book.snapshot(3)
    assert (snap[:, 0] == EMPTY_ASK_PRICE).all() and (snap[:, 2] == EMPTY_BID_PRICE).all()
    assert (snap[:, 1] == 0).all() and (snap[:, 3] == 0).all()
    f = book.features(2)
    assert np.isnan([f.mid, f.microprice, f.spread, f.imbalance, f.depth_imbalance]).all()
    assert book.snapshot(0).shape == (0, 4)


def test_one_sided_book():
    book = Book()
    book.apply_one(1, 300, 1_000_000, 1)   # bid only
    f = book.features(1)
    assert np.isnan(f.mid) and np.isnan(f.spread) and np.isnan(f.microprice)
    assert f.imbalance == 1.0 and f.depth_imbalance == 1.0
    assert f.bid_depth.tolist() == [300]


def test_hidden_and_cross_trades_leave_book_unchanged():
    book = Book()
    book.apply_one(1, 100, 2_000_000, -1)
    book.apply_one(1, 100, 1_990_000, 1)
    before = book.snapshot(5)
    book.apply(message_array([5, 6, 5], [10, 0, 999], [1_995_000, 1_995_000, 3], [1, -1, -1]))
    np.testing.assert_array_equal(book.snapshot(5), before)


def test_halts_track_trading_state():
    book = Book(3)
    book.apply_one(7, 0, -1, -1, 1)
    assert book.trading_state(1) == TradingState.HALTED and book.trading_state(0) == TradingState.TRADING
    book.apply_one(7, 0, 0, -1, 1)
    assert book.trading_state(1) == TradingState.QUOTING
    book.apply_one(7, 0, 1, -1, 1)
    assert book.trading_state(1) == TradingState.TRADING
    with pytest.raises(BookError, match="BAD_PRICE"):
        book.apply_one(7, 0, 2, -1, 1)


def test_crossed_book_has_negative_spread():
    book = Book()
    book.apply_one(1, 10, 1_000_100, 1)
    book.apply_one(1, 10, 1_000_000, -1)
    assert book.features().spread == pytest.approx(-0.01)


def test_growth_and_max_levels():
    book = Book(initial_levels=1, max_levels=50)
    for k in range(50):
        book.apply_one(1, k + 1, 1_000_000 - 100 * k, 1)
    assert book.level_counts() == (50, 0)
    snap = book.snapshot(50)
    assert snap[:, 2].tolist() == [1_000_000 - 100 * k for k in range(50)]
    with pytest.raises(BookError, match="TOO_DEEP"):
        book.apply_one(1, 5, 1, 1)
    book.apply_one(1, 5, 1_000_000, 1)   # an existing level still takes size
    np.testing.assert_array_equal(book.snapshot(50)[1:], snap[1:])


def test_sync_and_set_side():
    book = Book()
    row = np.array([101, 5, 99, 7, 102, 6, 98, 8, EMPTY_ASK_PRICE, 0, 97, 9], np.int64)
    book.apply_one(1, 1, 50, 1)
    book.sync_from_orderbook_row(row)
    np.testing.assert_array_equal(book.snapshot(3).ravel(), row)
    assert book.level_counts() == (3, 2)
    book.set_side(-1, [200, 201], [1, 2])
    assert book.snapshot(2)[:, 0].tolist() == [200, 201]
    assert book.snapshot(1)[0, 2] == 99
    for empty in ([], (), np.zeros(0), np.zeros(0, np.int64)):   # a row of no level empties the book
        book.sync_from_orderbook_row(row)
        book.sync_from_orderbook_row(empty)
        assert book.level_counts() == (0, 0)


@pytest.mark.parametrize("row, reason", [
    ([101, 5, 99, 7, 100, 6, 98, 8], "ask level 2: price 100 not worse"),
    ([101, 5, 99, 7, 102, 6, 99, 8], "bid level 2: price 99 not worse"),
    ([101, -5, 99, 7], "negative size"),
    ([EMPTY_ASK_PRICE, 0, 99, 7, 102, 6, 98, 8], "occupied after an empty level"),
])
def test_sync_rejects_invalid_rows(row, reason):
    book = Book()
    book.apply_one(1, 3, 500, 1)
    before = book.snapshot(4)
    with pytest.raises(ValueError, match=reason):
        book.sync_from_orderbook_row(np.array(row))
    np.testing.assert_array_equal(book.snapshot(4), before)
    with pytest.raises(ValueError, match="4 \\* levels"):
        book.sync_from_orderbook_row(np.arange(6))


# ---- bad input -------------------------------------------------------------------------------

def test_cancel_larger_than_level_is_reported_not_clamped():
    book = Book()
    book.apply_one(1, 100, 1_000_000, 1)
    for kind in (2, 3, 4):
        with pytest.raises(BookError, match="OVERSIZE") as e:
            book.apply_one(kind, 150, 1_000_000, 1)
        assert e.value.code == MessageCode.OVERSIZE
    assert book.snapshot(1)[0, 2:].tolist() == [1_000_000, 100]
    with pytest.raises(BookError, match="PARTIAL_EMPTIES"):
        book.apply_one(2, 100, 1_000_000, 1)
    with pytest.raises(BookError, match="NO_LEVEL"):
        book.apply_one(3, 10, 1_000_100, 1)
    with pytest.raises(BookError, match="NO_LEVEL"):
        book.apply_one(4, 10, 1_000_000, -1)   # right price, wrong side
    book.apply_one(3, 100, 1_000_000, 1)
    assert book.level_counts() == (0, 0)


def test_batch_raise_names_the_row_and_keeps_earlier_messages():
    book = Book()
    msgs = message_array([1, 1, 1, 9, 1], 10, [100, 101, 102, 103, 104], 1)
    with pytest.raises(BookError, match=r"messages\[3\]: unknown message type 9") as e:
        book.apply(msgs)
    assert e.value.row == 3
    assert book.snapshot(5)[:, 2].tolist() == [102, 101, 100, EMPTY_BID_PRICE, EMPTY_BID_PRICE]


def test_batch_skip_reports_codes():
    book = Book(2)
    msgs = message_array(
        type=[1, 2, 1, 1, 3, 1, 1],
        size=[10, 20, 5, 0, 10, 7, 7],
        price=[100, 100, 100, 100, 100, -5, 100],
        direction=[1, 1, 1, 1, 1, 1, 0],
        instrument=[0, 0, 2, 0, 0, 0, 0])
    f = book.apply(msgs, features=1, on_error="skip")
    assert f.codes.tolist() == [MessageCode.OK, MessageCode.OVERSIZE, MessageCode.BAD_INSTRUMENT,
                                MessageCode.BAD_SIZE, MessageCode.OK, MessageCode.BAD_PRICE,
                                MessageCode.BAD_DIRECTION]
    assert np.isnan(f.imbalance[2]) and f.bid_depth[2].tolist() == [0]   # no instrument: no state
    assert f.bid_depth[:, 0].tolist() == [10, 10, 0, 10, 0, 0, 0]
    assert book.level_counts(0) == (0, 0)


def test_out_of_range_instrument():
    book = Book(8)
    with pytest.raises(BookError, match=r"instrument 8 out of range \[0, 8\)") as e:
        book.apply_one(1, 10, 100, 1, 8)
    assert e.value.code == MessageCode.BAD_INSTRUMENT
    with pytest.raises(BookError, match=r"messages\[1\]: instrument -1 out of range"):
        book.apply(message_array([1, 1], 10, 100, 1, instrument=[0, -1]))
    for call in (lambda: book.snapshot(1, 8), lambda: book.features(1, -1), lambda: book.trading_state(9),
                 lambda: book.sync_from_orderbook_row(np.zeros(4, np.int64), 8)):
        with pytest.raises(IndexError, match="instrument: .* out of range"):
            call()


def test_negative_levels_and_bad_arguments():
    book = Book()
    with pytest.raises(ValueError, match="levels: must be >= 0, got -1"):
        book.snapshot(-1)
    with pytest.raises(ValueError, match="levels: must be >= 0, got -2"):
        book.features(-2)
    with pytest.raises(ValueError, match="features: must be >= 0"):
        book.apply(message_array(1, 1, 1, 1), features=-1)
    with pytest.raises(ValueError, match="on_error"):
        book.apply(message_array(1, 1, 1, 1), on_error="ignore")
    with pytest.raises(TypeError, match="messages"):
        book.apply([1, 2, 3])
    with pytest.raises(ValueError, match="n_instruments"):
        Book(0)
    with pytest.raises(ValueError, match="initial_levels"):
        Book(initial_levels=10, max_levels=5)
    with pytest.raises(ValueError, match="price_scale"):
        Book(price_scale=0)


def test_empty_batch_and_single_record():
    book = Book()
    assert book.apply(np.zeros(0, MESSAGE_DTYPE)).shape == (0,)
    f = book.apply(np.zeros(0, MESSAGE_DTYPE), features=3)
    assert f.mid.shape == (0,) and f.bid_depth.shape == (0, 3)
    rec = message_array(1, 10, 100, -1)[()]
    assert book.apply(rec).tolist() == [0]
    assert book.snapshot(1)[0, :2].tolist() == [100, 10]


def test_message_dtype_mirrors_the_c_struct():
    assert MESSAGE_DTYPE.itemsize == ffi.sizeof("tg_message") == 48
    for name in MESSAGE_DTYPE.names:
        assert MESSAGE_DTYPE.fields[name][1] == ffi.offsetof("tg_message", name)


def test_features_reuse_matches_fresh_and_allocates_once():
    book = Book()
    book.set_side(1, [1000, 999], [5, 7])
    book.set_side(-1, [1002, 1003], [3, 4])
    fresh = book.features(2)
    reused = book.features(2, reuse=True)
    for k in ("mid", "microprice", "spread", "imbalance", "depth_imbalance", "bid_depth", "ask_depth"):
        np.testing.assert_array_equal(getattr(reused, k), getattr(fresh, k))
    assert float(reused.mid) == (1000 + 1002) / 2 / 10_000
    book.set_side(1, [1001], [2])
    again = book.features(2, reuse=True)
    assert np.shares_memory(again.mid, reused.mid)          # the same buffer, overwritten
    assert float(again.mid) == (1001 + 1002) / 2 / 10_000
    assert float(fresh.mid) == (1000 + 1002) / 2 / 10_000  # a fresh result is not touched
    # every call rescales what the core wrote once (never a rescaled value again), and an empty
    # side gives NaN prices, not the last call's
    for _ in range(3):
        assert float(book.features(2, reuse=True).spread) == (1002 - 1001) / 10_000
    book.clear()
    book.set_side(-1, [1002], [3])
    empty_bid = book.features(2, reuse=True)
    assert np.isnan(float(empty_bid.mid)) and np.isnan(float(empty_bid.microprice))
    assert float(empty_bid.imbalance) == -1.0 and empty_bid.ask_depth.tolist() == [3, 0]


def test_features_reuse_keeps_a_bounded_number_of_buffer_sets():
    """A loop asking for many depths does not keep a buffer set for each: the oldest are dropped,
    what a caller holds of them stays valid, and every depth still gives the fresh features."""
    from tickgpu.finance import book as book_module

    book = Book()
    book.set_side(1, [1000, 999, 998], [5, 7, 9])
    book.set_side(-1, [1002, 1003], [3, 4])
    first = book.features(1, reuse=True)
    held = float(first.mid)
    for levels in range(1, 4 * book_module._REUSED_SETS):
        reused, fresh = book.features(levels, reuse=True), book.features(levels)
        np.testing.assert_array_equal(reused.bid_depth, fresh.bid_depth)
        assert float(reused.microprice) == float(fresh.microprice)
        assert len(book._reused_features) <= book_module._REUSED_SETS
    assert float(first.mid) == held
    # step's own set (one level) comes back when asked for again
    feats, _, _ = book.step(1, 1, 1001, 1)
    assert float(feats.mid) == (1001 + 1002) / 2 / 10_000


# ---- review regressions: every path refuses what apply_one refuses --------------------------------

def _other_dtype(**fields) -> np.dtype:
    return np.dtype([(k, fields.get(k, "i8")) for k in ("type", "size", "price", "direction", "instrument")])


@pytest.mark.parametrize("dtype, values, err, match", [
    (_other_dtype(), [(1, 10, 1000, 1, 0), (2**32 + 1, 10, 1000, 1, 0)], ValueError,
     r"messages\[1\]: type 4294967297 does not fit int32"),
    (_other_dtype(), [(1, 10, 1000, 1, 2**32)], ValueError, r"messages\[0\]: instrument 4294967296 does not fit int32"),
    (_other_dtype(), [(1, 10, 1000, -2**31 - 1, 0)], ValueError, r"messages\[0\]: direction -2147483649 does not fit"),
    (_other_dtype(size="u8"), [(1, 5, 1000, 1, 0), (1, 2**63, 1000, 1, 0)], ValueError,
     r"messages\[1\]: size 9223372036854775808 does not fit int64"),
    (_other_dtype(price="f8", size="f8"), [(1, 10.9, 1000.7, 1, 0)], TypeError,
     "messages: field 'size' must hold integers, got dtype float64"),
    (_other_dtype(price="f8"), [(1, 10, np.nan, 1, 0)], TypeError, "messages: field 'price' must hold integers"),
    (_other_dtype(direction="?"), [(1, 10, 1000, True, 0)], TypeError, "field 'direction' must hold integers"),
    (_other_dtype(type=("i4", (2,))), [((1, 1), 10, 1000, 1, 0)], TypeError,
     r"messages: field 'type' must hold one value per message, got dtype \('<i4', \(2,\)\)"),
])
def test_apply_refuses_values_another_dtype_cannot_carry(dtype, values, err, match):
    """A structured array of another dtype is never cast silently (2**32 + 1 used to apply as a
    submit, 1000.7 as 1000); the book is left as it was."""
    book = Book()
    with pytest.raises(err, match=match):
        book.apply(np.array(values, dtype))
    assert book.level_counts() == (0, 0)


def test_apply_takes_other_integer_dtypes_that_fit(rng):
    n = 200
    ref = message_array(1, rng.integers(1, 100, n), rng.integers(1000, 1100, n), rng.choice([-1, 1], n))
    other = np.zeros(n, [("price", "u4"), ("size", "i2"), ("type", "u1"), ("direction", "i1"), ("time", "f4"),
                         ("venue", "U4")])
    for k in ("price", "size", "type", "direction"):
        other[k] = ref[k]
    a, b = Book(), Book()
    np.testing.assert_array_equal(a.apply(ref), b.apply(other))
    np.testing.assert_array_equal(a.snapshot(20), b.snapshot(20))


def test_set_side_and_sync_never_truncate_or_wrap():
    book = Book()
    book.set_side(1, [1000, 999], [5, 7])
    before = book.snapshot(2)
    for args, err, match in [
        ((1, [100.9, 99.2], [1, 2]), TypeError, "prices: must hold integers, got dtype float64"),
        ((1, [100, 99], [1.7, 2]), TypeError, "sizes: must hold integers, got dtype float64"),
        ((1, [100, 99], [2**64, 2]), ValueError, r"sizes\[0\]: 18446744073709551616 does not fit int64"),
        ((1, np.array([100, 2**63], np.uint64), [1, 2]), ValueError, r"prices\[1\]: 9223372036854775808 does not"),
        ((1.0, [100], [1]), TypeError, "direction: must be the integer 1 .bid. or -1 .ask., got 1.0"),
        ((True, [100], [1]), TypeError, "direction: must be the integer"),
    ]:
        with pytest.raises(err, match=match):
            book.set_side(*args)
    row = np.array([1002, 3, 1000, 5], np.uint64)
    row[3] = 2**63
    with pytest.raises(ValueError, match=r"row\[3\]: 9223372036854775808 does not fit int64"):
        book.sync_from_orderbook_row(row)
    np.testing.assert_array_equal(book.snapshot(2), before)
    book.set_side(-1, np.array([1002, 1003], np.int16), np.array([3, 4], np.uint32))
    assert book.snapshot(2)[:, :2].tolist() == [[1002, 3], [1003, 4]]


def test_imbalances_of_huge_sizes_do_not_overflow(rng):
    """Sizes near int64's limit: the sums need more than 64 bits (they used to overflow, giving
    NaN or a wrong sign); checked against exact rational arithmetic."""
    from fractions import Fraction

    book = Book()
    book.set_side(1, [100], [2**62])
    book.set_side(-1, [101], [2**62])
    f = book.features(1)
    assert float(f.imbalance) == 0.0 and float(f.depth_imbalance) == 0.0
    for _ in range(50):
        L = int(rng.integers(1, 6))
        bid = [int(v) for v in rng.integers(2**61, 2**63 - 1, L, dtype=np.int64)]
        ask = [int(v) for v in rng.integers(1, 2**63 - 1, int(rng.integers(1, 6)), dtype=np.int64)]
        book.set_side(1, 1000 - np.arange(L), bid)
        book.set_side(-1, 1001 + np.arange(len(ask)), ask)
        f = book.features(5)
        want = float(Fraction(bid[0] - ask[0], bid[0] + ask[0]))
        assert float(f.imbalance) == pytest.approx(want, rel=1e-15, abs=1e-300)
        want = float(Fraction(sum(bid) - sum(ask), sum(bid) + sum(ask)))
        assert float(f.depth_imbalance) == pytest.approx(want, rel=1e-15, abs=1e-300)
        assert f.bid_depth.tolist() == (bid + [0] * 5)[:5]
    book.set_side(1, [100], [2**62 + 1])
    book.set_side(-1, [101], [2**62])
    assert float(book.features(1).imbalance) == float(Fraction(1, 2**63 + 1))


def test_argument_errors_name_the_argument():
    book = Book()
    for call in (lambda: book.features(levels=2**31), lambda: book.features(2**31, reuse=True),
                 lambda: book.snapshot(2**31)):
        with pytest.raises(ValueError, match=r"levels: must be < 2\*\*31, got 2147483648"):
            call()
    with pytest.raises(ValueError, match=r"features: must be < 2\*\*31"):
        book.apply(message_array(1, 1, 1, 1), features=2**31)
    for scale in ("1", None, True, [1.0]):
        with pytest.raises(TypeError, match="price_scale: must be a real number"):
            Book(price_scale=scale)
    assert Book(price_scale=np.float32(100.0)).price_scale == 100.0


def test_features_of_more_levels_than_memory_holds_refuse_cleanly(monkeypatch):
    """The core writes every level of every row: 2**31 - 1 levels would be 32 GiB really used, and
    the process killed; it is a MemoryError naming the argument instead (on a machine of 8 GiB, so
    that the test never depends on this one's)."""
    import tickgpu.finance.book as book

    monkeypatch.setattr(book, "_physical_memory", lambda: 8 << 30)
    b = Book()
    b.apply_one(1, 10, 100, 1)
    with pytest.raises(MemoryError, match=r"^features: 2147483647 levels for 1 states need 32.0 GiB"):
        b.features(2**31 - 1)
    with pytest.raises(MemoryError, match=r"^features: 2147483647 levels"):
        b.apply(message_array(1, [10], [100], 1), features=2**31 - 1)
    assert b.features(3).bid_depth.tolist() == [10, 0, 0]


def test_snapshot_of_more_levels_than_memory_holds_refuses_cleanly(monkeypatch):
    """snapshot(2**31 - 1) asked NumPy for 64 GiB (its MemoryError names no argument; a size under
    the machine's overcommit but over its memory would be written level by level and the process
    killed): a MemoryError naming levels, on a machine of 8 GiB so that the test never depends on
    this one's."""
    import tickgpu.finance.book as book

    monkeypatch.setattr(book, "_physical_memory", lambda: 8 << 30)
    b = Book()
    b.apply_one(1, 10, 100, 1)
    for levels, gib in [(2**31 - 1, "64.0"), (3 * 10**8, "8.9")]:
        with pytest.raises(MemoryError, match=rf"^snapshot: {levels} levels need {gib} GiB, more than this "
                                              r"machine's 8.0 GiB"):
            b.snapshot(levels)
    assert b.snapshot(2).tolist() == [[EMPTY_ASK_PRICE, 0, 100, 10], [EMPTY_ASK_PRICE, 0, EMPTY_BID_PRICE, 0]]
