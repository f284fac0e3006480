#!/usr/bin/env bash
# float64 divisions as reciprocal estimate + Newton (new) vs IEEE division (old): pytest on the GPU, settled A/B.
source "$(dirname "$0")/env.sh"
TICKGPU_REQUIRE_GPU=1 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $OUT/pytest-gpu.txt 2>&1
tail -4 $OUT/pytest-gpu.txt
O=$PWD/.probe/greeks_old.py; N=$PWD/src/tickgpu/kernels/greeks.py
i=0
for f in $O $N $N $O; do
  i=$((i+1))
  TICKGPU_GREEKS_SRC=$f timeout 120 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg f64,128,4,0,1,0,64 --out $OUT/ab-$i > $OUT/ab-$i.log 2>&1
  rm -rf $OUT/ab-$i/cubins
  echo "recip $i $(basename $f): $(grep -E 'of copy' $OUT/ab-$i.log | head -1 | tr -s ' ')" | tee -a $OUT/ab-summary.txt
done
