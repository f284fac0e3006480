#!/usr/bin/env bash
# Lease 1: where a call on CuPy arrays spends its time (cupy_profile.py), and the NumPy call over time
# after the throughput section (after_throughput.py); the floor programs before each.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
P=benchmarks/results/h200-2026-12-04-c/probes
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor || exit 1
/tmp/native_floor > $R/floor-1.txt 2>&1; grep "graph H2D+kernel+D2H 1024" $R/floor-1.txt
timeout 200 python3 $P/cupy_profile.py $R/cupy-profile.json > $R/cupy-profile.log 2>&1; echo "cupy rc=$?"
head -30 $R/cupy-profile.log
/tmp/native_floor > $R/floor-2.txt 2>&1; grep "graph H2D+kernel+D2H 1024" $R/floor-2.txt
timeout 250 python3 $P/after_throughput.py $R/after-throughput.json > $R/after-throughput.log 2>&1; echo "after rc=$?"
awk 'NR%4==1' $R/after-throughput.log | head -80
/tmp/native_floor > $R/floor-3.txt 2>&1; grep "graph H2D+kernel+D2H 1024" $R/floor-3.txt
tar czf $OUT/first.tgz -C $R .
