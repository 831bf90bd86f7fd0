#!/usr/bin/env bash
# Session 16 device call 4: lab 04 (with its new Nsight Systems part) and lab 00 under nbval on the
# H200 machine, nsys and ncu on PATH.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
git log --oneline -1 2>/dev/null || true
uptime
timeout 400 python3 -m pytest solutions/04_communication.ipynb solutions/00_tools_and_first_profile.ipynb -p no:cacheprovider -o addopts="" --nbval-lax --nbval-current-env -q --durations=5 --junitxml=$OUT/nbval.xml 2>&1 | grep -v USDT | tail -15 > $OUT/nbval.log
echo "nbval exit: ${PIPESTATUS[0]}" >> $OUT/nbval.log
uptime >> $OUT/nbval.log
cat $OUT/nbval.log
