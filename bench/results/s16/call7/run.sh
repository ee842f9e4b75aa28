#!/usr/bin/env bash
# s16 call 7: layer norm's backward (fp16 4096x8192): per-kernel GPU times and rates, default vs partials,
# and what dt.explore finds for the backward's schedule (issue 15)
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-280}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step lnbwd 260 python3 bench/probe_ln_bwd.py --budget 100
grep -v Warning $OUT/lnbwd.log | grep -v "^  " | cut -c1-260 | tail -30
