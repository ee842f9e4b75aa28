#!/usr/bin/env bash
# s19 call 5: after the review refactor of native_step.cpp (7d1e555): build, native_check, s19_check
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-240}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 120 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step check 80 python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | cut -c1-300 | head -12
step s19 60 python3 bench/s19_check.py
grep -E "FAIL|s19_check|cache" $OUT/s19.log | cut -c1-200
echo "total $(( $(date +%s) - T0 ))s"
