#!/usr/bin/env bash
# Session 15 device call 4: every solution under nbval on the final commit.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
git log --oneline -1 2>/dev/null || true
timeout 420 python3 -m pytest solutions/ -p no:cacheprovider -o addopts="" --nbval-lax --nbval-current-env -q --junitxml=$OUT/nbval.xml 2>&1 | grep -v USDT | tail -15 > $OUT/nbval.log
echo "nbval exit: ${PIPESTATUS[0]}" >> $OUT/nbval.log
tail -15 $OUT/nbval.log
