#!/usr/bin/env bash
# Plain, bound and bound-mapped 1,024-option calls: d43c9a1's tree against HEAD's, alternating fresh processes.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace > /dev/null 2>&1 || exit 1
(cd .probe/old && python3 setup.py -q build_ext --inplace > /dev/null 2>&1) || exit 1
for i in $(seq ${PAIRS:-6}); do
  for t in old new; do
    if [ $t = old ]; then src=.probe/old/src; else src=src; fi
    PYTHONPATH=$src:/tmp/tickgpu-site timeout 60 python3 .probe/ab_calls.py $t
  done
done | tee $OUT/ab-calls-d43c9a1-$(cat .probe/commit).jsonl
