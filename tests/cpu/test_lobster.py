"""LOBSTER reader and replay on the real sample files, and the reader's handling of bad files.

The replay's resync counts are checked against an independent count made here from the
orderbook rows themselves (where a level-L window must refill from outside), and every
transition is reproduced by a pure-Python dict book as well as by the native Book.
"""
from __future__ import annotations

import csv
import re
import time
import types
from pathlib import Path

import numpy as np
import pytest

import tickgpu
from tickgpu import Book, read_lobster
from tickgpu.finance.book import MESSAGE_DTYPE, ResyncReason, message_array
from tickgpu.finance.lobster import LobsterData

SAMPLES = [
    ("AMZN_2012-06-21_34200000_57600000_message_1.csv", "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv", 1),
    ("AAPL_2012-06-21_34200000_57600000_message_10.csv", "AAPL_2012-06-21_34200000_57600000_orderbook_10.csv", 10),
]
BUNDLED = Path(tickgpu.__file__).parent / "data"


@pytest.fixture(scope="module", params=SAMPLES, ids=lambda s: s[0][:4])
def sample(request, shared_dir):
    msg, book, levels = request.param
    d = shared_dir / "data" / "lobster"
    return read_lobster(d / msg, d / book), d / msg, d / book, levels


def _csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    return rows[1:] if not rows[0][0][:1].isdigit() else rows


# ---- reading the samples ---------------------------------------------------------------------

def test_sample_parse_matches_csv_module(sample):
    data, msg_path, book_path, levels = sample
    ref = _csv_rows(msg_path)
    assert len(data) == len(ref) and data.levels == levels
    assert data.messages.dtype == MESSAGE_DTYPE
    np.testing.assert_array_equal(data.messages["time"], [float(r[0]) for r in ref])
    for c, name in enumerate(("type", "order_id", "size", "price", "direction"), 1):
        np.testing.assert_array_equal(data.messages[name], [int(r[c]) for r in ref], err_msg=name)
    assert (data.messages["instrument"] == 0).all()
    np.testing.assert_array_equal(data.orderbook, np.array(_csv_rows(book_path), dtype=np.int64))
    assert data.orderbook.shape == (len(ref), 4 * levels)
    assert data.message_path == msg_path and data.orderbook_path == book_path


def test_bundled_samples_are_the_shared_ones(shared_dir):
    for msg, book, _ in SAMPLES:
        for name in (msg, book):
            assert (BUNDLED / name).read_bytes() == (shared_dir / "data" / "lobster" / name).read_bytes()


def test_amzn_day_reads_fast(shared_dir):
    msg, book, _ = SAMPLES[0]
    d = shared_dir / "data" / "lobster"
    read_lobster(d / msg, d / book)
    t = time.perf_counter()
    data = read_lobster(d / msg, d / book)
    elapsed = time.perf_counter() - t
    assert len(data) == 57_515
    assert elapsed < 0.5, f"read took {elapsed:.3f} s"


# ---- replaying the samples -----------------------------------------------------------------

def _side(row: np.ndarray, ask: bool) -> list[tuple[int, int]]:
    off = 0 if ask else 2
    return [(int(p), int(z)) for p, z in zip(row[off::4], row[off + 1::4]) if z > 0]


def independent_refill_rows(data: LobsterData) -> set[int]:
    """Rows where message i empties a level of a full L-level window and row i shows a level L
    that row i-1 did not: that level came from outside the window (data README)."""
    m, ob, L = data.messages, data.orderbook, data.levels
    rows = set()
    for i in range(1, len(m)):
        if m["type"][i] not in (2, 3, 4):
            continue
        ask = m["direction"][i] == -1
        before, after = _side(ob[i - 1], ask), _side(ob[i], ask)
        level = dict(before)
        emptied = level.get(int(m["price"][i])) == int(m["size"][i])
        if emptied and len(before) == L and len(after) == L and after[-1][0] not in level:
            rows.add(i)
    return rows


def independent_outside_rows(data: LobsterData) -> set[int]:
    """Cancels/executions at a price beyond a full window (the order was never in the window)."""
    m, ob, L = data.messages, data.orderbook, data.levels
    rows = set()
    for i in range(1, len(m)):
        if m["type"][i] in (2, 3, 4):
            ask = m["direction"][i] == -1
            before = _side(ob[i - 1], ask)
            p = int(m["price"][i])
            if len(before) == L and (p > before[-1][0] if ask else p < before[-1][0]):
                rows.add(i)
    return rows


