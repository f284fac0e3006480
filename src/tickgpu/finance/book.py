"""A price-level limit order book for many instruments, on the native core.

Prices are integer ticks inside the book (LOBSTER: dollars x 10,000) and sizes are shares; the
features a user reads (mid, microprice, spread) are converted to currency at this edge by
dividing by ``price_scale``. Messages are a NumPy structured array with ``MESSAGE_DTYPE``, which
mirrors the C struct ``tg_message`` byte for byte, so a batch crosses into C without a copy.

Message types follow LOBSTER (see ``tickgpu.finance.messages``). A message that the book cannot apply consistently (a cancel larger than its level, a cancel at a
price with no level, a bad field) is never clamped: it leaves the book unchanged and is reported.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from tickgpu._native import check, ffi, lib
from tickgpu.finance._checks import array_of
from tickgpu.finance.messages import (
    _CODE_REASON,
    _integers,
    EMPTY_ASK_PRICE,
    EMPTY_BID_PRICE,
    LOBSTER_PRICE_SCALE,
    MESSAGE_DTYPE,
    BookError,
    MessageCode,
    MessageType,
    message_array,
)

__all__ = [
    "Book",
    "BookError",
    "BookFeatures",
    "EMPTY_ASK_PRICE",
    "EMPTY_BID_PRICE",
    "LOBSTER_PRICE_SCALE",
    "MESSAGE_DTYPE",
    "MessageCode",
    "MessageType",
    "ReplayStats",
    "ResyncReason",
    "TradingState",
    "message_array",
]


class TradingState(IntEnum):
    TRADING = 0
    HALTED = 1
    QUOTING = 2


class ResyncReason(IntEnum):
    """Why a LOBSTER replay took a row from the orderbook file (mirrors ``tg_resync_reason``)."""

    NONE = 0
    INITIAL = 1
    WINDOW_REFILL = 2
    OUTSIDE_WINDOW = 3
    MISMATCH = 4


#: Most buffer sets ``features(reuse=True)`` keeps, one per depth asked for (a tick loop asks for
#: one or two).
_REUSED_SETS = 16


@dataclass(frozen=True)
class BookFeatures:
    """Order-book features, one row per state (per message from ``Book.apply``).

    Attributes
    ----------
    mid : float64, currency
        (best bid + best ask) / 2; NaN when a side is empty.
    microprice : float64, currency
        (bid * ask size + ask * bid size) / (bid size + ask size) at the best levels; NaN when a
        side is empty.
    spread : float64, currency
        best ask - best bid; NaN when a side is empty, negative when the book is crossed.
    imbalance : float64 in [-1, 1]
        (bid size - ask size) / (bid size + ask size) at the best levels, an empty side counting 0;
        NaN when both sides are empty.
    depth_imbalance : float64 in [-1, 1]
        The same over the ``levels`` best levels of each side.
    bid_depth, ask_depth : int64, shares, shape (..., levels)
        Size at each of the ``levels`` best levels, best first, 0 beyond the book.
    levels : int
    codes : int8 MessageCode per message, or None
        Set by ``Book.apply``: a rejected message's row describes the unchanged book.
    """

    mid: np.ndarray
    microprice: np.ndarray
    spread: np.ndarray
    imbalance: np.ndarray
    depth_imbalance: np.ndarray
    bid_depth: np.ndarray
    ask_depth: np.ndarray
    levels: int
    codes: np.ndarray | None = None


@dataclass(frozen=True)
class ReplayStats:
    """What a LOBSTER replay found.

    Attributes
    ----------
    messages : int
        Rows replayed.
    exact : int
        Transitions (row i-1 + message i -> row i) reproduced from the message alone.
    resyncs : dict[str, int]
        Rows taken from the orderbook file because a level-L file cannot carry them, by reason:
        ``initial`` (row 0: the initial book is not in the message file), ``window_refill`` (a
        level inside the window emptied and one from outside it moved in), ``outside_window`` (a
        cancel/delete/execution beyond a full window).
    mismatches : int
        Any other disagreement: a real inconsistency between the two files.
    mismatch_rows : int64 array
        Row indices of the mismatches.
    row_reasons : int8 array
        ResyncReason of every row.
    """

    messages: int
    exact: int
    resyncs: dict[str, int]
    mismatches: int
    mismatch_rows: np.ndarray
    row_reasons: np.ndarray = field(repr=False)


def _side_levels(values, name: str) -> np.ndarray:
    """One side's `values` (prices or sizes, best first) as a 1-D C-contiguous int64 array: a single
    value is one level, an empty array of any dtype no level; more dimensions are refused rather
    than flattened."""
    a = array_of(name, values)
    if a.ndim > 1:
        raise ValueError(f"{name}: must be one-dimensional (one value per level, best first), got shape {a.shape}")
    if a.size == 0:     # [] is float64 to NumPy: still no level
        return np.zeros(0, np.int64)
    return np.ascontiguousarray(_integers(a, 64, name), np.int64).reshape(-1)


def _nonnegative_int(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: must be >= 0, got {value}")
    return int(value)


def _level_count(name: str, value) -> int:
    """A count of levels: the core takes it as an int32."""
    value = _nonnegative_int(name, value)
    if value >= 2**31:
        raise ValueError(f"{name}: must be < 2**31, got {value}")
    return value


def _price_scale(value) -> float:
    """``price_scale`` as the float64 the features are divided by: finite, > 0, and large enough
    that the largest price (2**62 ticks) divided by it is still finite."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"price_scale: must be a real number, got {value!r}")
    try:
        with np.errstate(over="ignore"):     # a longdouble beyond float64's range becomes inf
            scale = float(value)
    except OverflowError:                    # a Python int beyond float64's range
        scale = math.inf
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"price_scale: must be finite and > 0, got {value!r}")
    if not math.isfinite(_MAX_PRICE_TICKS / scale):
        raise ValueError(f"price_scale: {value!r} is so small that prices up to 2**62 ticks divided by it "
                         f"overflow float64 (must be >= {_MAX_PRICE_TICKS / sys.float_info.max!r})")
    return scale


