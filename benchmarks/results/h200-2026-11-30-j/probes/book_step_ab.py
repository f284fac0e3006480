"""The demo's book stage two ways in one process: the general calls (apply_one, snapshot compared
with the row, sync, features(reuse=True)) and Book.step; per-message p50/p99 over the bundled AMZN
day's first 30,000 messages, three rounds each, alternating."""
import json, os, time
import numpy as np
import tickgpu
from tickgpu.app import demo
from tickgpu.finance.book import BookError

msg, ob = demo.resolve_data(None, None)
data = tickgpu.read_lobster(str(msg), str(ob))
m = data.messages[:30000]
F = [m[k].tolist() for k in ("type", "size", "price", "direction")]
rows = data.orderbook
levels = int(data.levels)


def parts():
    book = tickgpu.Book()
    out = np.empty(m.size, np.int64)
    for i in range(m.size):
        t0 = time.perf_counter_ns()
        try:
            book.apply_one(F[0][i], F[1][i], F[2][i], F[3][i])
        except BookError:
            pass
        row = rows[i]
        if not np.array_equal(book.snapshot(levels).ravel(), row):
            book.sync_from_orderbook_row(row)
        f = book.features(reuse=True)
        float(f.mid)
        out[i] = time.perf_counter_ns() - t0
    return out


def step():
    book = tickgpu.Book()
    out = np.empty(m.size, np.int64)
    for i in range(m.size):
        t0 = time.perf_counter_ns()
        f, code, rs = book.step(F[0][i], F[1][i], F[2][i], F[3][i], rows[i])
        float(f.mid)
        out[i] = time.perf_counter_ns() - t0
    return out


res = {"parts": [], "step": []}
for _ in range(3):
    for name, fn in (("parts", parts), ("step", step)):
        t = fn() / 1e3
        res[name].append({"p50_us": float(np.percentile(t, 50)), "p99_us": float(np.percentile(t, 99))})
print(json.dumps(res))
with open(os.path.join(os.environ.get("OUT", "."), "book-step-ab.json"), "w") as f:
    json.dump({"messages": int(m.size), "commit": os.environ.get("TICKGPU_COMMIT"), **res}, f, indent=1)
