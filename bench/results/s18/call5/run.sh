#!/usr/bin/env bash
# s18 call 5 (main after every s18 change): build, dominated rows (exact base-2 form), native_check, s18_check, the issue-15 softmax family / norms / cross-entropy rows side by side, attention D64 graph time
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-500}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print(native.extension_name()); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step exact 60 python3 bench/s18_exact_check.py
grep -E "FAIL|ok  |s18_exact" $OUT/exact.log | cut -c1-200
step grad1 170 python3 bench/grad_bench.py --only log_softmax softmax cross_entropy --given-grad --native --floor --graph-step --rounds 9 --out $OUT/grad1
grep -E "^\| " $OUT/grad1.log | cut -c1-200
step check 100 python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | cut -c1-300 | head -12
step s18 80 python3 bench/s18_check.py
grep -E "FAIL|s18_check" $OUT/s18.log | cut -c1-250 | head -12
step grad2 120 python3 bench/grad_bench.py --only layer_norm rms_norm --given-grad --native --graph-step --rounds 5 --out $OUT/grad2
grep -E "^\| " $OUT/grad2.log | cut -c1-200
step host 30 python3 bench/probe_host_step.py --cases log_softmax --n 300
grep -E "^[a-z]" $OUT/host.log
echo "total $(( $(date +%s) - T0 ))s"
