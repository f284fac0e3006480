#!/usr/bin/env bash
# Lease 2: a call on CuPy and PyTorch arrays taken apart (cupy_parts.py).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
timeout 300 python3 benchmarks/results/h200-2026-12-04-c/probes/cupy_parts.py $R/cupy-parts.json 2>&1 | tee $R/cupy-parts.log; echo "rc=$?"
tar czf $OUT/second.tgz -C $R .