def test_every_transition_reproduced_by_a_dict_book(sample):
    """Row i-1 + message i -> row i with a pure-Python dict book; at refill rows everything but
    the refilled level L of that side must agree."""
    data, *_ = sample
    m, ob, L = data.messages, data.orderbook, data.levels
    refills = independent_refill_rows(data)
    for i in range(1, len(m)):
        asks, bids = dict(_side(ob[i - 1], True)), dict(_side(ob[i - 1], False))
        t = int(m["type"][i])
        if t in (1, 2, 3, 4):
            side = asks if m["direction"][i] == -1 else bids
            p, z = int(m["price"][i]), int(m["size"][i])
            side[p] = side.get(p, 0) + (z if t == 1 else -z)
            assert side[p] >= 0, i
            if side[p] == 0:
                del side[p]
        got_a = sorted(asks.items())[:L]
        got_b = sorted(bids.items(), reverse=True)[:L]
        want_a, want_b = _side(ob[i], True), _side(ob[i], False)
        if i in refills:
            if m["direction"][i] == -1:
                want_a = want_a[:-1]
            else:
                want_b = want_b[:-1]
        assert (got_a, got_b) == (want_a, want_b), f"row {i}"


def test_replay_counts_match_independent_count(sample):
    data, *_ = sample
    stats = Book().replay_lobster(data)
    refills = independent_refill_rows(data)
    outside = independent_outside_rows(data)
    n = len(data)
    assert stats.messages == n
    assert stats.mismatches == 0 and stats.mismatch_rows.size == 0
    assert stats.resyncs == {"initial": 1, "window_refill": len(refills), "outside_window": len(outside)}
    assert stats.exact == n - 1 - len(refills) - len(outside)
    assert set(np.flatnonzero(stats.row_reasons == ResyncReason.WINDOW_REFILL).tolist()) == refills
    assert stats.row_reasons[0] == ResyncReason.INITIAL
    print(f"{data.message_path.name}: {stats}")


def test_replay_step_by_step_with_the_book_api(sample):
    """The same transitions through the public tick-by-tick API: sync, apply_one, snapshot."""
    data, *_ = sample
    m, ob, L = data.messages, data.orderbook, data.levels
    skip = independent_refill_rows(data) | independent_outside_rows(data)
    book = Book()
    for i in range(1, len(m)):
        book.sync_from_orderbook_row(ob[i - 1])
        book.apply_one(int(m["type"][i]), int(m["size"][i]), int(m["price"][i]), int(m["direction"][i]))
        if i not in skip:
            np.testing.assert_array_equal(book.snapshot(L).ravel(), ob[i], err_msg=f"row {i}")


def test_replay_ends_on_last_row(sample):
    data, *_ = sample
    book = Book(3)
    book.replay_lobster(data, instrument=2)
    np.testing.assert_array_equal(book.snapshot(data.levels, 2).ravel(), data.orderbook[-1])
    assert book.level_counts(0) == (0, 0)


def test_corrupted_row_is_a_mismatch(shared_dir, rng):
    msg, book, _ = SAMPLES[1]
    d = shared_dir / "data" / "lobster"
    data = read_lobster(d / msg, d / book)
    ob = data.orderbook.copy()
    row = int(rng.integers(10, len(ob) - 10))
    ob[row, 3] += 1   # best bid size off by one share
    stats = Book().replay_lobster(LobsterData(data.messages, ob, data.levels, data.message_path, data.orderbook_path))
    assert stats.mismatch_rows[0] == row and stats.mismatches <= 2
    assert set(stats.mismatch_rows.tolist()) <= {row, row + 1}


