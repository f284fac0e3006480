#!/usr/bin/env bash
# Third lease: the resident step traced with SM cycles (clock64) beside the globaltimer, the SM
# clock sampled by nvidia-smi meanwhile, and a model whose token groups are one block each.
set -uo pipefail
nvcc -O2 -arch=sm_90 -fmad=false -DTG_RM_TRACE -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c -o /tmp/rmlp_t || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv -lms 250 > $OUT/smi.csv 2>&1 &
smi=$!
timeout 60 /tmp/rmlp_t 2000 short 2>&1 | tee $OUT/resident-mlp-trace2.txt
kill $smi
sort -t, -k2 $OUT/smi.csv | awk -F, '{print $2, $4, $5}' | uniq -c | sort -rn | head -8
