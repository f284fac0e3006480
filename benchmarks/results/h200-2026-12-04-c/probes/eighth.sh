#!/usr/bin/env bash
# Lease 8: greeks on CuPy arrays taken by the C entry: the GPU tests of the C entry and the device path,
# then the floor and the suite's device-tick section twice.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
P=benchmarks/results/h200-2026-12-04-c/probes
TICKGPU_REQUIRE_GPU=1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_fast_tick_gpu.py tests/gpu/test_runtime_plumbing_gpu.py tests/gpu/test_gpu_ops.py > $R/pytest-gpu-${TICKGPU_COMMIT:-x}.txt 2>&1
echo "pytest rc=$?"; tail -3 $R/pytest-gpu-*.txt; grep -E "^(FAILED|ERROR)|Error" $R/pytest-gpu-*.txt | head
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor || exit 1
for i in 1 2; do
  /tmp/native_floor > $R/floor-$i.txt 2>&1; grep "graph H2D+kernel+D2H 1024\|launch+sync round" $R/floor-$i.txt
  timeout 100 python3 $P/device_tick.py $R/device-tick-$i.json $R/floor-$i.txt > $R/device-tick-$i.log 2>&1; echo "tick rc=$?"
  grep -E "tickgpu_greeks|cupy_elementwise|torch_eager|tickgpu_bound |c_entry" $R/device-tick-$i.log
done
tar czf $OUT/eighth.tgz -C $R .
