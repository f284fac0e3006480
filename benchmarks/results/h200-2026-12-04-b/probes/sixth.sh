#!/usr/bin/env bash
# Lease 7: as lease 6, alternating processes without and with torch and CuPy loaded (--with-torch); the same
# work in C between runs, all in one lease.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
R=/tmp/r; mkdir -p $R
P=benchmarks/results/h200-2026-12-04-b/probes
cc -O2 -shared -fPIC -o /tmp/serial.so $P/serial.c || exit 1
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/native_floor || exit 1
nvcc -O2 -arch=sm_90 -Icsrc benchmarks/floor/greeks_tick.cu -o /tmp/greeks_tick || exit 1
for i in 1 2 3 4; do T=""; [ $((i % 2)) = 0 ] && T=--with-torch; echo "run $i $T"
    { /tmp/native_floor; /tmp/greeks_tick; } > $R/floor-$i.txt 2>&1
    grep "graph H2D+kernel+D2H 1024\|greeks tick f32 1024 in" $R/floor-$i.txt
    python3 $P/entry_ab.py /tmp/serial.so $R/entry-ab-$i.json $T > $R/entry-ab-$i.log 2>&1
    python3 -c "import json;d=json.load(open('$R/entry-ab-$i.json'));print({k:round(d[k]['p50_us'],2) for k in ('api','split','serial','before','graph_only')})"
done
tar czf $OUT/ab.tgz -C $R .
