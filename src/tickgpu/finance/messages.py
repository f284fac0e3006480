"""Order-book messages: the NumPy mirror of the C struct ``tg_message`` and its codes.

Message types follow LOBSTER: 1 submit, 2 partial cancel, 3 delete, 4 visible execution,
5 hidden execution and 6 cross trade (book unchanged), 7 trading halt (price -1 halt, 0 quoting
resumes, 1 trading resumes). Direction 1 is a buy order (bid side), -1 a sell order (ask side).
Prices are integer ticks (LOBSTER: dollars x 10,000).
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from tickgpu._native import ffi
from tickgpu.finance._checks import array_of

__all__ = [
    "BookError",
    "EMPTY_ASK_PRICE",
    "EMPTY_BID_PRICE",
    "LOBSTER_PRICE_SCALE",
    "MESSAGE_DTYPE",
    "MessageCode",
    "MessageType",
    "message_array",
]

#: Mirrors ``tg_message`` in csrc/tickgpu.h (checked against the compiled struct at import).
MESSAGE_DTYPE = np.dtype(
    [
        ("time", "<f8"),
        ("type", "<i4"),
        ("order_id", "<i8"),
        ("size", "<i8"),
        ("price", "<i8"),
        ("direction", "<i4"),
        ("instrument", "<i4"),
    ],
    align=True,
)

#: LOBSTER's encoding of an empty level (with size 0) in orderbook rows and snapshots.
EMPTY_ASK_PRICE = 9_999_999_999
EMPTY_BID_PRICE = -9_999_999_999
#: LOBSTER prices are dollars x 10,000.
LOBSTER_PRICE_SCALE = 10_000


def _check_layout() -> None:
    # A drift between the dtype and the C struct would silently misread every field.
    if MESSAGE_DTYPE.itemsize != ffi.sizeof("tg_message"):
        raise ImportError("MESSAGE_DTYPE does not match tg_message's size")
    for name in MESSAGE_DTYPE.names:
        if MESSAGE_DTYPE.fields[name][1] != ffi.offsetof("tg_message", name):
            raise ImportError(f"MESSAGE_DTYPE.{name} does not match tg_message's layout")


_check_layout()


class MessageType(IntEnum):
    SUBMIT = 1
    CANCEL = 2
    DELETE = 3
    EXECUTE = 4
    EXECUTE_HIDDEN = 5
    CROSS = 6
    HALT = 7


class MessageCode(IntEnum):
    """Per-message result of applying a message (mirrors ``tg_book_code``)."""

    OK = 0
    BAD_TYPE = 1
    BAD_DIRECTION = 2
    BAD_INSTRUMENT = 3
    BAD_SIZE = 4
    BAD_PRICE = 5
    NO_LEVEL = 6
    OVERSIZE = 7
    PARTIAL_EMPTIES = 8
    TOO_DEEP = 9
    NO_MEMORY = 10


_CODE_REASON = {
    MessageCode.BAD_TYPE: "unknown message type (must be 1..7)",
    MessageCode.BAD_DIRECTION: "direction must be 1 (buy) or -1 (sell)",
    MessageCode.BAD_INSTRUMENT: "instrument index out of range",
    MessageCode.BAD_SIZE: "size must be > 0 (>= 0 for trades), and a level may not overflow int64",
    MessageCode.BAD_PRICE: "price must be in (0, 2**62) ticks; a halt's price must be -1, 0 or 1",
    MessageCode.NO_LEVEL: "no level at this price on this side",
    MessageCode.OVERSIZE: "size larger than the level's size",
    MessageCode.PARTIAL_EMPTIES: "a partial cancel would remove the whole level (that is a delete)",
    MessageCode.TOO_DEEP: "a new level beyond max_levels",
    MessageCode.NO_MEMORY: "level growth failed (out of memory)",
}


class BookError(ValueError):
    """A message the book cannot apply; ``row`` is its index in the batch, ``code`` a MessageCode."""

    def __init__(self, message: str, row: int, code: MessageCode):
        super().__init__(message)
        self.row = row
        self.code = code


def message_array(type, size, price, direction, *, order_id=0, time=0.0, instrument=0) -> np.ndarray:
    """A MESSAGE_DTYPE array from per-field values (broadcast together).

    Prices are integer ticks. Every field but ``time`` must hold integers that fit its C field
    (int32 for type, direction and instrument, int64 for size, price and order_id): TypeError for
    floats or non-numbers, ValueError for a value that does not fit, naming the field and the
    first offending index (flat, C order, in that field's own array); nothing is truncated or
    wrapped. Whether the values make a valid message the book checks on apply.
    """
    fields = {"type": type, "size": size, "price": price, "direction": direction, "order_id": order_id,
              "instrument": instrument}
    checked = {}
    for name, values in fields.items():
        a = array_of(name, values)
        # An empty list is float64 to NumPy: it still holds no value to truncate.
        checked[name] = a if a.size == 0 else _integers(a, 8 * MESSAGE_DTYPE[name].itemsize, name)
    shape = np.broadcast_shapes(*(np.shape(v) for v in (*checked.values(), time)))
    out = np.zeros(shape, MESSAGE_DTYPE)
    for name, a in checked.items():
        out[name] = a
    out["time"] = time
    return out


def _integers(values, bits: int, name: str, field: str | None = None) -> np.ndarray:
    """`values` as an integer array whose every value fits int`bits`; else TypeError (not
    integers) or ValueError (a value that does not fit) naming `name`, the `field` of a
    structured array, and the first offending index (flat, C order).

    NumPy's casts truncate floats and wrap integers silently; the core must never see either.
    """
    a = array_of(name, values)
    label = f"{field} " if field else ""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if a.dtype == object:   # Python ints beyond 64 bits, or not numbers at all
        for i, v in enumerate(a.ravel()):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}[{i}]: {label}must be an integer, got {v!r}")
            if not lo <= v <= hi:
                raise ValueError(f"{name}[{i}]: {label}{v} does not fit int{bits}")
        return a.astype(np.int64)
    if not np.issubdtype(a.dtype, np.integer):
        what = f"field '{field}' " if field else ""
        raise TypeError(f"{name}: {what}must hold integers, got dtype {a.dtype}")
    if a.size and not np.can_cast(a.dtype, np.dtype(f"int{bits}")):
        flat = a.ravel()
        bad = flat > hi if np.iinfo(a.dtype).min >= 0 else (flat < lo) | (flat > hi)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name}[{i}]: {label}{flat[i]} does not fit int{bits}")
    return a
