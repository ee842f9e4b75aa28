#!/usr/bin/env bash
# s16 call 1: batch norm's output kernel forms (issue 16): printed vs per-channel affine / scale / rsqrt
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-400}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step ablate 330 python3 bench/probe_out_ablate.py --cases bn --dtypes float16,float32 --ablate --budget 280 --warm-ms 200 --out $OUT/ablate
grep -E "^bn " $OUT/ablate.log | grep -v " us " | cut -c1-120
