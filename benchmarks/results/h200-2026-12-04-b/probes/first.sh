#!/bin/bash
# Lease 1: the cluster-shared W8A16 probe (cubins built by gen_mc.py into .mc, carried).
set -x
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
python3 benchmarks/results/h200-2026-12-04-b/probes/w8a16mc.py .mc $OUT/w8a16mc-probe.json > $OUT/w8a16mc-probe.log 2>&1
tail -5 $OUT/w8a16mc-probe.log
