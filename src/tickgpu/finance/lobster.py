"""Reading LOBSTER message and orderbook files (lobsterdata.com's academic format).

Message file: one row per event, columns time (seconds after midnight), type (1..7), order id,
size (shares), price (dollars x 10,000, an integer) and direction (1 buy, -1 sell). Orderbook file:
row i is the book after message i, 4 columns per level (ask price, ask size, bid price, bid size),
empty levels as 9999999999 / -9999999999 with size 0. Files come with or without a header row.

Prices stay integer ticks here; convert to currency (ticks / 10,000) only at the edge, as
``Book`` features do. Parsing is done by a strict C parser in the native core: a malformed row
raises ValueError naming the file, line and column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tickgpu._native import check, ffi, lib
from tickgpu.finance.messages import MESSAGE_DTYPE, MessageType

__all__ = ["LobsterData", "read_lobster", "MESSAGE_COLUMNS"]

MESSAGE_COLUMNS = ("time", "type", "order_id", "size", "price", "direction")
_MESSAGE_IS_FLOAT = np.array([1, 0, 0, 0, 0, 0], np.uint8)
_CSV_REASON = {
    lib.TG_CSV_NUMBER: "not a number",
    lib.TG_CSV_RANGE: "integer out of the int64 range",
}
_CSV_FLOAT_RANGE = "number beyond the float64 range"   # TG_CSV_RANGE in a float column (time)
# The most levels per side: the native replay takes the count as an int32.
_MAX_LEVELS = 2**31 - 1


@dataclass(frozen=True)
class LobsterData:
    """A LOBSTER message file and, optionally, its orderbook file.

    Attributes
    ----------
    messages : structured array of MESSAGE_DTYPE, shape (n,)
        ``instrument`` is 0; prices in ticks (dollars x 10,000).
    orderbook : int64 array (n, 4 * levels) or None
        Row i is the book after message i; prices in ticks, sizes in shares.
    levels : int or None
        Levels per side in the orderbook file (None when unknown: no orderbook and no
        ``levels=`` given).
    message_path, orderbook_path : Path (orderbook_path None without an orderbook)
    """

    messages: np.ndarray
    orderbook: np.ndarray | None
    levels: int | None
    message_path: Path
    orderbook_path: Path | None

    price_scale = 10_000   # ticks per dollar

    def __len__(self) -> int:
        return len(self.messages)


def read_lobster(message_path, orderbook_path=None, *, levels: int | None = None) -> LobsterData:
    """Read a LOBSTER message file and (optionally) its orderbook file.

    Parameters
    ----------
    message_path, orderbook_path : str or Path
    levels : int, optional
        Expected levels per side (1 .. 2**31 - 1); checked against the orderbook's width.
        Without it the width decides (or, for an empty orderbook file, the ``_orderbook_<L>`` in
        its name; None when the name has none).

    Raises
    ------
    ValueError
        Naming the file, line and column: a wrong number of fields, a non-numeric field (NaN
        and inf included), a time beyond the float64 range, an unknown message type, a
        direction other than 1/-1, a negative size; an orderbook width that is not a multiple
        of 4 or disagrees with ``levels``; a message/orderbook row-count mismatch; an empty
        orderbook file whose name gives a level count outside 1 .. 2**31 - 1. An empty file
        (or one holding only a header) gives zero rows. The first non-blank line is a header
        only when every field of it is a name (holds a letter and is no number); any other
        line is data, and parsed as such.
    """
    if levels is not None:
        if (isinstance(levels, bool) or not isinstance(levels, (int, np.integer))
                or not 1 <= levels <= _MAX_LEVELS):
            raise ValueError(f"levels: must be an integer >= 1 and < 2**31, got {levels!r}")
        levels = int(levels)
    message_path = Path(message_path)
    text, first_line = _read_body(message_path)
    flo, ints = _parse(text, first_line, message_path, MESSAGE_COLUMNS, _MESSAGE_IS_FLOAT)
    msgs = np.zeros(len(flo), MESSAGE_DTYPE)
    msgs["time"] = flo[:, 0]
    _check_messages(ints, message_path, text, first_line)
    for c, name in enumerate(MESSAGE_COLUMNS[1:]):
        msgs[name] = ints[:, c]

    if orderbook_path is None:
        return LobsterData(msgs, None, levels, message_path, None)
    orderbook_path = Path(orderbook_path)
    text, first_line = _read_body(orderbook_path)
    width = _first_row_width(text)
    if width is None:
        # No rows: the level count only shapes an empty array, so nothing is built per level
        # (a name promising 10**9 levels costs nothing).
        if levels is None:
            levels = _levels_in_name(orderbook_path)
        book = np.zeros((0, 4 * levels if levels else 0), np.int64)
    else:
        if width % 4:
            raise ValueError(f"{orderbook_path}, line {first_line}: {width} columns, not a multiple of 4 "
                             "(ask price, ask size, bid price, bid size per level)")
        if levels is not None and width != 4 * levels:
            raise ValueError(f"{orderbook_path}, line {first_line}: {width} columns, expected "
                             f"{4 * levels} for levels={levels}")
        levels = width // 4
        # As many names as the first row has fields: bounded by the file's own size.
        names = tuple(f"{k}_{lv}" for lv in range(1, levels + 1)
                      for k in ("ask_price", "ask_size", "bid_price", "bid_size"))
        _, book = _parse(text, first_line, orderbook_path, names, np.zeros(width, np.uint8))
    if len(book) != len(msgs):
        raise ValueError(f"{orderbook_path}: {len(book)} rows, but {message_path} has {len(msgs)} "
                         "(row i of the orderbook is the book after message i)")
    if len(book):
        bad = book[:, 1::2] < 0
        if bad.any():
            row, col = np.argwhere(bad)[0]
            _fail(orderbook_path, text, first_line, row, 2 * col + 1, names,
                  f"negative size {book[row, 2 * col + 1]}")
    return LobsterData(msgs, book, levels, message_path, orderbook_path)


def _levels_in_name(path: Path) -> int | None:
    """The L of a LOBSTER orderbook file name ``..._orderbook_<L>.csv``; None without one."""
    m = re.search(r"_orderbook_(\d+)\.csv$", path.name)
    if m is None:
        return None
    digits = m.group(1)
    if len(digits) > 10 or not 1 <= int(digits) <= _MAX_LEVELS:
        raise ValueError(f"{path}: no rows, and its name gives levels={digits} (must be >= 1 and < 2**31); "
                         "pass levels=")
    return int(digits)


def _read_body(path: Path) -> tuple[bytes, int]:
    """The file's bytes without a header row, and the line number the body starts at."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):   # a UTF-8 byte-order mark is not a header
        data = data[3:]
    stripped = data.lstrip(b" \t\r\n")
    eol = stripped.find(b"\n")
    first = stripped if eol < 0 else stripped[:eol]
    if stripped and _is_header(first):
        skipped = data[: len(data) - len(stripped)].count(b"\n")
        body = b"" if eol < 0 else stripped[eol + 1:]
        return body, skipped + 2
    return data, 1


