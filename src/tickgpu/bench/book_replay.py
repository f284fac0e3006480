"""Book replay for the CPU suite: tickgpu's Book and a pure-Python book on the same messages.

Parsing is excluded: both sides get their messages already in memory (tickgpu a MESSAGE_DTYPE
array, Python lists of ints), and the timed call is the replay alone.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

import tickgpu
from tickgpu.bench import references as ref


@dataclasses.dataclass
class Stream:
    """Messages in both forms, and (for a LOBSTER file) its orderbook rows."""

    name: str
    messages: np.ndarray                 # MESSAGE_DTYPE
    columns: tuple[list, list, list, list]  # type, size, price, direction as Python ints
    orderbook: np.ndarray | None
    levels: int | None

    @property
    def n(self) -> int:
        return int(self.messages.size)


def from_lobster(data, limit: int | None = None) -> Stream:
    m = data.messages[:limit]
    ob = None if data.orderbook is None else np.ascontiguousarray(data.orderbook[:limit])
    cols = tuple(m[k].tolist() for k in ("type", "size", "price", "direction"))
    return Stream("lobster", np.ascontiguousarray(m), cols, ob, data.levels)


def from_columns(cols: dict[str, np.ndarray]) -> Stream:
    from tickgpu.finance.book import message_array

    m = message_array(cols["type"], cols["size"], cols["price"], cols["direction"],
                      order_id=cols["order_id"], time=cols["time"])
    return Stream("synthetic", m, tuple(cols[k].tolist() for k in ("type", "size", "price", "direction")),
                  None, None)


@dataclasses.dataclass
class _LobsterView:
    messages: np.ndarray
    orderbook: np.ndarray
    levels: int


def tickgpu_replay(s: Stream):
    """LOBSTER: Book.replay_lobster (every row checked, resyncs where the file needs them);
    synthetic: Book.apply with the level-1 features after every message."""
    book = tickgpu.Book()
    if s.orderbook is not None:
        return book, book.replay_lobster(_LobsterView(s.messages, s.orderbook, s.levels))
    return book, book.apply(s.messages, features=1)


def python_replay(s: Stream):
    """The same work in pure Python: apply, (LOBSTER) check the top against the row, features."""
    return ref.python_replay(*s.columns, orderbook=s.orderbook)


def compare(s: Stream) -> dict:
    """Do the two replays end in the same book? (and, synthetic, agree on every mid?)"""
    book, out = tickgpu_replay(s)
    resyncs, last_mid = ref.python_replay(*s.columns, orderbook=s.orderbook)
    top = book.snapshot(1)[0]
    f = book.features()
    res = {"tickgpu_last_mid": float(f.mid), "python_last_mid": last_mid / 10_000 if math.isfinite(last_mid) else None,
           "python_resyncs": resyncs, "tickgpu_top": top.tolist()}
    if s.orderbook is not None:
        res["tickgpu_resyncs"] = sum(out.resyncs.values()) + out.mismatches
        res["tickgpu_mismatches"] = out.mismatches
        res["last_row_matches"] = bool(np.array_equal(top, s.orderbook[-1][:4]))
    else:
        res["tickgpu_rejected"] = int(np.count_nonzero(out.codes))
        mids = [ref.PythonBook()]  # replay again keeping every mid, to compare row by row
        pb = mids[0]
        py_mid = np.empty(s.n)
        for i, (t, z, p, d) in enumerate(zip(*s.columns)):
            pb.apply(t, z, p, d)
            py_mid[i] = pb.features()[0] / 10_000
        res["max_abs_mid_diff"] = float(np.nanmax(np.abs(out.mid - py_mid))) if s.n else 0.0
        res["nan_mids_agree"] = bool(np.array_equal(np.isnan(out.mid), np.isnan(py_mid)))
    return res
