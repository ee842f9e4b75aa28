#!/usr/bin/env bash
# s16 call 6: the split-slice fix on the GPU (probe_unroll: every row ok, the hand-written negative trip counts
# shown), split_mode="last" with absorbed outputs (last_check: column sum, batch norm, Frobenius), gpu_check
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-500}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step unroll 90 python3 bench/probe_unroll.py
grep -v Warning $OUT/unroll.log | cut -c1-220
step last 130 python3 bench/last_check.py --cases col,bn,fro --calls 20
grep -E "FAIL|checks" $OUT/last.log | head
step gc 260 python3 bench/gpu_check.py --out $OUT/gc
grep -E "cases|^(WRONG|FAILED|not|FAIL)" $OUT/gc.log | cut -c1-160 | tail -8
