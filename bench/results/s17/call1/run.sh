#!/usr/bin/env bash
# s17 call 1: native steps (C++ autograd node): build, correctness, host time, log-softmax/softmax steps
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
tail -3 $OUT/build.log
step check 150 python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | head -30
step host 100 python3 bench/probe_host_step.py --cases log_softmax softmax --n 300
cat $OUT/host.log | grep -v "^  "
step grad 200 python3 bench/grad_bench.py --only log_softmax softmax --given-grad --native --rounds 5 --out $OUT/grad
grep -E "^\| " $OUT/grad.log | cut -c1-200
