#!/usr/bin/env bash
# Build, pytest -m gpu, greeks prologue A/B (old vs new source, ABBA, settled), Python-overhead probe.
source "$(dirname "$0")/env.sh"
export TICKGPU_COMMIT=$(cat .probe/commit)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/smi.txt
TICKGPU_REQUIRE_GPU=1 timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu > $OUT/pytest-gpu.txt 2>&1
tail -8 $OUT/pytest-gpu.txt
timeout 60 python3 "$(dirname "$0")/python-overhead.py" > $OUT/pyover.txt 2>&1; head -12 $OUT/pyover.txt
for dt in "f64,128,4,0,1,0,64" "f32,256,4,0,1,0"; do
  for src in old new new old; do
    f=$PWD/.probe/greeks_old.py; [ $src = new ] && f=$PWD/src/tickgpu/kernels/greeks.py
    tag=$(echo $dt | cut -c1-3)-$src
    TICKGPU_GREEKS_SRC=$f timeout 120 python3 scripts/kernel-sweep --greeks-only --back-to-back 300 --cfg $dt --out $OUT/ab-$tag-$RANDOM > $OUT/ab-$tag.log 2>&1
    echo "$tag: $(grep -E 'of copy|GB/s|TB/s|median' $OUT/ab-$tag.log | tail -3 | tr '\n' ' ')" | tee -a $OUT/ab-summary.txt
  done
done