def test_replay_classifies_each_reason():
    L = 2
    E = 9_999_999_999
    rows = np.array([
        [101, 5, 99, 7, 102, 6, 98, 8],      # 0 initial
        [101, 5, 99, 7, 102, 6, 98, 8],      # 1 submit bid 97 beyond the full window: unchanged
        [101, 5, 99, 7, 102, 6, 98, 8],      # 2 delete bid 97: outside the window
        [102, 6, 99, 7, 105, 4, 98, 8],      # 3 delete ask 101: 105 refills from outside
        [102, 4, 99, 7, 105, 4, 98, 8],      # 4 execute 2 at 102
        [102, 4, 99, 5, 105, 4, 98, 8],      # 5 cancel 1 at 99 but the row says 2: mismatch
        [102, 4, 99, 5, 105, 4, 98, 8],      # 6 halt
        [102, 4, 98, 8, 105, 4, -E, 0],      # 7 delete bid 99 (5): side not refilled (nothing left)
    ], np.int64)
    msgs = message_array(
        type=[1, 1, 3, 3, 4, 2, 7, 3],
        size=[5, 3, 3, 5, 2, 1, 0, 5],
        price=[101, 97, 97, 101, 102, 99, -1, 99],
        direction=[-1, 1, 1, -1, -1, 1, -1, 1])
    data = LobsterData(msgs, rows, L, Path("m.csv"), Path("o.csv"))
    stats = Book().replay_lobster(data)
    assert stats.row_reasons.tolist() == [1, 0, 3, 2, 0, 4, 0, 0]
    assert stats.resyncs == {"initial": 1, "window_refill": 1, "outside_window": 1}
    assert stats.mismatches == 1 and stats.mismatch_rows.tolist() == [5] and stats.exact == 4


def test_replay_rejects_bad_data():
    msgs = message_array([1, 1], 1, 100, 1)
    with pytest.raises(ValueError, match="orderbook"):
        Book().replay_lobster(LobsterData(msgs, None, None, Path("m"), None))
    with pytest.raises(ValueError, match="orderbook shape"):
        Book().replay_lobster(LobsterData(msgs, np.zeros((3, 4), np.int64), 1, Path("m"), Path("o")))
    bad = np.array([[101, 5, 99, 7], [101, 5, 99, -1]], np.int64)
    with pytest.raises(ValueError, match="orderbook row 1: not a valid book: bid level 1: negative size"):
        Book().replay_lobster(LobsterData(msgs, bad, 1, Path("m"), Path("o")))
    empty = Book().replay_lobster(LobsterData(msgs[:0], np.zeros((0, 4), np.int64), 1, Path("m"), Path("o")))
    assert empty.messages == 0 and empty.exact == 0
    for not_data in (5, {"messages": msgs}, msgs, types.SimpleNamespace(orderbook=np.zeros((2, 4), np.int64))):
        with pytest.raises(TypeError, match=r"^data: must be a LobsterData \(messages, orderbook, levels"):
            Book().replay_lobster(not_data)


# ---- the reader on hand-made files -----------------------------------------------------------

HEADER = "Time,Type,OrderId,Size,Price,Direction\n"
BODY = "34200.004241176,1,16113575,18,5853300,1\n34200.00426064,3,16113584,18,5853200,-1\n34201.5,7,0,0,-1,-1\n"
BOOK = "5859400,200,5853300,18\n5859400,200,5853000,150\n5859400,200,5853000,150\n"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_header_and_no_header_read_the_same(tmp_path):
    a = read_lobster(_write(tmp_path, "a.csv", BODY), _write(tmp_path, "ab.csv", BOOK))
    b = read_lobster(_write(tmp_path, "b.csv", HEADER + BODY),
                     _write(tmp_path, "bb.csv", "BestAsk,BestAskVolume,BestBid,BestBidVolume\n" + BOOK))
    c = read_lobster(_write(tmp_path, "c.csv", "\ufeff" + (HEADER + BODY).replace("\n", "\r\n") + "\r\n\n"),
                     _write(tmp_path, "cb.csv", BOOK.rstrip("\n")))
    for x in (b, c):
        assert x.messages.tobytes() == a.messages.tobytes()
        np.testing.assert_array_equal(x.orderbook, a.orderbook)
    assert a.levels == 1 and len(a) == 3
    assert a.messages["time"][0] == 34200.004241176 and a.messages["price"][2] == -1


def test_message_file_alone(tmp_path):
    d = read_lobster(_write(tmp_path, "m.csv", BODY), levels=10)
    assert d.orderbook is None and d.orderbook_path is None and d.levels == 10 and len(d) == 3


