#!/usr/bin/env bash
# The GPU, quant and memory suites beside the floor programs, the demo, the W8A16 sweep, at HEAD;
# everything packed into $OUT/runB.tgz.
set -uo pipefail
c=$(cat .probe/commit)
export TICKGPU_COMMIT=$c PYTHONUNBUFFERED=1
R=/tmp/resB; mkdir -p $R
RESULTS=$R FLOOR_DIR=.floor timeout ${BENCH_TIMEOUT:-540} bash scripts/device-check --bench-only > $R/device-check-bench-$c.log 2>&1
echo "device-check bench rc=$?"
tar czf $OUT/runB.tgz -C $R .
grep -E "latency_1024|fraction_of_copy_bw>=|first_call|iv_f64_Gopts|launch_sync_over|bound_mapped|^best" $R/device-check-bench-$c.log | head -30
ls -R $R | head -40
