# Sourced by this folder's probes, run from the repository root on the GPU machine (cffi and
# pycparser carried as wheels in .whl/): installs them, builds the native core, sets PYTHONPATH.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tickgpu-site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/tickgpu-site
python3 setup.py -q build_ext --inplace >$OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
export PYTHONPATH=$PWD/src:/tmp/tickgpu-site
