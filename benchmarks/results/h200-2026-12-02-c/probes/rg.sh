#!/usr/bin/env bash
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
which nvcc || export PATH=/usr/local/cuda/bin:$PATH
python3 -m tickgpu build-kernels --out $OUT/rg --family resident_greeks --arch sm_80 --arch sm_90 -q; echo build rc=$?
ls -la $OUT/rg $OUT/rg/sm_90
TICKGPU_REQUIRE_GPU=1 timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_gpu_ops.py tests/gpu/test_mailbox_gpu.py -x 2>&1 | tail -15
