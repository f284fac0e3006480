#!/usr/bin/env bash
# pytest -m gpu at the commit in .probe/commit (the test-only change after the suite's run).
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
c=$(cat .probe/commit)
TICKGPU_REQUIRE_GPU=1 timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $OUT/pytest-gpu-$c.txt 2>&1
tail -8 $OUT/pytest-gpu-$c.txt
