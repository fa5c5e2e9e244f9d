#!/usr/bin/env bash
# The prepared GPU check (issue 37): on a bare GPU machine with no network, from the repo root,
# within 8 minutes: versions, the CUDA tests, the DQN training bench (tools/bench_gpu_training.py)
# and the device sampling bench (tools/bench_device.py), each step under `timeout`, writing
#   $OUTDIR/cuda_tests_<card>.log                     the CUDA tests' output
#   $OUTDIR/bench_gpu_training_<card>.{json,md}       DQN steps/s: SB3's buffer, ours on the host, ours on the device
#   $OUTDIR/bench_gpu_device_<card>.{json,md}         sample()/add() micro-figures, bytes, exactness
#   $OUTDIR/gpu_check_<card>.log                      this script's whole output
# (<card>: nvidia-smi's name, lower case, "NVIDIA " dropped, e.g. h200, h100-80gb-hbm3), and
# copying them to $OUT when the device tool sets it (only $OUT comes back from the machine).
#
# What must be carried: the GPU image has torch, numpy, numba, h5py, psutil, pytest, opencv and
# the rest of SB3's needs but not zstandard, lz4, hdf5plugin, stable-baselines3, gymnasium,
# farama-notifications or ale-py. Here (with network), once: `bash tools/gpu_wheels.sh` puts their
# wheels (~55 MB) in .whl/ and keeps it out of git; then the device tool's call is
#   run(command="bash tools/gpu_check.sh", carry=[".whl"], timeout_s=540)
# and this script installs .whl/*.whl with pip --no-index --target (as the README of the device
# tool says) before anything imports them. The working tree plus .whl must stay under 64 MiB.
#
# Environment: DEVICE=cuda (default) or cpu: the dry run, the same steps on the cpu at a tiny size
# (the CUDA tests then skip; only the tests named *cuda* are collected, to stay short);
# PYTHON (default python3), OUTDIR (default results/, for cpu /tmp/gpu_check_cpu), BUDGET (seconds
# for the whole, default 470), SITE (where the wheels go, default /tmp/gpu_site).
# Exit status: 0 when every step passed, else 1 (the later steps run all the same).
set -u -o pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-470}
SITE=${SITE:-/tmp/gpu_site}
case "$DEVICE" in
  cuda) OUTDIR=${OUTDIR:-results} ;;
  cpu) OUTDIR=${OUTDIR:-/tmp/gpu_check_cpu} ;;
  *) echo "gpu_check.sh: DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2 ;;
esac
start=$(date +%s)
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8

if [ "$DEVICE" = cuda ]; then
  if ! command -v nvidia-smi >/dev/null; then echo "gpu_check.sh: no nvidia-smi: not a GPU machine (DEVICE=cpu for the dry run)" >&2; exit 2; fi
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/-$//')
else
  card=cpu
fi
LOG="$OUTDIR/gpu_check_$card.log"
: >"$LOG"
log() { echo "== $(date -u +%H:%M:%S) +$(( $(date +%s) - start ))s $*" | tee -a "$LOG"; }
failed=0
# step NAME CAP CMD...: run CMD under timeout min(CAP, what is left of BUDGET), its output into $LOG
step() {
  local name=$1 cap=$2 left rc
  shift 2
  left=$(( BUDGET - ($(date +%s) - start) ))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 20 ]; then log "$name: skipped, ${left}s of the budget left"; failed=1; return; fi
  log "$name (timeout ${cap}s): $*"
  timeout -k 10 "$cap" "$@" 2>&1 | tee -a "$LOG"
  rc=$?
  log "$name: exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
  [ $rc = 0 ] || failed=1
}

# 1. the carried wheels (none carried: the packages must already be importable)
if compgen -G ".whl/*.whl" >/dev/null && ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  log "not installing .whl/: the wheels are for Python 3.12 (the GPU image's), $PYTHON is $("$PYTHON" -V 2>&1)"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
elif compgen -G ".whl/*.whl" >/dev/null; then
  step install-wheels 120 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  log "no .whl/*.whl here: using the packages $PYTHON already has"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

# 2. versions
{ [ "$DEVICE" = cuda ] && nvidia-smi; "$PYTHON" -c "
import sys, numpy, numba, h5py, torch, stable_baselines3, chunkstore
print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device',
      'numpy', numpy.__version__, 'numba', numba.__version__, 'h5py', h5py.__version__,
      'sb3', stable_baselines3.__version__, 'chunkstore', chunkstore.__version__)
"; } 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || { log "versions: the imports failed (wheels missing?)"; failed=1; }

# 3. the CUDA tests
TESTS=(tests/chunkstore/test_tiers.py tests/chunkstore/test_device_array.py
       tests/sb3_integration/test_device_sampling.py tests/test_device_fork.py)
select=()
[ "$DEVICE" = cpu ] && select=(-k cuda)
log "CUDA tests into $OUTDIR/cuda_tests_$card.log"
step cuda-tests 150 bash -c 'set -o pipefail; "$0" -m pytest -x -q -p no:cacheprovider "$@" 2>&1 | tee "'"$OUTDIR/cuda_tests_$card.log"'"' \
  "$PYTHON" "${select[@]}" "${TESTS[@]}"

# 4. DQN training: SB3's buffer against ours on the host and on the device
if [ "$DEVICE" = cuda ]; then
  # MsPacman (the game that compresses least) under both glibc settings: the same 12 arm processes as
  # two games under one, and a claim has to hold with SB3 spared its page faults too
  train=(--games MsPacman --batches 32 256 --glibc both --rounds 1 --steps 1500 --learning-starts 1000
         --warmup 200 --buffer-size 100000 --timeout 90)
else
  train=(--games Pong --batches 32 --rounds 1 --steps 40 --learning-starts 100 --warmup 8 --buffer-size 1000
         --timeout 300)
fi
step training-bench 270 "$PYTHON" tools/bench_gpu_training.py --device "$DEVICE" "${train[@]}" \
  --out "$OUTDIR/bench_gpu_training_$card.json"

# 5. sample()/add() on the device against SB3's sample plus copy
if [ "$DEVICE" = cuda ]; then
  micro=(--quick)
else
  micro=(--games Pong --transitions 1000 --distinct 300 --batches 32 --envs 2 --env-steps 50 --repeats 2
         --exact-seeds 1)
fi
step device-bench 150 "$PYTHON" tools/bench_device.py --devices "$DEVICE" --no-rss "${micro[@]}" \
  --out "$OUTDIR/bench_gpu_device_$card.json"

log "done: $([ $failed = 0 ] && echo 'every step passed' || echo 'a step failed (see above)')"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cp "$OUTDIR"/cuda_tests_"$card".log "$OUTDIR"/bench_gpu_*_"$card".json "$OUTDIR"/bench_gpu_*_"$card".md "$OUT"/ 2>/dev/null
  cp "$LOG" "$OUT"/
fi
exit $failed
