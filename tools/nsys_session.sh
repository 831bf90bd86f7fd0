#!/usr/bin/env bash
# Nsight recordings on a CUDA GPU (the course's were made on an H200) in one go:
#   1. every GPU workload variant under the course's nsys command line, torch.profiler on the same
#      steps (tools/record_traces.py --nsys), SQLite export, nsys stats / analyze text;
#   2. the PyTorch-profiler twins of the same variants (--torch-pairs: the same command and seed in
#      its own process), unless SKIP_TWINS is set;
#   3. ncu (--set basic, CSV details page) on the top kernel of the GPU-bound sync_stall:fixed loop.
# Usage: OUT=/tmp/x bash tools/nsys_session.sh [workload:variant ...]   (default: the whole GPU plan)
# RECORD_ARGS adds record_traces.py flags to both recordings, e.g. RECORD_ARGS=--triage for the
# blind-triage lab's cases.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-nsys-session-out}
TAG=${TAG:-h200}
mkdir -p "$OUT/nsys"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# NSIGHT_ENV: a script that puts nsys (and ncu) on PATH, for a machine where they are not on it already
if [ -n "${NSIGHT_ENV:-}" ]; then . "$NSIGHT_ENV"; fi
command -v nsys >/dev/null || { echo "nsys is not on PATH (install Nsight Systems, or set NSIGHT_ENV)" >&2; exit 2; }
nsys --version; ncu --version | tail -1
ONLY=()
for pair in "$@"; do ONLY+=(--only "$pair"); done
# shellcheck disable=SC2086  # RECORD_ARGS is a list of flags
timeout "${RECORD_TIMEOUT:-430}" python3 tools/record_traces.py --tag "$TAG" --nsys --out "$OUT/nsys" "${ONLY[@]}" ${RECORD_ARGS:-} 2>&1 | grep -v USDT | tee "$OUT/nsys/record.log"
if [ -z "${SKIP_TWINS:-}" ]; then
  # shellcheck disable=SC2086
  timeout "${RECORD_TIMEOUT:-430}" python3 tools/record_traces.py --tag "$TAG" --torch-pairs --out "$OUT/nsys" "${ONLY[@]}" ${RECORD_ARGS:-} 2>&1 | grep -v USDT | tee -a "$OUT/nsys/record.log"
fi
if [ -z "${SKIP_NCU:-}" ]; then
  KERNEL=$(python3 - "$OUT/nsys/sync_stall__fixed__$TAG.sqlite.gz" <<'PY'
import gzip, re, shutil, sqlite3, sys, tempfile
with tempfile.NamedTemporaryFile(suffix=".sqlite") as tmp:
    with gzip.open(sys.argv[1]) as src:
        shutil.copyfileobj(src, tmp)
    tmp.flush()
    db = sqlite3.connect(tmp.name)
    name = db.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                      "GROUP BY k.shortName ORDER BY SUM(k.end - k.start) DESC LIMIT 1").fetchone()[0]
print(re.escape(name[:60]))
PY
)
  echo "ncu top kernel regex: $KERNEL"
  timeout 120 ncu --csv --page details --set basic -k "regex:$KERNEL" -c 3 --clock-control none \
    --log-file "$OUT/nsys/sync_stall__fixed__$TAG.ncu.csv" \
    python3 -m helpers.workloads.sync_stall --variant fixed --steps 3 --warmup 2 > "$OUT/nsys/ncu.log" 2>&1
  echo "ncu rc $? kernel regex:$KERNEL" | tee -a "$OUT/nsys/record.log"
fi
