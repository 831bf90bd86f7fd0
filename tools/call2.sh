cd .dev && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; . shared-device/nsight-env.sh >/dev/null; D=$OUT/r; mkdir -p $D; R=tools/record_traces.py
H="--only host_bound:broken --only host_bound:synced --only host_bound:fixed"
timeout 245 python3 $R --tag h200 --nsys --out $D $H --triage 2>&1 | grep -v USDT
timeout 150 python3 $R --tag h200 --torch-pairs --out $D $H --triage 2>&1 | grep -v USDT
P="--only sync_stall:broken --only sync_stall:fixed --only data_stall:broken --only launch_overhead:broken --only h2d_copy:broken --only mystery:broken --only launch_overhead:graphs --only data_stall:fixed --only h2d_copy:fixed --only mystery:fixed"
timeout 95 python3 $R --tag h200 --torch-pairs --out $D $P 2>&1 | grep -v USDT
cd $OUT && tar czf - r | split -b 15M - r.tar.gz. ; rm -rf r; ls -la
