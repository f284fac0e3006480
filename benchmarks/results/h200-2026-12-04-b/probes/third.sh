#!/usr/bin/env bash
# Lease 4: pytest -m gpu again (the tail tolerance of 13779cf applied to every random-input greeks
# comparison), then the suites (scripts/device-check --bench-only through the earlier wrapper).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
PYTHONPATH=$PWD/src:/tmp/tickgpu-site TICKGPU_REQUIRE_GPU=1 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu \
    > /tmp/pytest-gpu-retest.txt 2>&1
echo "pytest -m gpu rc=$?"; tail -2 /tmp/pytest-gpu-retest.txt; grep -E "^(FAILED|ERROR)" /tmp/pytest-gpu-retest.txt | head
unset PYTHONPATH
bash benchmarks/results/h200-2026-12-04-a/probes/check.sh bench
cp /tmp/pytest-gpu-retest.txt $OUT/pytest-gpu-retest.txt
