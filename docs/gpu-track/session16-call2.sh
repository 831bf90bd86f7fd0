#!/usr/bin/env bash
# Session 16 device call 2 (same machine as call 1, still warm): the gloo jobs under nsys again
# without CPU sampling and with --osrt-threshold=10000 (call 1's whole-run reports were 4.5 MB of
# gzipped SQLite each, mostly CPU samples and import-time file stats); then pack call 1's twins and
# mystery pair with the new reports.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
W=/tmp/rec2; mkdir -p $W; uptime
python3 tools/record_traces.py --tag cpu16 --comm --nsys --out $W 2>&1 | grep -v USDT | tail -14
uptime
cd /tmp/rec && cp -r communication__*__cpu16 *.torch.meta.json mystery__fixed__h200.* $W/ 2>/dev/null
cd $W && rm -f *.sqlite && for v in tiny_buckets bf16_hook no_sync imbalance; do rm -f communication__${v}__cpu16.nsys-rep; done
ls -la $W | head -70
tar czf $OUT/rec.tgz -C $W . && ls -la $OUT