class Book:
    """Aggregated price levels per side for ``n_instruments`` instruments.

    Parameters
    ----------
    n_instruments : int
        Instruments are addressed by index ``0 .. n_instruments - 1`` (the messages'
        ``instrument`` field).
    price_scale : int or float
        Ticks per currency unit, used only to convert features (LOBSTER: 10,000); TypeError if
        not a real number, ValueError if not finite and > 0 as a float64, or so small that a price
        (up to 2**62 ticks) divided by it overflows.
    initial_levels, max_levels : int
        Levels preallocated per side, and the most a side may hold (a new level beyond it is
        rejected with ``MessageCode.TOO_DEEP``).

    Raises
    ------
    MemoryError
        If the levels preallocated up front (about 32 bytes per level per instrument) are more
        than the machine's memory, or the allocation fails; the message names n_instruments and
        initial_levels.
    """

    def __init__(self, n_instruments: int = 1, *, price_scale=LOBSTER_PRICE_SCALE,
                 initial_levels: int = 64, max_levels: int = 1 << 20):
        n_instruments = _nonnegative_int("n_instruments", n_instruments)
        if not 1 <= n_instruments < 2**31:
            raise ValueError(f"n_instruments: must be in [1, 2**31), got {n_instruments}")
        initial_levels = _nonnegative_int("initial_levels", initial_levels)
        max_levels = _nonnegative_int("max_levels", max_levels)
        if not 1 <= initial_levels <= max_levels < 2**31:
            raise ValueError(
                f"initial_levels, max_levels: need 1 <= initial_levels <= max_levels < 2**31, "
                f"got {initial_levels}, {max_levels}")
        scale = _price_scale(price_scale)
        # The core preallocates initial_levels per side of every instrument: refuse what the
        # machine cannot hold instead of letting the kernel kill the process.
        need = n_instruments * (_INSTRUMENT_BYTES + 2 * initial_levels * _LEVEL_BYTES)
        if need > 1 << 30 and need > _physical_memory():
            raise MemoryError(
                f"Book: n_instruments={n_instruments} with initial_levels={initial_levels} per side need "
                f"{need / 2**30:.1f} GiB up front, more than this machine's {_physical_memory() / 2**30:.1f} GiB "
                "of memory")
        out = ffi.new("tg_book **")
        status = lib.tg_book_create(n_instruments, initial_levels, max_levels, out)
        if status == lib.TG_ENOMEM:
            raise MemoryError(f"Book: out of memory allocating n_instruments={n_instruments} with "
                              f"initial_levels={initial_levels} per side ({need / 2**30:.2f} GiB)")
        check(status, "tg_book_create")
        self._book = ffi.gc(out[0], lib.tg_book_destroy)
        self.n_instruments = n_instruments
        self.price_scale = scale
        self.max_levels = max_levels
        # Preallocated so that a call allocates nothing it can avoid: apply_one's code, the counters.
        self._apply_fields = lib.tg_book_apply_fields
        self._one_code = ffi.new("int8_t *")
        self._n_rejected = ffi.new("int64_t *")
        self._first_rejected = ffi.new("int64_t *")
        self._reused_features: dict[int, _FeatureBuffers] = {}
        self._step = lib.tg_book_step
        self._step_resynced = ffi.new("int32_t *")

    # ---- messages ------------------------------------------------------------------------

    def apply(self, messages, *, features: int = 0, on_error: str = "raise"):
        """Apply a batch of messages in order, each to its own instrument.

        Parameters
        ----------
        messages : MESSAGE_DTYPE array (any shape; read in C order) or one record
            Another structured dtype with the same field names is converted; a field holding
            floats raises TypeError, a value that does not fit its C field ValueError (naming
            the field and the index): nothing is truncated or wrapped.
        features : int
            If > 0, also compute the features over that many levels after every message.
        on_error : "raise" or "skip"
            "raise": the first rejected message raises BookError (naming its index and reason);
            the messages before it stay applied, it and those after it are not.
            "skip": rejected messages leave the book unchanged and processing goes on; their
            codes say why.

        Returns
        -------
        int8 array of MessageCode values (``features == 0``), or BookFeatures with ``codes``.
        """
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error: must be 'raise' or 'skip', got {on_error!r}")
        features = _level_count("features", features)
        msgs = self._as_messages(messages)
        n = msgs.size
        codes = np.zeros(n, np.int8)
        fout = None
        if features:
            fout = _FeatureBuffers(n, features)
        stop = on_error == "raise"
        cmsgs = ffi.from_buffer("tg_message[]", msgs) if n else ffi.NULL
        status = lib.tg_book_apply(self._book, n, cmsgs, int(stop), ffi.from_buffer("int8_t[]", codes),
                                   fout.c if fout else ffi.NULL, self._n_rejected, self._first_rejected)
        if status == lib.TG_ENOMEM:
            raise MemoryError("Book.apply: level growth failed")
        if status not in (lib.TG_OK, lib.TG_EDATA):
            check(status, "tg_book_apply")
        if status == lib.TG_EDATA and stop:
            row = self._first_rejected[0]
            raise self._error(msgs.reshape(-1)[row], row, MessageCode(codes[row]), "messages")
        if fout is None:
            return codes
        return fout.result(self.price_scale, codes)

    def apply_one(self, type: int, size: int, price: int, direction: int, instrument: int = 0) -> None:
        """Apply one message (tick-by-tick use; no array is built). Raises BookError if rejected.

        ``price`` is in integer ticks (a halt's -1/0/1 for type 7). On rejection the book is
        unchanged. Order id and time are not needed: the book aggregates levels.
        """
        try:
            status = self._apply_fields(self._book, instrument, type, size, price, direction, self._one_code)
        except (TypeError, OverflowError):
            raise _field_error("Book.apply_one", type, size, price, direction, instrument) from None
        if status:
            code = MessageCode(self._one_code[0])
            if code == MessageCode.NO_MEMORY:
                raise MemoryError("Book.apply_one: level growth failed")
            rec = message_array(int(type), int(size), int(price), int(direction), instrument=int(instrument))[()]
            raise self._error(rec, 0, code, "message")

    def step(self, type: int, size: int, price: int, direction: int, row=None, instrument: int = 0):
        """One message of a tick-by-tick replay, in one native call: apply it, check the book's
        window against the LOBSTER orderbook row that follows it (if given), set the book from the
        row where they differ, and compute the level-1 features.

        Parameters
        ----------
        type, size, price, direction : int
            The message's fields, as for :meth:`apply_one` (price in ticks).
        row : numpy.ndarray, optional
            The orderbook file's row after this message: one-dimensional, C-contiguous int64 of
            4 * L values (ask price, ask size, bid price, bid size per level). An empty level of
            the row must be empty in the book; its price is not compared. Levels beyond the row
            are dropped when the book is set from it.
        instrument : int

        Returns
        -------
        (BookFeatures, MessageCode, bool)
            The features after the message, as ``features(reuse=True)`` gives them (views the
            next such call overwrites); the message's code (a rejected message is not raised, as
            replays count them: the book stays as it was); whether the book was set from the row.

        Raises
        ------
        TypeError, ValueError
            A `row` that is not such an array, or not a valid book (the book is then as the
            message left it). MemoryError if level growth failed. A message field or `instrument`
            that is not an integer (floats, bools) raises TypeError, one that does not fit its C
            field OverflowError, naming it, before anything is applied.
        """
        if row is None:
            levels, ptr = 0, ffi.NULL
        else:
            # (`type` is the message's field here.)
            if not isinstance(row, np.ndarray) or row.dtype != np.int64 or row.ndim != 1 or not row.flags.c_contiguous:
                got = (f"dtype {row.dtype}, shape {row.shape}" if isinstance(row, np.ndarray)
                       else row.__class__.__name__)
                raise TypeError("row: must be a one-dimensional C-contiguous int64 NumPy array (4 * levels "
                                f"values), got {got}")
            if row.size == 0 or row.size % 4:
                raise ValueError(f"row: must hold 4 * levels values (levels >= 1), got {row.size}")
            levels, ptr = row.size // 4, ffi.from_buffer("int64_t[]", row)
        # Python ints (the per-tick case) are answered by their class alone; anything else is
        # looked at for a bool, which the native call would take as 0 / 1.
        if (type.__class__ is not _int or size.__class__ is not _int or price.__class__ is not _int
                or direction.__class__ is not _int or instrument.__class__ is not _int):
            _refuse_bools("Book.step", type, size, price, direction, instrument)
        buf = self._reused_buffer(1)
        try:
            status = self._step(self._book, instrument, type, size, price, direction, levels, ptr, buf.c,
                                self._one_code, self._step_resynced)
        except (TypeError, OverflowError):
            raise _field_error("Book.step", type, size, price, direction, instrument) from None
        if status:
            if status == lib.TG_ENOMEM:
                raise MemoryError("Book.step: level growth failed")
            if status == lib.TG_ERANGE:
                self._instrument(instrument)   # a bad instrument, else the row's levels
            self._row_status(status, row, "tg_book_step")
        return self._reused_result(buf), _CODES[self._one_code[0]], bool(self._step_resynced[0])

    def _as_messages(self, messages, name: str = "messages") -> np.ndarray:
        """`messages` as a C-contiguous MESSAGE_DTYPE array. Another structured dtype is converted
        field by field (missing ``instrument``, ``time``, ``order_id`` are 0): integer fields must
        hold integers that fit the C field (TypeError / ValueError naming the field and index
        otherwise), as for `apply_one`; ``time`` any real number."""
        if isinstance(messages, np.void):
            messages = np.array(messages)
        if not isinstance(messages, np.ndarray):
            raise TypeError(f"{name}: must be a MESSAGE_DTYPE array, got {type(messages).__name__}")
        if messages.dtype != MESSAGE_DTYPE:
            names = messages.dtype.names or ()
            if set(MESSAGE_DTYPE.names) - {"instrument", "time", "order_id"} - set(names):
                raise TypeError(f"{name}: must have dtype MESSAGE_DTYPE, got {messages.dtype}")
            converted = np.zeros(messages.shape, MESSAGE_DTYPE)
            for f in names:
                if f not in MESSAGE_DTYPE.names:
                    continue
                if messages.dtype[f].shape:
                    raise TypeError(f"{name}: field '{f}' must hold one value per message, got dtype "
                                    f"{messages.dtype[f]}")
                if f == "time":
                    dt = messages.dtype[f]
                    if not (np.issubdtype(dt, np.integer) or np.issubdtype(dt, np.floating)):
                        raise TypeError(f"{name}: field 'time' must hold real numbers, got dtype {dt}")
                    converted[f] = messages[f]
                else:
                    converted[f] = _integers(messages[f], 8 * MESSAGE_DTYPE[f].itemsize, name, f)
            messages = converted
        return np.ascontiguousarray(messages)

    def _error(self, rec, row: int, code: MessageCode, what: str) -> BookError:
        where = f"{what}[{row}]" if what == "messages" else what
        inst = int(rec["instrument"])
        if code == MessageCode.BAD_INSTRUMENT:
            detail = f"instrument {inst} out of range [0, {self.n_instruments})"
        elif code == MessageCode.BAD_TYPE:
            detail = f"unknown message type {int(rec['type'])} (must be 1..7)"
        else:
            detail = _CODE_REASON[code]
        return BookError(
            f"{where}: {detail} ({code.name}): type {int(rec['type'])}, instrument {inst}, "
            f"price {int(rec['price'])}, size {int(rec['size'])}, direction {int(rec['direction'])}",
            row, code)

    # ---- state ---------------------------------------------------------------------------

    def _instrument(self, instrument) -> int:
        if isinstance(instrument, (bool, np.bool_)) or not isinstance(instrument, (int, np.integer)):
            raise TypeError(f"instrument: must be an integer, got {instrument!r}")
        if not 0 <= instrument < self.n_instruments:
            raise IndexError(f"instrument: {instrument} out of range [0, {self.n_instruments})")
        return int(instrument)

    def snapshot(self, levels: int, instrument: int = 0) -> np.ndarray:
        """The ``levels`` best levels: int64 array (levels, 4) of ask price, ask size, bid price,
        bid size per level, best first; prices in ticks; empty levels as LOBSTER encodes them
        (EMPTY_ASK_PRICE / EMPTY_BID_PRICE, size 0). ``.ravel()`` is a LOBSTER orderbook row.
        MemoryError, naming `levels`, where the array (32 bytes a level) is more than the machine's
        memory: the core writes every level, so it would be really used."""
        levels = _level_count("levels", levels)
        instrument = self._instrument(instrument)
        need = 32 * levels
        if need > 1 << 30 and need > _physical_memory():   # (a syscall: not for every tick's small arrays)
            raise MemoryError(f"snapshot: {levels} levels need {need / 2**30:.1f} GiB, more than this machine's "
                              f"{_physical_memory() / 2**30:.1f} GiB of memory")
        out = np.empty((levels, 4), np.int64)
        p = ffi.from_buffer("int64_t[]", out)
        check(lib.tg_book_snapshot(self._book, instrument, levels, p, p + 1, p + 2, p + 3, 4),
              "tg_book_snapshot")
        return out

    def features(self, levels: int = 1, instrument: int = 0, *, reuse: bool = False) -> BookFeatures:
        """Features of one instrument's current state (0-d arrays; depths of shape (levels,)).

        With ``reuse=True`` the arrays are views of buffers this book keeps per `levels` and
        overwrites on the next ``reuse=True`` call: no allocation, for tick-by-tick loops that read
        the values at once. Copy what must outlive the next call.
        """
        levels = _level_count("levels", levels)
        instrument = self._instrument(instrument)
        if reuse:
            buf = self._reused_buffer(levels)
            buf.block.fill(np.nan)
            check(lib.tg_book_features_now(self._book, instrument, buf.c), "tg_book_features_now")
            return self._reused_result(buf)
        buf = _FeatureBuffers(1, levels)
        check(lib.tg_book_features_now(self._book, instrument, buf.c), "tg_book_features_now")
        return buf.result(self.price_scale, None, scalar=True)

    def _reused_buffer(self, levels: int) -> _FeatureBuffers:
        """The buffers ``features(reuse=True)`` and `step` overwrite, one set per `levels`."""
        buf = self._reused_features.get(levels)
        if buf is None:
            if len(self._reused_features) >= _REUSED_SETS:
                # A loop over many depths would keep a set for each: the oldest goes (views of it
                # that a caller still holds stay valid; they are just no longer overwritten).
                del self._reused_features[next(iter(self._reused_features))]
            buf = self._reused_features[levels] = _FeatureBuffers(1, levels)
        return buf

    def _reused_result(self, buf: _FeatureBuffers) -> BookFeatures:
        """`buf`'s record of views, after the core wrote it: one BookFeatures made once, the prices
        rescaled in place on every call (the 0-d views and the frozen record cost more than the
        book's own work)."""
        buf.prices /= self.price_scale
        if buf.reused is None:
            buf.reused = buf.result(1.0, None, scalar=True)
        return buf.reused

    def _row_status(self, status: int, row, what: str) -> None:
        """Raise for what the core said of an orderbook row (tg_book_sync_row's codes)."""
        if status == lib.TG_EDATA:
            raise ValueError(f"row: not a valid book: {_explain_bad_row(row)}")
        if status == lib.TG_ERANGE:
            raise ValueError(f"row: more than max_levels={self.max_levels} levels")
        check(status, what)

    def sync_from_orderbook_row(self, row, instrument: int = 0) -> None:
        """Set both sides from a LOBSTER orderbook row (4 * L int64 values: ask price, ask size,
        bid price, bid size per level, prices in ticks). Levels beyond the row are dropped.
        Raises ValueError, leaving the book unchanged, if the row is not a valid book. An empty row
        (of any dtype: ``[]`` is float64 to NumPy) has no level: it empties both sides."""
        instrument = self._instrument(instrument)
        row = array_of("row", row)
        if row.ndim != 1 or row.size % 4:
            raise ValueError(f"row: must be one row of 4 * levels values, got shape {row.shape}")
        row = np.zeros(0, np.int64) if row.size == 0 else np.ascontiguousarray(_integers(row, 64, "row"), np.int64)
        status = lib.tg_book_sync_row(self._book, instrument, row.size // 4, ffi.from_buffer("int64_t[]", row))
        self._row_status(status, row, "tg_book_sync_row")

    def set_side(self, direction: int, prices, sizes, instrument: int = 0) -> None:
        """Replace one side (1 bid, -1 ask) with levels best first (prices in ticks, size 0 marks an
        empty level and only empty levels may follow it). `prices` and `sizes` are one-dimensional
        (a single value is one level; empty clears the side). Raises ValueError on an invalid side
        or arrays of more dimensions, TypeError for prices or sizes that are not integers (a float
        is never truncated)."""
        instrument = self._instrument(instrument)
        if isinstance(direction, (bool, np.bool_)) or not isinstance(direction, (int, np.integer)):
            raise TypeError(f"direction: must be the integer 1 (bid) or -1 (ask), got {direction!r}")
        if direction not in (1, -1):
            raise ValueError(f"direction: must be 1 (bid) or -1 (ask), got {direction!r}")
        prices, sizes = _side_levels(prices, "prices"), _side_levels(sizes, "sizes")
        if prices.shape != sizes.shape:
            raise ValueError(f"prices, sizes: lengths differ ({prices.size} and {sizes.size})")
        status = lib.tg_book_set_side(self._book, instrument, direction, prices.size,
                                      ffi.from_buffer("int64_t[]", prices), ffi.from_buffer("int64_t[]", sizes), 1)
        if status == lib.TG_EDATA:
            row = np.zeros(4 * prices.size, np.int64)
            row[0 if direction == -1 else 2::4] = prices
            row[1 if direction == -1 else 3::4] = sizes
            raise ValueError(f"prices, sizes: not a valid side: {_explain_bad_row(row)}")
        if status == lib.TG_ERANGE:
            raise ValueError(f"prices: more than max_levels={self.max_levels} levels")
        check(status, "tg_book_set_side")

    def clear(self, instrument: int | None = None) -> None:
        """Empty one instrument's book (all with None) and set it trading."""
        inst = -1 if instrument is None else self._instrument(instrument)
        check(lib.tg_book_clear(self._book, inst), "tg_book_clear")

    def trading_state(self, instrument: int = 0) -> TradingState:
        instrument = self._instrument(instrument)
        state = ffi.new("int32_t *")
        check(lib.tg_book_info(self._book, instrument, ffi.NULL, ffi.NULL, state), "tg_book_info")
        return TradingState(state[0])

    def level_counts(self, instrument: int = 0) -> tuple[int, int]:
        """Number of (bid, ask) levels the book holds for an instrument."""
        instrument = self._instrument(instrument)
        nb, na = ffi.new("int32_t *"), ffi.new("int32_t *")
        check(lib.tg_book_info(self._book, instrument, nb, na, ffi.NULL), "tg_book_info")
        return nb[0], na[0]

    # ---- LOBSTER ---------------------------------------------------------------------------

    def replay_lobster(self, data, instrument: int = 0) -> ReplayStats:
        """Replay a LobsterData (messages and orderbook) on one instrument and check every row.

        Message i is applied to the state of row i-1 and the result compared with row i's
        L-level window. Where a level-L file cannot carry the information (the initial book; a
        level refilled from outside the window; a cancel beyond a full window) the book is set
        from row i and the resync counted; any other disagreement is a mismatch (also resynced,
        so the replay goes on). The book ends holding the last row's window. The messages'
        ``instrument`` field is ignored. Zero messages replay nothing (``data.levels`` may then
        be None: an empty orderbook file of unknown width).

        Raises
        ------
        TypeError, ValueError
            `data` without messages, orderbook and levels (TypeError); messages or orderbook
            values that are not integers fitting their C fields (never
            truncated or wrapped); an orderbook shape other than (messages, 4 * levels); levels
            not in 1 .. 2**31 - 1; an orderbook row that is not a valid book, or holds more than
            ``max_levels`` levels on a side (naming the row; the rows before it stay replayed).
        """
        instrument = self._instrument(instrument)
        if not (hasattr(data, "messages") and hasattr(data, "orderbook") and hasattr(data, "levels")):
            raise TypeError(f"data: must be a LobsterData (messages, orderbook, levels: read_lobster's result), "
                            f"got {type(data).__name__}")
        if data.orderbook is None:
            raise ValueError("data: replay needs the orderbook file (read_lobster(..., orderbook_path))")
        msgs = self._as_messages(data.messages, "data.messages").reshape(-1)
        book_rows = np.ascontiguousarray(_integers(data.orderbook, 64, "data.orderbook"), np.int64)
        n = msgs.size
        if n == 0 and book_rows.shape[:1] == (0,):
            # Nothing to replay, so no level count is needed.
            return ReplayStats(0, 0, {r.name.lower(): 0 for r in _RESYNC_COUNTED}, 0,
                               np.zeros(0, np.int64), np.zeros(0, np.int8))
        levels = data.levels
        if (isinstance(levels, (bool, np.bool_)) or not isinstance(levels, (int, np.integer))
                or not 1 <= levels < 2**31):
            raise ValueError(f"data.levels: must be an integer >= 1 and < 2**31 (levels per side of the "
                             f"orderbook), got {levels!r}")
        levels = int(levels)
        if book_rows.shape != (n, 4 * levels):
            raise ValueError(f"data: orderbook shape {book_rows.shape}, expected ({n}, {4 * levels}) for "
                             f"levels={levels} (row i is the book after message i)")
        reasons = np.zeros(n, np.int8)
        stats = ffi.new("tg_replay_stats *")
        status = lib.tg_lobster_replay(
            self._book, instrument, n, ffi.from_buffer("tg_message[]", msgs) if n else ffi.NULL, levels,
            ffi.from_buffer("int64_t[]", book_rows) if n else ffi.NULL, ffi.from_buffer("int8_t[]", reasons),
            stats)
        if status == lib.TG_EDATA:
            row = stats.first_mismatch
            raise ValueError(f"orderbook row {row}: not a valid book: {_explain_bad_row(book_rows[row])}")
        if status == lib.TG_ERANGE:   # the instrument was checked: the row's levels
            row = stats.first_mismatch
            depth = max(np.count_nonzero(book_rows[row, 1::4]), np.count_nonzero(book_rows[row, 3::4]))
            raise ValueError(f"orderbook row {row}: {depth} levels on a side, more than max_levels="
                             f"{self.max_levels}")
        if status == lib.TG_ENOMEM:
            raise MemoryError("Book.replay_lobster: level growth failed")
        check(status, "tg_lobster_replay")
        return ReplayStats(
            messages=int(stats.messages),
            exact=int(stats.exact),
            resyncs={r.name.lower(): int(stats.resyncs[r]) for r in _RESYNC_COUNTED},
            mismatches=int(stats.mismatches),
            mismatch_rows=np.flatnonzero(reasons == ResyncReason.MISMATCH),
            row_reasons=reasons,
        )


# What tg_book_create allocates per instrument (book_internal.h): a tg_instrument, and
# initial_levels tg_levels (int64 key, int64 size) per side.
_INSTRUMENT_BYTES = 40
_LEVEL_BYTES = 16
# Prices are in (0, 2**62) ticks (the core refuses others).
_MAX_PRICE_TICKS = float(2**62)

# The resyncs ReplayStats counts by reason (a mismatch is counted on its own).
_RESYNC_COUNTED = (ResyncReason.INITIAL, ResyncReason.WINDOW_REFILL, ResyncReason.OUTSIDE_WINDOW)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):   # not POSIX: no limit known
        return 1 << 62


