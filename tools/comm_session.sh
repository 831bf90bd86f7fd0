#!/usr/bin/env bash
# The two-rank gloo jobs (helpers.workloads.communication) on the machine's CPU cores, each rank
# pinned to one core as the course's CPU recordings ran:
#   1. every variant under nsys (NVTX-marked collectives and ranks, --trace=nvtx,osrt, no CPU
#      sampling, --osrt-threshold=10000, whole run), exported to SQLite;
#   2. their PyTorch-profiler twins.
# Only manual and ddp keep their .nsys-rep (the others' reports are kept as gzipped SQLite).
# Usage: TAG=h200cpu OUT=/tmp/comm bash tools/comm_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-h200cpu}
OUT=${OUT:-comm-session-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# NSIGHT_ENV: a script that puts nsys (and ncu) on PATH, for a machine where they are not on it already
if [ -n "${NSIGHT_ENV:-}" ]; then . "$NSIGHT_ENV"; fi
command -v nsys >/dev/null || { echo "nsys is not on PATH (install Nsight Systems, or set NSIGHT_ENV)" >&2; exit 2; }
python3 tools/record_traces.py --tag "$TAG" --comm --nsys --out "$OUT" 2>&1 | grep -v USDT | tee "$OUT/record.log"
python3 tools/record_traces.py --tag "$TAG" --comm --torch-pairs --out "$OUT" 2>&1 | tee -a "$OUT/record.log"
rm -f "$OUT"/*.sqlite
for v in tiny_buckets fp16_hook no_sync imbalance; do rm -f "$OUT/communication__${v}__$TAG.nsys-rep"; done
ls -la "$OUT"
