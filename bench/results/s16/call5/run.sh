#!/usr/bin/env bash
# s16 call 5: (a) the split fp16 column sum 3.8e-2 off at 1031x997 (call 4): tl.range unroll with a trip count
# the factor does not divide; (b) layer norm's backward, dw/db by the last program vs partials, with and
# without dependent launch (graph time 4 us apart in calls 3 and 4)
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-300}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step unroll 120 python3 bench/probe_unroll.py
cat $OUT/unroll.log | grep -v Warning | cut -c1-200
step grad 160 python3 bench/grad_bench.py --only layer_norm --given-grad --graph-step --rounds 3 --no-compile --out $OUT/grad \
  --variant 'partials={"layer_norm_grad_X_w_b": {"split_mode": "partials"}}' \
  --variant 'last nopdl={"layer_norm_grad_X_w_b": {"dependent_launch": false}}' \
  --variant 'partials nopdl={"layer_norm_grad_X_w_b": {"split_mode": "partials", "dependent_launch": false}}'
grep -E "^\| " $OUT/grad.log | cut -c1-200
