#!/usr/bin/env bash
# Lease 2: the parts of a greeks call on PyTorch tensors (torch_parts.py), twice.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
for i in 1 2; do timeout 100 python3 benchmarks/results/h200-2026-12-04-d/probes/torch_parts.py $R/torch-parts-$i.json > $R/torch-parts-$i.log 2>&1; echo "rc=$?"; cat $R/torch-parts-$i.log | grep -v Warn | tail -n 32; done
tar czf $OUT/second.tgz -C $R .
