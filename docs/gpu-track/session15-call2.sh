#!/usr/bin/env bash
# Session 15 device call 2: new variants + sync_stall re-record (traces, nsys, twins), timings, GPU nbval of labs 01-03.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
O=/tmp/o; mkdir -p $O/data $O/s; cp data/manifest.json $O/data/
P="--only launch_overhead:compile_foreach --only h2d_copy:pinned_blocking --only sync_stall:broken --only sync_stall:fixed"
timeout 170 python3 tools/record_traces.py --tag h200 --out $O/data $P 2>&1 | grep -v USDT | tee $O/record.log | cut -c1-300
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
timeout 200 python3 tools/record_traces.py --tag h200 --nsys --out $O/s $P 2>&1 | grep -v USDT | tail -8
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
timeout 100 python3 tools/record_traces.py --tag h200 --torch-pairs --out $O/s $P 2>&1 | tail -4
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
for v in foreach compile compile_foreach; do echo "timing $v"; timeout 100 python3 -m helpers.workloads.launch_overhead --variant $v --steps 30 --warmup 3 2>&1 | grep -v USDT | tail -1; done | tee $O/compile_timing.log
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
timeout 60 python3 - <<'PY' 2>&1 | grep -v USDT | tee $O/nowarmup.log
import torch, helpers
from helpers import checks
from helpers.workloads import launch_overhead as lo
try:
    t = helpers.capture(lo.make_step("graphs_nowarmup", torch.device("cuda")), steps=3, out_dir="/tmp/nowarm")
    c = checks.launch_counts(t)
    print({k: c[k] for k in ("graph_launches", "kernel_launches", "graph_kernels", "graph_fills")})
except Exception as exc:
    print("graphs_nowarmup raised:", type(exc).__name__, str(exc)[:300])
PY
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
timeout 90 python3 - <<'PY' 2>&1 | grep -v USDT | tee $O/h2d_bw.log
import torch, helpers
from helpers import metrics
from helpers.workloads import h2d_copy as h
d = torch.device("cuda")
for v in h.VARIANTS:
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
    c = metrics.copy_stats(helpers.capture(h.make_step(v, d), steps=5, out_dir="/tmp/h2d", name=v))
    print(v, c.loc[c.copy_kind == "H2D"].to_string(index=False))
PY
tar czf $OUT/rec.tgz -C $O . 2>/dev/null
tar czf $OUT/rec.tgz -C $O .
