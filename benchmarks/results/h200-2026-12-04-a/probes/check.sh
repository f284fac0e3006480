#!/usr/bin/env bash
# scripts/device-check at HEAD in two leases (tests, then the suites), packed into $OUT.
# Usage: TICKGPU_COMMIT=<sha> bash check.sh tests|bench
set -uo pipefail
export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R
c=${TICKGPU_COMMIT:-unknown}
if [ "$1" = tests ]; then
    RESULTS=$R FLOOR_DIR=.floor timeout 560 bash scripts/device-check --tests-only > $R/device-check-tests-$c.log 2>&1
    echo "device-check tests rc=$?"
    tail -4 $R/pytest-gpu.txt; tail -2 $R/quant-cases-gpu.txt
    grep -E "^(FAILED|ERROR)" $R/pytest-gpu.txt $R/quant-cases-gpu.txt | head -20
else
    RESULTS=$R FLOOR_DIR=.floor FLOOR_RUNS=5 timeout 450 bash scripts/device-check --bench-only > $R/device-check-bench-$c.log 2>&1
    echo "device-check bench rc=$?"
    grep -E "latency_1024|fraction_of_copy_bw|first_call|iv_f64_Gopts|launch_sync_over|bound_mapped|within_1.3x|^best" $R/device-check-bench-$c.log | head -40
fi
tar czf $OUT/check-$1.tgz -C $R .
