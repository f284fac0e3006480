#!/usr/bin/env bash
# The plain 1,024-option call, 56640bd's tree against HEAD's, alternating processes in one lease.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || exit 1
(cd .probe/old && python3 setup.py -q build_ext --inplace > /dev/null 2>&1) || exit 1
for i in $(seq ${PAIRS:-4}); do
  for t in old new; do
    if [ $t = old ]; then src=.probe/old/src; else src=src; fi
    PYTHONPATH=$src:/tmp/tickgpu-site python3 .probe/ab_call.py $t
  done
done | tee $OUT/ab-call-56640bd-$(cat .probe/commit)-${PAIRS:-4}.jsonl
