#!/usr/bin/env bash
# Lease 9: the whole of pytest -m gpu at HEAD (the C entry taking calls on CuPy arrays).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
P=benchmarks/results/h200-2026-12-04-c/probes
TICKGPU_REQUIRE_GPU=1 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $R/pytest-gpu-${TICKGPU_COMMIT:-x}.txt 2>&1
echo "pytest rc=$?"; tail -3 $R/pytest-gpu-*.txt; grep -E "^(FAILED|ERROR)" $R/pytest-gpu-*.txt | head
tar czf $OUT/ninth.tgz -C $R .
