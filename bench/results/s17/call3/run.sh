#!/usr/bin/env bash
# s17 call 3: native steps: training steps of the issue-15 cases, 7 rounds in turn
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-560}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step host 60 python3 bench/probe_host_step.py --cases log_softmax --n 300 --breakdown
grep -v "^  [ 0-9]" $OUT/host.log
step grad 420 python3 bench/grad_bench.py --only log_softmax softmax cross_entropy layer_norm rms_norm --given-grad --native --rounds 7 --out $OUT/grad
grep -E "^\| " $OUT/grad.log | cut -c1-160
