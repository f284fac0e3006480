#!/usr/bin/env bash
# Tests at HEAD, then the first-call probe; everything packed into $OUT/runA.tgz.
set -uo pipefail
c=$(cat .probe/commit)
export TICKGPU_COMMIT=$c PYTHONUNBUFFERED=1
R=/tmp/resA; mkdir -p $R
RESULTS=$R FLOOR_DIR=.floor bash scripts/device-check --tests-only > $R/device-check-tests-$c.log 2>&1
echo "device-check tests rc=$?"
tail -6 $R/pytest-gpu.txt
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
timeout 240 python3 benchmarks/results/h200-2026-12-01-e/probes/firstcall.py 5 > $R/firstcall-$c.txt 2>&1
echo "firstcall rc=$?"; head -8 $R/firstcall-$c.txt
tar czf $OUT/runA.tgz -C $R .
