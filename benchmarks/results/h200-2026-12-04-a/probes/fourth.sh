#!/usr/bin/env bash
# Fourth lease: the resident step traced inside its stages (input read, LayerNorm, each layer's
# staging, MMA and epilogue), SM cycles beside the globaltimer.
set -uo pipefail
nvcc -O2 -arch=sm_90 -fmad=false -DTG_RM_TRACE -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c -o /tmp/rmlp_t || exit 1
cuobjdump -sass /tmp/rmlp_t > $OUT/resident-mlp.sass 2>/dev/null; wc -l $OUT/resident-mlp.sass
timeout 60 /tmp/rmlp_t 2000 short 2>&1 | grep -E "NATIVE|block 0|CYCLES" | tee $OUT/resident-mlp-trace3.txt
