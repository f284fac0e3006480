"""The GPU suite's throughput section alone (tickgpu.bench.gpu.bench_throughput), 1e8 options."""
import json, sys
import cupy as cp, torch
from tickgpu.bench.gpu import bench_throughput, device_copy_bandwidth
bw = device_copy_bandwidth(cp, 1 << 31)
r = bench_throughput(cp, torch, 100_000_000, bw)
json.dump({"copy_bandwidth_Bps": bw, "throughput": r}, open(sys.argv[1], "w"), indent=1, default=str)
for k, t in r.items():
    print(k, {x: round(t[x], 4) for x in ("fraction_of_copy_bw_stream", "fraction_of_copy_bw", "fraction_of_copy_bw_events",
                                         "fraction_of_copy_bw_kernel_only", "fraction_of_copy_bw_sustained")},
          t["kernel_only_variant"], t["max_err_over_scale_vs_cpu"], t["sustained"]["sm_clock_mhz"])
