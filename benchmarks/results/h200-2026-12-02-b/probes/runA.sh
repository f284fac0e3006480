#!/usr/bin/env bash
# scripts/device-check --tests-only at the commit in .probe/commit; results packed into $OUT/runA.tgz.
set -uo pipefail
c=$(cat .probe/commit)
export TICKGPU_COMMIT=$c PYTHONUNBUFFERED=1
R=/tmp/resA; mkdir -p $R
RESULTS=$R FLOOR_DIR=.floor timeout 560 bash scripts/device-check --tests-only > $R/device-check-tests-$c.log 2>&1
echo "device-check tests rc=$?"
tail -12 $R/pytest-gpu.txt
grep -E "FAILED|Error" $R/pytest-gpu.txt | head -20
tar czf $OUT/runA.tgz -C $R .
