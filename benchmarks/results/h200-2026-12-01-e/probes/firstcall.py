"""Where the first call of a kind that warm-up did not end with spends its time.

Run from the repository root on the GPU machine: `python3 firstcall.py [processes]`. Each variant
runs in `processes` fresh processes (default 5): import tickgpu, warmup(), the variant's preparation,
then the measured call three times and 200 times more for a steady median. Per call it records

  total      the whole tickgpu.greeks call, us
  roundtrip  the native round trip inside it (Driver.roundtrip: staging in, graph, wait, out), us
  host_call  the runtime's staged.host_call (the round trip included), us
  faults     minor page faults during the call (getrusage)

The measured call is the GPU suite's "other kind" (float32, every input an array of 4,096), except
in `chain` (the suite's tick: a float64 1,024-strike chain, warm-up's last kind) and `size2048`.
Variants, by what runs between warmup() and the measured call:

  base        nothing
  alloc       the NumPy allocator primed with the call's output block sizes (allocated and freed)
  samekind    one call of the same kind on other values
  chainfirst  one call of the chain kind
  cpufirst    the same call on the CPU backend
  size2048    nothing; the measured call has 2,048 options
  chain       nothing; the measured call is the chain
"""
import json
import subprocess
import sys

import numpy as np

CHILD = r"""
import json, resource, sys, time
import numpy as np
import tickgpu
import tickgpu.runtime as rt
from tickgpu.runtime import staged
variant = sys.argv[1]
tickgpu.warmup()
ctx = rt.context()
clock = time.perf_counter_ns
spent = {"roundtrip": 0, "host_call": 0}
orig_rt, orig_hc = ctx.driver.roundtrip, staged.host_call
def roundtrip(*a):
    t = clock(); orig_rt(*a); spent["roundtrip"] += clock() - t
def host_call(*a):
    t = clock(); out = orig_hc(*a); spent["host_call"] += clock() - t; return out
ctx.driver.roundtrip, staged.host_call = roundtrip, host_call
def other(n, seed):
    r = np.random.default_rng(seed)
    x = dict(spot=r.uniform(50, 150, n), strike=r.uniform(50, 150, n), t=r.uniform(0.1, 2, n),
             rate=r.uniform(0, 0.05, n), vol=r.uniform(0.1, 0.5, n), div=r.uniform(0, 0.03, n))
    x = {k: v.astype(np.float32) for k, v in x.items()}
    return dict(x, call=r.random(n) < 0.5, dtype=np.float32)
chain = dict(spot=np.full(1024, 100.0), strike=np.linspace(50, 150, 1024), t=0.5, rate=0.01, vol=0.2)
x = chain if variant == "chain" else other(2048 if variant == "size2048" else 4096, 1)
if variant == "alloc":
    for _ in range(3):
        blocks = [np.empty((10, 4096), np.float32) for _ in range(2)]
        del blocks
elif variant == "samekind":
    tickgpu.greeks(**other(4096, 2), backend="gpu")
elif variant == "chainfirst":
    tickgpu.greeks(**chain, backend="gpu")
elif variant == "cpufirst":
    tickgpu.greeks(**x, backend="cpu")
def one():
    spent["roundtrip"] = spent["host_call"] = 0
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = clock(); tickgpu.greeks(**x, backend="gpu"); total = clock() - t
    f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return [total / 1e3, spent["roundtrip"] / 1e3, spent["host_call"] / 1e3, f1 - f0]
res = {"first": one(), "second": one(), "third": one()}
steady = [one() for _ in range(200)]
res["steady"] = [float(v) for v in np.median(np.array(steady), axis=0)]
print(json.dumps(res))
"""

VARIANTS = ("base", "alloc", "size2048", "chainfirst", "samekind", "cpufirst", "chain")


def main() -> None:
    procs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs = {}
    for v in VARIANTS:
        runs[v] = []
        for _ in range(procs):
            p = subprocess.run([sys.executable, "-c", CHILD, v], capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                sys.exit(p.stderr[-3000:])
            runs[v].append(json.loads(p.stdout.strip().splitlines()[-1]))
        med = {k: [round(float(x), 1) for x in np.median([r[k] for r in runs[v]], axis=0)]
               for k in ("first", "second", "steady")}
        print(f"{v:<11} first total/roundtrip/host_call/faults {med['first']}  second {med['second']}  "
              f"steady {med['steady']}", flush=True)
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
