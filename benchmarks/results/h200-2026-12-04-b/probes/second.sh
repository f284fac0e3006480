#!/bin/bash
# Lease 2: the shipped small-batch kernel with cache hints and blocks-an-SM minimums (w8a16_hint.cu).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
python3 benchmarks/results/h200-2026-12-04-b/probes/w8a16mc.py .mc $OUT/w8a16hint-probe.json --hints > $OUT/w8a16hint-probe.log 2>&1
tail -3 $OUT/w8a16hint-probe.log
