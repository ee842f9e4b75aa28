#!/usr/bin/env bash
# s19 call 3 (correctness on the GPU after the call cache and the poisoned reads): s19_check (call cache under
# changing layouts; NaN for out-of-range gathers), gpu_check (every library algorithm), index_check, native_check
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
step s19 120 python3 bench/s19_check.py
cat $OUT/s19.log | cut -c1-200 | tail -12
step check 110 python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | cut -c1-300 | head -12
step index 90 python3 bench/index_check.py --out $OUT/index
grep -E "FAIL|PASS" $OUT/index.log | cut -c1-160 | head -20
step gc 260 python3 bench/gpu_check.py --out $OUT/gc
grep -E "cases|^(WRONG|FAILED|not|FAIL)" $OUT/gc.log | cut -c1-160 | tail -8
echo "total $(( $(date +%s) - T0 ))s"
