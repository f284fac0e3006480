#!/usr/bin/env bash
# pytest -m gpu on the bundle with float64 tiles of one warp, then the suite's throughput section alone.
source "$(dirname "$0")/env.sh"
TICKGPU_REQUIRE_GPU=1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $OUT/pytest-gpu.txt 2>&1
tail -4 $OUT/pytest-gpu.txt
timeout 100 python3 "$(dirname "$0")/throughput.py" $OUT/throughput.json 2>&1 | tail -4
