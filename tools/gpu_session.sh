#!/usr/bin/env bash
# Everything this course needs a CUDA GPU for, in one go (about 6 minutes on an H200):
#   1. smoke checks (NVTX, the live sync finder, --nsys-range),
#   2. re-record every GPU trace into OUT/data (tools/record_traces.py), plus the benchmark trace,
#   3. run the solution notebooks on the live GPU track under nbval (timings in OUT/nbval.xml).
# Usage: TAG=h200 OUT=/tmp/gpu-out bash tools/gpu_session.sh [workload:variant ...]
# (naming workload:variant pairs re-records only those; NOTEBOOKS="solutions/04_communication.ipynb ..."
# runs only those notebooks, SKIP_RECORD=1 skips steps 1-2: a notebook-only run)
# Afterwards copy OUT/data/* over data/ to update the replay track and the manifest.
set -uo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-h200}
OUT=${OUT:-gpu-session-out}
mkdir -p "$OUT/data"
cp data/manifest.json "$OUT/data/manifest.json"
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_RECORD:-}" ]; then
  python3 -c 'import nvtx' 2>&1 | tail -1 | tee "$OUT/smoke.log"
  python3 tools/gpu_smoke.py 2>&1 | grep -v USDT | tee -a "$OUT/smoke.log"
  ONLY=()
  for pair in "$@"; do ONLY+=(--only "$pair"); done
  python3 tools/record_traces.py --tag "$TAG" --out "$OUT/data" "${ONLY[@]}" 2>&1 | grep -v USDT | tee "$OUT/record.log"
  python3 tools/record_traces.py --tag "$TAG" --out "$OUT/data" --bench 2>&1 | grep -v USDT | tee -a "$OUT/record.log"
fi
# shellcheck disable=SC2086  # NOTEBOOKS is a list of paths
python3 -m pytest ${NOTEBOOKS:-solutions/} -p no:cacheprovider -o addopts="" --nbval-lax --nbval-current-env \
  --durations=0 -q --junitxml="$OUT/nbval.xml" 2>&1 | grep -v USDT | tee "$OUT/nbval.log"
echo "nbval exit: ${PIPESTATUS[0]}" | tee -a "$OUT/nbval.log"
