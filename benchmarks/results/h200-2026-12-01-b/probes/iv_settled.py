"""The implied-vol section of the GPU suite alone (single calls and settled back to back)."""
import json, os
import cupy as cp
import tickgpu
from tickgpu.bench.gpu import bench_implied_vol, jsonable
tickgpu.warmup()
r = bench_implied_vol(cp, 10_000_000)
print(json.dumps(jsonable(r), indent=1))
json.dump(jsonable(r), open(os.path.join(os.environ.get("OUT", "."), f"iv-settled-{os.environ.get('TICKGPU_COMMIT', 'x')}.json"), "w"), indent=1)