@pytest.mark.parametrize("text, match", [
    (HEADER + BODY + "34202,1,5,10,100\n", r"m\.csv, line 5: 5 fields, expected 6"),
    (BODY + "34202,1,5,10,100,1,7\n", r"line 4: 7 fields, expected 6"),
    (HEADER + "34202,1,abc,10,100,1\n", r"line 2, column 3 \(order_id\): not a number: 'abc'"),
    (BODY + "34202x,1,5,10,100,1\n", r"line 4, column 1 \(time\): not a number: '34202x'"),
    (BODY + "34202,1,5,,100,1\n", r"line 4, column 4 \(size\): not a number"),
    (BODY + "34202,1,5,1.5,100,1\n", r"line 4, column 4 \(size\): not a number"),
    (BODY + "34202,8,5,10,100,1\n", r"line 4, column 2 \(type\): unknown message type 8"),
    (BODY + "34202,0,5,10,100,1\n", r"line 4, column 2 \(type\): unknown message type 0"),
    (HEADER + BODY + "34202,1,5,10,100,0\n", r"line 5, column 6 \(direction\): direction 0"),
    (BODY + "\n34202,1,5,-10,100,1\n", r"line 5, column 4 \(size\): negative size -10"),
    (BODY + "34202,1,99999999999999999999,10,100,1\n", r"line 4, column 3 \(order_id\): integer out of the int64"),
    (BODY + "Time,Type,OrderId,Size,Price,Direction\n", r"line 4, column 1 \(time\): not a number"),
])
def test_malformed_message_files(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        read_lobster(_write(tmp_path, "m.csv", text))


def test_malformed_orderbook_files(tmp_path):
    m = _write(tmp_path, "m.csv", BODY)
    with pytest.raises(ValueError, match=r"o\.csv, line 1: 6 columns, not a multiple of 4"):
        read_lobster(m, _write(tmp_path, "o.csv", "1,2,3,4,5,6\n" * 3))
    with pytest.raises(ValueError, match=r"o\.csv: 2 rows, but .*m\.csv has 3"):
        read_lobster(m, _write(tmp_path, "o.csv", BOOK.split("\n", 1)[1]))
    with pytest.raises(ValueError, match="4 columns, expected 40 for levels=10"):
        read_lobster(m, _write(tmp_path, "o.csv", BOOK), levels=10)
    with pytest.raises(ValueError, match=r"o\.csv, line 2, column 4 \(bid_size_1\): negative size -150"):
        read_lobster(m, _write(tmp_path, "o.csv", BOOK.replace(",150\n", ",-150\n", 1)))
    with pytest.raises(ValueError, match=r"o\.csv, line 3: 3 fields, expected 4"):
        read_lobster(m, _write(tmp_path, "o.csv", "5859400,200,5853300,18\n5859400,200,5853000,150\n1,2,3\n"))
    with pytest.raises(ValueError, match="levels: must be an integer >= 1"):
        read_lobster(m, levels=0)


def test_empty_files(tmp_path):
    for text in ("", HEADER, "\n\n"):
        d = read_lobster(_write(tmp_path, "x_message_5.csv", text), _write(tmp_path, "x_orderbook_5.csv", ""))
        assert len(d) == 0 and d.messages.dtype == MESSAGE_DTYPE
        assert d.levels == 5 and d.orderbook.shape == (0, 20)
    assert Book().replay_lobster(d).messages == 0


def test_time_column_is_correctly_rounded(tmp_path, rng):
    """Times with up to 20 significant digits and exponents parse exactly as Python's float()."""
    values = np.concatenate([
        34200 + rng.random(300) * 23400,
        rng.random(100) * 10.0 ** rng.integers(-30, 30, 100),
    ])
    texts = [repr(float(v)) for v in values] + [f"{v:.20g}" for v in values[:50]] + \
        ["34200.12345678901234567890", "1e5", "2.5E-3", "+7", "0.000", "-0"]
    body = "".join(f"{t},5,0,1,100,1\n" for t in texts)
    d = read_lobster(_write(tmp_path, "m.csv", body))
    assert d.messages["time"].tolist() == [float(t) for t in texts]


# ---- Book.step: the tick-by-tick replay call ------------------------------------------------------
def _step_by_parts(book, ty, size, price, direction, row):
    """What Book.step does, from the general calls: apply, compare the window, resync, features."""
    from tickgpu.finance.book import BookError

    try:
        book.apply_one(ty, size, price, direction)
        code = 0
    except BookError as e:
        code = int(e.code)
    resynced = False
    if row is not None:
        snap = book.snapshot(row.size // 4)
        empty = row[1::2] == 0   # an empty row level: its price is not compared
        got = snap.ravel()
        same = np.array_equal(got[1::2], row[1::2]) and np.array_equal(got[0::2][~empty], row[0::2][~empty])
        if not same:
            book.sync_from_orderbook_row(row)
            resynced = True
    return book.features(reuse=True), code, resynced


@pytest.mark.parametrize("with_rows", [True, False])
def test_book_step_is_the_general_calls(sample, with_rows):
    """Over the first 30,000 messages of each sample: the same features, codes and resyncs."""
    data, _, _, levels = sample
    m = data.messages[:30_000]
    fields = [m[k].tolist() for k in ("type", "size", "price", "direction")]
    a, b = Book(), Book()
    resyncs = rejected = 0
    for i in range(m.size):
        row = data.orderbook[i] if with_rows else None
        fa, code_a, rs_a = a.step(fields[0][i], fields[1][i], fields[2][i], fields[3][i], row)
        fb, code_b, rs_b = _step_by_parts(b, fields[0][i], fields[1][i], fields[2][i], fields[3][i], row)
        assert (int(code_a), rs_a) == (code_b, rs_b), i
        for k in ("mid", "microprice", "spread", "imbalance", "bid_depth", "ask_depth"):
            np.testing.assert_array_equal(getattr(fa, k), getattr(fb, k), err_msg=f"{k} at {i}")
        resyncs += rs_a
        rejected += code_a != 0
    if with_rows:
        assert resyncs > 0   # the first row at least: the initial book is not in the message file
        np.testing.assert_array_equal(a.snapshot(levels).ravel(), data.orderbook[m.size - 1])
    else:
        assert resyncs == 0 and rejected > 0   # without the file's rows the book misses the opening book


def test_book_step_arguments_and_refusals():
    from tickgpu.finance.book import EMPTY_ASK_PRICE, MessageCode

    book = Book(initial_levels=2, max_levels=2)
    row = np.array([1002, 3, 1000, 5, 1003, 4, 999, 7], np.int64)
    f, code, resynced = book.step(1, 5, 1000, 1, row)
    assert code == MessageCode.OK and resynced and float(f.mid) == 0.1001
    # A rejected message is returned, not raised, and leaves the book as it was.
    f2, code, resynced = book.step(2, 1, 1500, 1, row)
    assert code == MessageCode.NO_LEVEL and not resynced and f2 is f and float(f.mid) == 0.1001
    for bad, err, match in [(row.astype(np.float64), TypeError, "row: .*int64"),
                            (row[::2], TypeError, "row: .*C-contiguous"),
                            (row.reshape(2, 4), TypeError, "row: .*one-dimensional"),
                            (list(row), TypeError, "row: .*got list"),
                            (row[:6], ValueError, "row: must hold 4 \\* levels values"),
                            (np.zeros(0, np.int64), ValueError, "row: must hold 4 \\* levels values")]:
        with pytest.raises(err, match=match):
            book.step(1, 1, 1000, 1, bad)
    before = book.snapshot(2)
    not_a_book = np.array([1002, 3, 1000, 5, 1001, 4, 999, 7], np.int64)   # asks not getting worse
    with pytest.raises(ValueError, match="row: not a valid book"):
        book.step(1, 2, 1000, 1, not_a_book)
    after = book.snapshot(2)
    assert after[0, 3] == before[0, 3] + 2 and np.array_equal(after[:, :3], before[:, :3])   # the message applied
    too_deep = np.array([1002, 3, 1000, 5, 1003, 4, 999, 7, 1004, 1, 998, 1], np.int64)
    with pytest.raises(ValueError, match="max_levels=2"):
        book.step(5, 1, 1000, 1, too_deep)
    with pytest.raises(IndexError, match="instrument"):
        book.step(1, 1, 1000, 1, row, instrument=1)
    empty = np.array([EMPTY_ASK_PRICE, 0, 1000, 5], np.int64)
    f, code, resynced = book.step(5, 1, 1000, 1, empty)
    assert resynced and np.isnan(float(f.mid)) and float(f.imbalance) == 1.0


@pytest.mark.parametrize("args,err,match", [
    ((1.5, 5, 1000, 1), TypeError, "type must be an integer, got 1.5"),
    ((1, 5, 1000, 1.0), TypeError, "direction must be an integer, got 1.0"),
    ((1, 2**70, 1000, 1), OverflowError, "size 1180591620717411303424 does not fit int64"),
    ((1, 5, "1000", 1), TypeError, "price must be an integer, got '1000'"),
])
def test_message_fields_that_do_not_fit_are_named(args, err, match):
    book = Book()
    with pytest.raises(err, match=f"Book.step: {match}"):
        book.step(*args)
    with pytest.raises(err, match=f"Book.apply_one: {match}"):
        book.apply_one(*args)
    with pytest.raises(OverflowError, match="Book.step: instrument 1099511627776 does not fit int32"):
        book.step(1, 5, 1000, 1, None, 2**40)
    assert book.snapshot(1).tolist() == [[9999999999, 0, -9999999999, 0]]   # nothing applied


# ---- review regressions: rows never vanish, values never wrap --------------------------------

ROW = "34200.1,1,5,100,2238100,1\n"


@pytest.mark.parametrize("first, shown", [
    ("xyz,1,5,100,2238100,1\n", "xyz"),
    ("NaN,1,5,100,2238100,1\n", "NaN"),
    ("inf,1,5,100,2238100,1\n", "inf"),
    ("-,1,5,100,2238100,1\n", "-"),
    (",,,,,\n", ""),
    ('"34200.1","1","5","100","2238100","1"\n', '"34200.1"'),
])
@pytest.mark.parametrize("rest", ["", ROW * 2])
def test_a_first_row_that_is_not_a_header_is_parsed_not_dropped(tmp_path, first, shown, rest):
    """Only a line of names is a header: any other first line is data, and a bad field in it is
    reported (it used to vanish when it did not start like a number)."""
    with pytest.raises(ValueError, match=rf"m\.csv, line 1, column 1 \(time\): not a number: '{re.escape(shown)}'"):
        read_lobster(_write(tmp_path, "m.csv", first + rest))


@pytest.mark.parametrize("header", [HEADER, '"Time","Type","OrderId","Size","Price","Direction"\n',
                                    "  Time , Type,OrderId,Size,Price,Direction \r\n"])
def test_headers_of_names_are_still_skipped(tmp_path, header):
    d = read_lobster(_write(tmp_path, "m.csv", "\n" + header + BODY))
    assert len(d) == 3 and d.messages["price"].tolist() == [5853300, 5853200, -1]
    with pytest.raises(ValueError, match=r"line 3, column 6 \(direction\): direction 0"):
        read_lobster(_write(tmp_path, "m.csv", "\n" + header + BODY.replace(",1\n", ",0\n", 1)))


@pytest.mark.parametrize("time", ["1e400", "-1e400", "9" * 400, "1e99999999"])
def test_non_finite_times_are_rejected(tmp_path, time):
    with pytest.raises(ValueError, match=rf"line 2, column 1 \(time\): number beyond the float64 range: '{time}'"):
        read_lobster(_write(tmp_path, "m.csv", ROW + f"{time},1,5,100,2238100,1\n"))


def test_long_times_and_doubled_carriage_returns(tmp_path):
    """A valid time of any length parses as Python's float() does; lines may end in \\r\\r\\n."""
    times = ["34200." + "0" * 150 + "1", "0" * 200 + "34200.25", "34200." + "123456789" * 20,
             "1" + "0" * 300, "3.42" + "0" * 200 + "e4"]
    d = read_lobster(_write(tmp_path, "m.csv", "".join(f"{t},1,5,100,2238100,1\r\r\n" for t in times)))
    assert d.messages["time"].tolist() == [float(t) for t in times]
    assert d.messages["direction"].tolist() == [1] * len(times)


def test_empty_orderbook_levels_allocate_nothing(tmp_path):
    """A huge level count with no rows only shapes an empty array (it used to build names and
    buffers per level and run out of memory)."""
    m = _write(tmp_path, "x_message_1.csv", "")
    t = time.perf_counter()
    d = read_lobster(m, _write(tmp_path, "x_orderbook_5.csv", ""), levels=10**9)
    assert d.levels == 10**9 and d.orderbook.shape == (0, 4 * 10**9)
    d = read_lobster(m, _write(tmp_path, "x_orderbook_999999999.csv", ""))
    assert d.levels == 999_999_999 and d.orderbook.shape == (0, 4 * 999_999_999)
    assert time.perf_counter() - t < 1.0
    assert read_lobster(m, _write(tmp_path, "x.csv", "")).levels is None
    for name, levels in (("x_orderbook_0.csv", "0"), ("x_orderbook_99999999999.csv", "99999999999")):
        with pytest.raises(ValueError, match=rf"{name}: no rows, and its name gives levels={levels}"):
            read_lobster(m, _write(tmp_path, name, ""))
    with pytest.raises(ValueError, match=r"levels: must be an integer >= 1 and < 2\*\*31"):
        read_lobster(m, levels=2**31)


def test_replay_errors_name_the_row_and_the_limit(tmp_path):
    msgs = message_array([1, 1], 1, 100, 1)
    two = np.array([[101, 5, 99, 7, 102, 6, 98, 8], [101, 5, 99, 7, 102, 6, 98, 8]], np.int64)
    data = LobsterData(msgs, two, 2, Path("m"), Path("o"))
    with pytest.raises(ValueError, match="orderbook row 0: 2 levels on a side, more than max_levels=1"):
        Book(initial_levels=1, max_levels=1).replay_lobster(data)
    for levels in (None, 0, 1.5, 2**31):
        with pytest.raises(ValueError, match=r"data.levels: must be an integer >= 1 and < 2\*\*31"):
            Book().replay_lobster(LobsterData(msgs, two, levels, Path("m"), Path("o")))
    # Files with no rows replay nothing, whatever their (unknown) level count.
    m = _write(tmp_path, "x_message_1.csv", "")
    for ob in (_write(tmp_path, "x.csv", ""), _write(tmp_path, "x_orderbook_3.csv", HEADER)):
        stats = Book().replay_lobster(read_lobster(m, ob))
        assert stats.messages == 0 and stats.resyncs == {"initial": 0, "window_refill": 0, "outside_window": 0}


def test_replay_never_truncates_or_wraps(tmp_path):
    """A float orderbook, or values beyond int64, are refused (they used to be cast silently)."""
    msgs = message_array([1, 6], 1, 100, 1)   # a cross trade leaves the book as it was
    rows = np.array([[101, 5, 99, 7], [101, 5, 99, 7]])
    with pytest.raises(TypeError, match="data.orderbook: must hold integers, got dtype float64"):
        Book().replay_lobster(LobsterData(msgs, rows + 0.9, 1, Path("m"), Path("o")))
    big = rows.astype(np.uint64)
    big[1, 1] = 2**63
    with pytest.raises(ValueError, match=r"data.orderbook\[5\]: 9223372036854775808 does not fit int64"):
        Book().replay_lobster(LobsterData(msgs, big, 1, Path("m"), Path("o")))
    other = np.zeros(2, [("type", "i8"), ("size", "i8"), ("price", "f8"), ("direction", "i8")])
    with pytest.raises(TypeError, match="data.messages: field 'price' must hold integers"):
        Book().replay_lobster(LobsterData(other, rows, 1, Path("m"), Path("o")))
    ok = Book().replay_lobster(LobsterData(msgs, rows.astype(np.int32), 1, Path("m"), Path("o")))
    assert ok.messages == 2 and ok.exact == 1 and ok.mismatches == 0


def test_a_wide_first_row_over_blank_lines_allocates_by_the_file_size(tmp_path):
    """Buffers were newlines x first row's width: a 1.8 MB file asked for 2.9 TiB. A row of n
    fields takes 2n bytes, which bounds the rows: the row-count mismatch is reported instead."""
    book = _write(tmp_path, "X_orderbook_1.csv", "1," * 399999 + "1\n" + "\n" * 1000000)
    with pytest.raises(ValueError, match=r"X_orderbook_1.csv: 1 rows, but .* has 999"):
        read_lobster(BUNDLED / SAMPLES[1][0], book)
