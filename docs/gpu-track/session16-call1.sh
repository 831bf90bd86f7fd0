#!/usr/bin/env bash
# Session 16 device call 1: the two-rank gloo jobs under Nsight Systems (NVTX-marked collectives
# and ranks, --trace=nvtx,osrt, whole run) with their PyTorch-profiler twins on the same machine's
# CPU cores; and the mystery:fixed nsys/profiler pair again (its 2026-12-03 pair disagreed).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
W=/tmp/rec; mkdir -p $W
nproc; uptime
python3 tools/record_traces.py --tag h200 --nsys --only mystery:fixed --out $W 2>&1 | tail -3
python3 tools/record_traces.py --tag h200 --torch-pairs --only mystery:fixed --out $W 2>&1 | tail -3
python3 tools/record_traces.py --tag cpu16 --comm --nsys --out $W 2>&1 | grep -v USDT | tail -14
python3 tools/record_traces.py --tag cpu16 --comm --torch-pairs --out $W 2>&1 | tail -8
uptime
ls -la $W | head -60
tar czf $OUT/rec.tgz -C $W --exclude='*.sqlite' .
ls -la $OUT
