#!/usr/bin/env bash
# Lease 5: the C entry's A/B (entry_ab.py), then the floor's graph round trip in the same lease.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
P=benchmarks/results/h200-2026-12-04-b/probes
cc -O2 -shared -fPIC -o /tmp/serial.so $P/serial.c || exit 1
python3 $P/entry_ab.py /tmp/serial.so $OUT/entry-ab.json 2>&1 | tail -40
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor && nvcc -O2 -arch=sm_90 -Icsrc benchmarks/floor/greeks_tick.cu -o /tmp/greeks_tick \
    && for i in 1 2 3; do /tmp/native_floor; /tmp/greeks_tick; done > $OUT/floor.txt 2>&1
grep -i "graph H2D\|p50" $OUT/floor.txt | head -12
python3 $P/entry_ab.py /tmp/serial.so $OUT/entry-ab-2.json 2>&1 | grep -A3 '"split"\|"serial"\|"before"\|"graph_only"' | grep p50
