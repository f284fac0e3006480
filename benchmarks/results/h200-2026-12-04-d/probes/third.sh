#!/usr/bin/env bash
# Lease 3: single values mixed into calls on GPU arrays, taken in C: the C entry's GPU tests, the floor
# and the device-tick section twice, then the whole of pytest -m gpu.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r3; rm -rf $R; mkdir -p $R
C=${TICKGPU_COMMIT:-x}
TICKGPU_REQUIRE_GPU=1 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_fast_tick_gpu.py tests/gpu/test_runtime_plumbing_gpu.py > $R/pytest-c-entry-$C.txt 2>&1
echo "pytest rc=$?"; tail -n 3 $R/pytest-c-entry-$C.txt; grep -E "^(FAILED|ERROR)|Error" $R/pytest-c-entry-$C.txt | head -20
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor || exit 1
for i in 1 2; do
  /tmp/native_floor > $R/floor-$i.txt 2>&1; grep "graph H2D+kernel+D2H 1024\|launch+sync round" $R/floor-$i.txt
  timeout 150 python3 benchmarks/results/h200-2026-12-04-c/probes/device_tick.py $R/device-tick-$i.json $R/floor-$i.txt > $R/device-tick-$i.log 2>&1; echo "tick rc=$?"
  grep -E "tickgpu_greeks|cupy_elementwise|torch_eager|tickgpu_implied|c_entry" $R/device-tick-$i.log
done
TICKGPU_REQUIRE_GPU=1 timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $R/pytest-gpu-$C.txt 2>&1
echo "pytest rc=$?"; tail -n 2 $R/pytest-gpu-$C.txt; grep -E "^(FAILED|ERROR)" $R/pytest-gpu-$C.txt | head
tar czf $OUT/third.tgz -C $R .
