#!/usr/bin/env bash
# Lease 5: scripts/device-check --tests-only at HEAD (pytest -m gpu, the quant cases compiled on the GPU),
# then the floor programs three times and the gpu suite (python3 -m tickgpu.bench.gpu) against them,
# then the device path's parts once more (cupy_parts.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
c=${TICKGPU_COMMIT:-unknown}
R=/tmp/r; mkdir -p $R/tests $R/suite
P=benchmarks/results/h200-2026-12-04-c/probes
RESULTS=$R/tests timeout 330 bash scripts/device-check --tests-only > $R/tests/device-check-tests-$c.log 2>&1
echo "tests rc=$?"; tail -3 $R/tests/pytest-gpu.txt; tail -2 $R/tests/quant-cases-gpu.txt
grep -E "^(FAILED|ERROR)" $R/tests/pytest-gpu.txt $R/tests/quant-cases-gpu.txt | head -20
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/f && nvcc -O2 -arch=sm_90 .floor/mailbox.cu -o /tmp/m \
  && nvcc -O2 -arch=sm_90 -Icsrc benchmarks/floor/greeks_tick.cu -o /tmp/g \
  && for i in 1 2 3; do echo "# floor run $i"; /tmp/f; /tmp/m; /tmp/g; done > $R/suite/floor.txt 2>&1
grep "graph H2D+kernel+D2H 1024\|launch+sync round" $R/suite/floor.txt
timeout 200 python3 -m tickgpu.bench.gpu --out $R/suite --floor $R/suite/floor.txt > $R/suite/gpu-suite-$c.log 2>&1
echo "suite rc=$?"; grep -E "latency_1024|device_tick|fraction_of_copy_bw>=|iv_f64_Gopts|first_call|launch_sync_over" $R/suite/gpu-suite-$c.log | head -30
timeout 60 python3 $P/cupy_parts.py $R/cupy-parts.json > $R/cupy-parts.log 2>&1; grep -v "^cupy  \|^torch  " $R/cupy-parts.log | head -40
tar czf $OUT/fifth.tgz -C $R .
