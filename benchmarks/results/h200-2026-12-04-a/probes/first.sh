#!/usr/bin/env bash
# First lease: the floor programs, the resident W8A16 model step driven from C
# (benchmarks/floor/resident_mlp.cu), and the 1,024-option greeks call from Python (C entry on
# and off) -- all in one lease. Outputs under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv | tee $OUT/gpu.txt
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/floor && nvcc -O2 -arch=sm_90 .floor/mailbox.cu -o /tmp/mbx || exit 1
nvcc -O2 -arch=sm_90 -fmad=false -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c -o /tmp/rmlp || exit 1
for i in 1 2; do /tmp/floor; /tmp/mbx; done > $OUT/floor.txt 2>&1
grep -E "graph H2D|mailbox" $OUT/floor.txt | head -8
timeout 150 /tmp/rmlp 4000 2>&1 | tee $OUT/resident-mlp.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/site
timeout 200 python3 - <<'PY' 2>&1 | tee $OUT/latency.txt
import json, os, torch, numpy as np, tickgpu
from tickgpu.bench.gpu import bench_latency
tickgpu.warmup()
r = bench_latency(torch, 10000)
keep = {k: ({kk: v[kk] for kk in ("p50_us", "p99_us", "min_us") if kk in v} if isinstance(v, dict) and "p50_us" in v else v)
        for k, v in r.items() if k != "parts_f32_1024"}
print(json.dumps(keep, indent=1, default=str))
json.dump(r, open(os.environ["OUT"] + "/latency.json", "w"), indent=1, default=str)
PY