class _FeatureBuffers:
    """Output arrays for n states and the tg_book_features struct pointing at them."""

    SCALARS = ("mid", "microprice", "spread", "imbalance", "depth_imbalance")   # the prices first

    def __init__(self, n: int, levels: int):
        self.levels = levels
        # The core writes every level of every row, so the depth arrays are really used: refuse
        # what the machine cannot hold instead of letting the kernel kill the process.
        need = 2 * 8 * n * levels
        if need > 1 << 30 and need > _physical_memory():   # (a syscall: not for every tick's small arrays)
            raise MemoryError(f"features: {levels} levels for {n} states need {need / 2**30:.1f} GiB of depth "
                              f"arrays, more than this machine's {_physical_memory() / 2**30:.1f} GiB of memory")
        # NaN, not garbage, in a row the core leaves unwritten (a message for no valid instrument).
        # One block, a row per feature: the three prices are one slice, rescaled in one operation.
        self.block = np.full((len(self.SCALARS), n), np.nan)
        self.prices = self.block[:3]
        self.scalars = dict(zip(self.SCALARS, self.block))
        self.reused = None     # Book.features(reuse=True)'s record of views into these buffers
        self.bid = np.zeros((n, levels), np.int64)
        self.ask = np.zeros((n, levels), np.int64)
        c = ffi.new("tg_book_features *")
        c.levels = levels
        for k, a in self.scalars.items():
            setattr(c, k, ffi.from_buffer("double[]", a))
        c.bid_size = ffi.from_buffer("int64_t[]", self.bid)
        c.ask_size = ffi.from_buffer("int64_t[]", self.ask)
        self.c = c

    def result(self, price_scale: float, codes, scalar: bool = False) -> BookFeatures:
        s = self.scalars
        if price_scale != 1.0:
            self.prices /= price_scale
        pick = (lambda a: a.reshape(a.shape[1:])) if scalar else (lambda a: a)
        return BookFeatures(
            mid=pick(s["mid"]), microprice=pick(s["microprice"]), spread=pick(s["spread"]),
            imbalance=pick(s["imbalance"]), depth_imbalance=pick(s["depth_imbalance"]),
            bid_depth=pick(self.bid), ask_depth=pick(self.ask), levels=self.levels, codes=codes)


