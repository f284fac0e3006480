#!/usr/bin/env bash
# The tests changed since the last full run, several seeds, then the benchmarks (runB).
set -uo pipefail
for s in 201 202 203 204 205 206; do TICKGPU_SEED=$s bash .probe/new.sh tests/gpu/test_gpu_ops.py -k "odd_arguments or random or never_negative" 2>&1 | grep -E "^E  |passed|failed" | cut -c1-600 | head -4; done
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
for s in 1236841810 301 302; do TICKGPU_SEED=$s TICKGPU_QUANT_CASES_DEVICE=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider tests/cpu/quant_interpreter_cases.py -k "gpu_plan_runs_the_mlp" 2>&1 | tail -1; done
unset PYTHONPATH
BENCH_TIMEOUT=400 bash .probe/runB.sh
