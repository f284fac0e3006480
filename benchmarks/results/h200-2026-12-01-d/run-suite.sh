#!/usr/bin/env bash
# The GPU tests, the GPU suite beside the floor programs, and the demo, at the commit in .probe/commit.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
export TICKGPU_COMMIT=$(cat .probe/commit)
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/f && nvcc -O2 -arch=sm_90 .floor/mailbox.cu -o /tmp/m \
  && nvcc -O2 -arch=sm_90 -Icsrc benchmarks/floor/greeks_tick.cu -o /tmp/g \
  && for i in 1 2 3; do echo "# floor run $i"; /tmp/f; /tmp/m; /tmp/g; done > $OUT/floor.txt 2>&1
tail -3 $OUT/floor.txt
TICKGPU_REQUIRE_GPU=1 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $OUT/pytest-gpu.txt 2>&1
tail -15 $OUT/pytest-gpu.txt
timeout 260 python3 -m tickgpu.bench.gpu --out $OUT --floor $OUT/floor.txt > $OUT/gpu-suite.log 2>&1
echo "suite rc=$?"; tail -45 $OUT/gpu-suite.log
timeout 60 python3 -m tickgpu demo --ticks 2000 --out $OUT/demo --quiet > $OUT/demo.log 2>&1; echo "demo rc=$?"; tail -5 $OUT/demo.log
