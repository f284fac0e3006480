#!/usr/bin/env bash
# The implied-vol kernel with lbr_core.h as at 9b56dcc (before the branch-boundary fix) against now, alternating.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
for round in 1 2; do
  for which in new old committed; do
    case $which in old) export TICKGPU_LBR_DIR=$PWD/.probe/lbrold/cpu ;; committed) export TICKGPU_LBR_DIR=$PWD/.probe/lbrhead/cpu ;; *) unset TICKGPU_LBR_DIR ;; esac
    echo "## round $round: lbr_core.h $which"
    python3 scripts/kernel-sweep --dtype f64 --cfg f64,128,4,0,1,0,64 --out /tmp/ks-$which-$round 2>&1 | grep -E "iv_f64_regroup2_b256 |failed|rror" 
  done
done > $OUT/iv-ab.log 2>&1
cat $OUT/iv-ab.log