# The C types of a message's fields in tg_book_apply_fields / tg_book_step.
_FIELD_BITS = (("type", 32), ("size", 64), ("price", 64), ("direction", 32), ("instrument", 32))
_int = int
# MessageCode by value (the core's codes are 0 .. 10): a tuple index, where MessageCode(c) would cost
# more than the rest of a step's Python.
_CODES = tuple(MessageCode)
assert all(c.value == i for i, c in enumerate(_CODES))


def _refuse_bools(where: str, *values) -> None:
    """TypeError naming the first message field (in `_FIELD_BITS` order) that is a bool: the native
    call would take True / False as 1 / 0 (a submit, a buy), where a flag was passed for a number."""
    for (name, _), v in zip(_FIELD_BITS, values):
        if isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{where}: {name} must be an integer, got {v!r}")


def _field_error(where: str, *values) -> Exception:
    """The exception for a message field the native call could not take, naming the field."""
    for (name, bits), v in zip(_FIELD_BITS, values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            return TypeError(f"{where}: {name} must be an integer, got {v!r}")
        if not -(1 << (bits - 1)) <= int(v) < 1 << (bits - 1):
            return OverflowError(f"{where}: {name} {int(v)} does not fit int{bits}")
    return TypeError(f"{where}: bad arguments {values!r}")


def _explain_bad_row(row: np.ndarray) -> str:
    """Why a LOBSTER orderbook row is not a book (called only after the C core rejected it)."""
    for side, off, better in (("ask", 0, np.less), ("bid", 2, np.greater)):
        price, size = row[off::4], row[off + 1::4]
        seen_empty = False
        for k in range(price.size):
            if size[k] < 0:
                return f"{side} level {k + 1}: negative size {size[k]}"
            if size[k] == 0:
                seen_empty = True
                continue
            if seen_empty:
                return f"{side} level {k + 1}: occupied after an empty level"
            if not 0 < price[k] < 2**62:
                return f"{side} level {k + 1}: price {price[k]} outside (0, 2**62)"
            if k and not better(price[k - 1], price[k]):
                return f"{side} level {k + 1}: price {price[k]} not worse than level {k}'s {price[k - 1]}"
    return "rejected by the native core"
