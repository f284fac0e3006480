#!/usr/bin/env bash
# A/B: register caps (float64 64 vs 56; float32 throughput 64 vs 56 vs 48), settled, one process a dtype.
source "$(dirname "$0")/env.sh"
timeout 200 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg f64,128,4,0,1,0,64 --cfg f64,128,4,0,1,0,56 --cfg f64,128,4,0,1,0,56 --cfg f64,128,4,0,1,0,64 --out $OUT/regs-f64 > $OUT/regs-f64.log 2>&1
timeout 200 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg f32,256,4,0,1,0,64 --cfg f32,256,4,0,1,0,56 --cfg f32,256,4,0,1,0,48 --cfg f32,256,4,0,1,0,48 --cfg f32,256,4,0,1,0,56 --cfg f32,256,4,0,1,0,64 --out $OUT/regs-f32 > $OUT/regs-f32.log 2>&1
rm -rf $OUT/regs-*/cubins
grep -E "instructions|of copy" $OUT/regs-f64.log $OUT/regs-f32.log
