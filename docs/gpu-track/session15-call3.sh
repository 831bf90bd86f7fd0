#!/usr/bin/env bash
# Session 15 device call 3: re-record sync_stall:fixed with a longer warm-up, a GPU idle capture, then every solution under nbval.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
. .dev/shared-device/nsight-env.sh
O=/tmp/o; mkdir -p $O/data $O/s; cp data/manifest.json $O/data/
P="--only sync_stall:fixed"
timeout 90 python3 tools/record_traces.py --tag h200 --out $O/data $P 2>&1 | grep -v USDT | tail -2 | cut -c1-400
timeout 90 python3 tools/record_traces.py --tag h200 --nsys --out $O/s $P 2>&1 | grep -v USDT | tail -3
timeout 60 python3 tools/record_traces.py --tag h200 --torch-pairs --out $O/s $P 2>&1 | tail -2
timeout 60 python3 -c "import time, torch, helpers; from torch.profiler import profile, ProfilerActivity as A; x=torch.randn(2048,2048,device='cuda'); p=profile(activities=[A.CPU,A.CUDA]); p.start(); [((x@x).sum().item(), time.sleep(0.5)) for _ in range(20)]; p.stop(); p.export_chrome_trace('$O/idle_capture__h200.json'); print([f.pattern for f in helpers.diagnose(helpers.load('$O/idle_capture__h200.json'))])" 2>&1 | grep -v USDT | tail -2
gzip -f $O/idle_capture__h200.json
tar czf $OUT/rec.tgz -C $O .
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 -m pytest solutions/ -p no:cacheprovider -o addopts="" --nbval-lax --nbval-current-env --durations=0 -q --junitxml=$OUT/nbval.xml 2>&1 | grep -v USDT | tail -45 > $OUT/nbval.log
echo "nbval exit: ${PIPESTATUS[0]}" >> $OUT/nbval.log
tail -45 $OUT/nbval.log
