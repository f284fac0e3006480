#!/usr/bin/env bash
# Second lease: the resident step after its restructuring (inputs read by every block, scales in
# shared memory, the narrow last layer fused), swept, and traced stage by stage; the floor beside it.
set -uo pipefail
nvcc -O2 -arch=sm_90 .floor/native_floor.cu -o /tmp/floor && nvcc -O2 -arch=sm_90 .floor/mailbox.cu -o /tmp/mbx || exit 1
nvcc -O2 -arch=sm_90 -fmad=false -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c -o /tmp/rmlp || exit 1
nvcc -O2 -arch=sm_90 -fmad=false -DTG_RM_TRACE -Icsrc benchmarks/floor/resident_mlp.cu csrc/hot/mailbox.c csrc/cpu/stage.c -o /tmp/rmlp_t || exit 1
(/tmp/floor; /tmp/mbx) > $OUT/floor.txt 2>&1
grep -E "graph H2D.*1024|MAILBOX n=  1024" $OUT/floor.txt
timeout 120 /tmp/rmlp 3000 > $OUT/resident-mlp-sweep.txt 2>&1; echo "sweep rc=$?"
timeout 60 /tmp/rmlp_t 2000 short 2>&1 | tee $OUT/resident-mlp-trace.txt
grep -E "rows (1|16|64) " $OUT/resident-mlp-sweep.txt | awk '{print $5, $7, $9, $11, $13, $14, $17}' | column -t
