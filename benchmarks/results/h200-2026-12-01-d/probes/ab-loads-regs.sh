#!/usr/bin/env bash
# A/B: float64 loads by stride multiplication (new) vs a branch per input (old); float32 likewise
# (probe source), and float32 capped at 64 registers.
source "$(dirname "$0")/env.sh"
ab() {  # tag cfg src...
  local tag=$1 cfg=$2; shift 2
  local i=0
  for f in "$@"; do
    i=$((i+1))
    TICKGPU_GREEKS_SRC=$f timeout 120 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 $cfg --out $OUT/ab-$tag-$i > $OUT/ab-$tag-$i.log 2>&1
    echo "$tag $i $(basename $f): $(grep -E 'of copy' $OUT/ab-$tag-$i.log | head -4 | tr -s ' ' | tr '\n' '|')" | tee -a $OUT/ab-summary.txt
    rm -rf $OUT/ab-$tag-$i/cubins
  done
}
O=$PWD/.probe/greeks_old.py; N=$PWD/src/tickgpu/kernels/greeks.py; M=$PWD/.probe/greeks_f32mul.py
ab f64loads "--cfg f64,128,4,0,1,0,64" $O $N $N $O
ab f32loads "--cfg f32,256,4,0,1,0" $O $M $M $O
ab f32regs "--cfg f32,256,4,0,1,0,64 --cfg f32,256,4,0,1,0 --cfg f32,256,4,0,1,0 --cfg f32,256,4,0,1,0,64" $N
