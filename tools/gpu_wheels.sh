#!/usr/bin/env bash
# Download, here (with network), the wheels a bare GPU machine lacks for tools/gpu_check.sh into
# .whl/ at the repo root, and keep .whl/ out of git (.git/info/exclude).
#
# The GPU image (the device tool's nvidia-h100-x1 / nvidia-h200, Python 3.12, x86-64) already has
# torch, numpy, numba, h5py, psutil, tqdm, pytest, cloudpickle, pandas, matplotlib and
# opencv-python-headless; it lacks the packages below (the versions of /work/main/.venv, which the
# tests pass with). blosc2 (with ndindex, numexpr) is left out: chunkstore imports it only for a
# blosc2 codec, which neither the CUDA tests nor the benchmarks use, and its 7.7 MB would push the
# tree past the 64 MiB a device call carries (hdf5plugin alone is 46 MB).
#
# Usage (repo root):  bash tools/gpu_wheels.sh        then call the device tool with carry [".whl"]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
WHEELS=(
  zstandard==0.25.0 lz4==4.4.5 hdf5plugin==7.1.0
  stable_baselines3==2.9.2 gymnasium==1.4.0 farama-notifications==0.0.4 ale-py==0.12.1
)
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")" .whl
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
ls -l .whl
du -sh .whl
