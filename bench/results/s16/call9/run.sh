#!/usr/bin/env bash
# s16 call 9: softmax, log-softmax, cross-entropy training steps, 5 rounds in turn (issue 15 call-time marks)
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-250}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step grad 230 python3 bench/grad_bench.py --only softmax log_softmax cross_entropy --given-grad --graph-step --rounds 5 --out $OUT/grad
grep -E "^\| " $OUT/grad.log | cut -c1-200
