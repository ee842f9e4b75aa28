#!/usr/bin/env bash
# s15 call 4: the final policy on the training steps (issue 15), batch norm, the 2x2 fp32 pools explored
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-370}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"
  grep -E "^\| |^norm |^pool |^ *[a-z_]+ .*ms" $OUT/$name.log | grep -v " check " | cut -c1-160 | tail -n 40; }
step bn 110 python3 bench/reductions.py --only norm --cases batchnorm --budget 0 --warm-ms 300 --variants 'nopdl={"dependent_launch": false}'
step pool 100 python3 bench/reductions.py --only pool --cases avgpool2d,maxpool2d --dtypes float32 --budget 20 --warm-ms 300
step grad 150 python3 bench/grad_bench.py --only layer_norm log_softmax softmax --given-grad --graph-step --out $OUT/grad
