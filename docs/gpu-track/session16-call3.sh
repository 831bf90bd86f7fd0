#!/usr/bin/env bash
# Session 16 device call 3: the six two-rank gloo jobs under nsys (NVTX-marked collectives and
# ranks, --trace=nvtx,osrt, no CPU sampling, --osrt-threshold=10000, whole run) and their
# PyTorch-profiler twins, each rank pinned to one core as the course's CPU recordings ran.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
W=/tmp/rec3; mkdir -p $W; uptime
python3 tools/record_traces.py --tag h200cpu --comm --nsys --out $W 2>&1 | grep -v USDT | tail -14
python3 tools/record_traces.py --tag h200cpu --comm --torch-pairs --out $W 2>&1 | tail -8
uptime
cd $W && rm -f *.sqlite && for v in tiny_buckets bf16_hook no_sync imbalance; do rm -f communication__${v}__h200cpu.nsys-rep; done
ls -la $W | head -70
tar czf $OUT/rec3.tgz -C $W . && ls -la $OUT
