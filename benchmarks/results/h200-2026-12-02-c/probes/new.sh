#!/usr/bin/env bash
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
TICKGPU_REQUIRE_GPU=1 timeout 500 python3 -m pytest -m gpu -q -p no:cacheprovider "$@" 2>&1 | tail -40
