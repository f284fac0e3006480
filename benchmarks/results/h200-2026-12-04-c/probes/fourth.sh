#!/usr/bin/env bash
# Lease 4: CuPy results handed out again once dropped, PyTorch results as rows of one block and
# tensors read from their attributes: the GPU tests of the device path, the parts again
# (cupy_parts.py) and the suite's device-tick section (device_tick.py), twice each.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
P=benchmarks/results/h200-2026-12-04-c/probes
TICKGPU_REQUIRE_GPU=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_runtime_plumbing_gpu.py tests/gpu/test_gpu_ops.py -k "cupy or torch or device or jax or dlpack" 2>&1 | tail -15 | tee $R/pytest-device-path.txt
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor || exit 1
for i in 1 2; do
  /tmp/native_floor > $R/floor-$i.txt 2>&1; grep "graph H2D+kernel+D2H 1024\|launch+sync" $R/floor-$i.txt
  timeout 150 python3 $P/cupy_parts.py $R/cupy-parts-$i.json > $R/cupy-parts-$i.log 2>&1; echo "parts rc=$?"
  grep -v "^cupy  \|^torch  " $R/cupy-parts-$i.log | head -40
  timeout 150 python3 $P/device_tick.py $R/device-tick-$i.json $R/floor-$i.txt > $R/device-tick-$i.log 2>&1; echo "tick rc=$?"
  cat $R/device-tick-$i.log
done
tar czf $OUT/fourth.tgz -C $R .
