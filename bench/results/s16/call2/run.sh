#!/usr/bin/env bash
# s16 call 2: batch norm default / finish / explored vs torch.compile (issue 16), both dtypes, fp16 twice
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-420}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"
  grep -E "^norm |explored|candidates" $OUT/$name.log | grep -v " check " | cut -c1-200 | tail -n 30; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step bn16 200 python3 bench/reductions.py --only norm --cases batchnorm --dtypes float16 --budget 75 --warm-ms 300 --variants 'finish={"split_mode": "finish"}' --out $OUT/bn16
step bn32 190 python3 bench/reductions.py --only norm --cases batchnorm --dtypes float32 --budget 60 --warm-ms 300 --variants 'finish={"split_mode": "finish"}' --out $OUT/bn32