def _is_header(line: bytes) -> bool:
    """Whether the first non-blank line is a header: every field a name (quoted or not). A line
    with any field that is not a name -- a number, NaN, inf, a blank -- is data, so the parser
    reports what is wrong with it instead of the row vanishing."""
    for field in line.decode(errors="replace").split(","):
        name = field.strip(" \t\r")
        if len(name) >= 2 and name[0] == name[-1] == '"':
            name = name[1:-1].strip(" \t")
        if not any(ch.isalpha() for ch in name):
            return False
        try:
            float(name)   # NaN, inf, infinity: letters, but numbers
        except ValueError:
            continue
        return False
    return True


def _first_row_width(text: bytes) -> int | None:
    start = 0
    while start < len(text):
        eol = text.find(b"\n", start)
        eol = len(text) if eol < 0 else eol
        line = text[start:eol]
        if line.strip():
            return line.count(b",") + 1
        start = eol + 1
    return None


def _parse(text: bytes, first_line: int, path: Path, names, is_float) -> tuple[np.ndarray, np.ndarray]:
    ncols = len(names)
    nf = int(is_float.sum())
    # A row of ncols fields takes at least 2 * ncols bytes with its newline, so blank lines and
    # a long first row cannot make this outgrow the file (rows x columns x 8 bytes <= ~4x its size).
    max_rows = min(text.count(b"\n") + 1, (len(text) + 1) // (2 * ncols) + 1)
    flo = np.empty((max_rows, nf), np.float64)
    ints = np.empty((max_rows, ncols - nf), np.int64)
    n_rows = ffi.new("int64_t *")
    err = ffi.new("tg_csv_error *")
    status = lib.tg_csv_parse(
        ffi.from_buffer(text), len(text), ncols, ffi.from_buffer("uint8_t[]", is_float), max_rows,
        ffi.from_buffer("double[]", flo) if flo.size else ffi.NULL,
        ffi.from_buffer("int64_t[]", ints) if ints.size else ffi.NULL, n_rows, err)
    if status == lib.TG_EDATA:
        line = first_line + err.line - 1
        if err.kind == lib.TG_CSV_FIELDS:
            raise ValueError(f"{path}, line {line}: {err.fields} fields, expected {ncols} ({', '.join(names[:6])}"
                             f"{', ...' if ncols > 6 else ''})")
        col = err.column
        reason = (_CSV_FLOAT_RANGE if err.kind == lib.TG_CSV_RANGE and is_float[col - 1]
                  else _CSV_REASON.get(err.kind, "unreadable"))
        raise ValueError(f"{path}, line {line}, column {col} ({names[col - 1]}): "
                         f"{reason}: {_field(text, err.line, col)!r}")
    check(status, "tg_csv_parse")
    n = n_rows[0]
    return flo[:n], ints[:n]


def _field(text: bytes, line: int, column: int) -> str:
    """The text of one field (error path only)."""
    lines = text.split(b"\n")
    fields = lines[line - 1].rstrip(b"\r").split(b",") if line <= len(lines) else []
    return fields[column - 1].decode(errors="replace").strip() if column <= len(fields) else ""


def _line_of_row(text: bytes, first_line: int, row: int) -> int:
    """Line number of data row `row` (blank lines do not count as rows; error path only)."""
    seen = -1
    for i, line in enumerate(text.split(b"\n")):
        if line.strip():
            seen += 1
            if seen == row:
                return first_line + i
    return first_line + row


def _fail(path, text, first_line, row, col, names, reason):
    line = _line_of_row(text, first_line, int(row))
    raise ValueError(f"{path}, line {line}, column {col + 1} ({names[col]}): {reason}")


def _check_messages(ints: np.ndarray, path: Path, text: bytes, first_line: int) -> None:
    # ints holds the integer columns: type, order_id, size, price, direction.
    kind, size, direction = ints[:, 0], ints[:, 2], ints[:, 4]
    checks = (
        (1, (kind < MessageType.SUBMIT) | (kind > MessageType.HALT), "unknown message type {} (must be 1..7)", kind),
        (5, (direction != 1) & (direction != -1), "direction {} (must be 1 buy or -1 sell)", direction),
        (3, size < 0, "negative size {}", size),
    )
    found = [(int(np.argmax(bad)), col, reason, values) for col, bad, reason, values in checks if bad.any()]
    if found:
        row, col, reason, values = min(found, key=lambda f: (f[0], f[1]))
        _fail(path, text, first_line, row, col, MESSAGE_COLUMNS, reason.format(values[row]))
