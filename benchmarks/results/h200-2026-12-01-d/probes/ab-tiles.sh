#!/usr/bin/env bash
# Tile sizes whose block-wide OR is one warp's (no barrier): float64 32/1 and 64/2 against 128/4; float32 64/1, 128/2 against 256/4.
source "$(dirname "$0")/env.sh"
timeout 250 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg f64,128,4,0,1,0,64 --cfg f64,32,1,0,1,0,64 --cfg f64,64,2,0,1,0,64 --cfg f64,64,2,0,1,0,64 --cfg f64,32,1,0,1,0,64 --cfg f64,128,4,0,1,0,64 --out $OUT/tiles-f64 > $OUT/tiles-f64.log 2>&1
timeout 200 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg f32,256,4,0,1,0,56 --cfg f32,64,1,0,1,0,56 --cfg f32,128,2,0,1,0,56 --cfg f32,128,2,0,1,0,56 --cfg f32,64,1,0,1,0,56 --cfg f32,256,4,0,1,0,56 --out $OUT/tiles-f32 > $OUT/tiles-f32.log 2>&1
rm -rf $OUT/tiles-*/cubins
grep -E "of copy|ERROR|instructions" $OUT/tiles-f64.log $OUT/tiles-f32.log
