"""`tickgpu bench --suite memory`: the memory layer side by side with what a user would otherwise use.

Sections, measured in one run on one GPU (each in its own module):

* ``host`` (`tickgpu.bench.memory_host`): copies from `PinnedPool` buffers against pageable NumPy
  arrays and the floor's pinned bandwidth; a mapped zero-copy tick against the floor's mapped kernel;
  the mapped-versus-copy crossover of the tick path; managed arrays (first touch, steady state, after
  a CPU write; block prefetch, whole-array prefetch, none) against plain device memory.
* ``device_pool`` (`tickgpu.bench.memory_device`): allocation cost per call of `DevicePool` (both
  levels) against cuMemAlloc, the driver's stream-ordered pool and PyTorch's caching allocator; a
  fragmentation churn against `DevicePool` and PyTorch's caching allocator.
* ``pipeline`` (`tickgpu.bench.memory_pipeline`): greeks for options resident in host memory through
  `tickgpu.runtime.Pipeline` (three streams) against its serial one-stream version and the PCIe bound
  measured in the same run.

The floor programs' output (``--floor``) is read for the figures compared against. torch and cupy are
imported by the sections that compare against them, never by the library.
"""
from __future__ import annotations

import json

from tickgpu.bench.common import jsonable, run_sections, write_results
from tickgpu.bench.gpu import start_suite, suite_main


def _pinned_alloc():
    """`nbytes -> uint8 array` over buffers of the runtime's pinned pool (kept alive by the arrays)."""
    from tickgpu.memory.host import default_pinned_pool
    from tickgpu.runtime import context

    pool = default_pinned_pool(context())

    def alloc(nbytes: int):
        buf = pool.acquire(nbytes)
        a = buf.array("uint8", (nbytes,))
        return a

    return alloc


def run(args) -> int:
    res, quick = start_suite("memory", args)
    floor = res["floor"]

    def host():
        from tickgpu.bench.memory_host import run_host_memory

        return run_host_memory(quick, floor)

    def device_pool():
        from tickgpu.bench.memory_device import run_device_pool

        return run_device_pool(quick)

    def pipeline():
        from tickgpu.bench.memory_pipeline import run_pipeline_bench

        return run_pipeline_bench(quick, pinned_alloc=_pinned_alloc())

    run_sections(res, {"host": host, "device_pool": device_pool, "pipeline": pipeline},
                 echo=lambda name, r: print(json.dumps(jsonable(r), indent=1)[:4000], flush=True))
    path = write_results("memory", res, getattr(args, "out", "benchmarks/results"))
    print(f"saved {path}")
    return 0


def main(argv=None) -> int:
    return suite_main("tickgpu.bench.memory", __doc__, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
