#!/usr/bin/env bash
# s17 call 5: native steps with absent-gradient zeros: native_check; the DiffusionNet demo (its layer's
# training step now native); log-softmax steps again on this lease
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-420}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step check 120 python3 bench/native_check.py
grep -E "FAIL|native_check|atomics" $OUT/check.log | head -20
step grad 80 python3 bench/grad_bench.py --only log_softmax --given-grad --native --rounds 7 --out $OUT/grad
grep -E "^\| " $OUT/grad.log | cut -c1-170
step demo 200 python3 -m dtriton.examples.diffusionnet.demo --no-sweep --out $OUT/demo
grep -E "^\| |Speed vs" $OUT/demo/report.md | head -14
