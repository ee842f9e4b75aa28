#!/usr/bin/env bash
# s15 call 1: dependent launch A/B (norms, diffusion step), correctness
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-540}
step() { # name seconds cmd...
  local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 ))
  (( left < 20 )) && { echo "SKIP $name (no time)"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"
  timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; tail -n 40 $OUT/$name.log
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step norm 260 python3 bench/reductions.py --only norm --budget 0 --warm-ms 300 --variants 'nopdl={"dependent_launch": false}' --out $OUT/red
step dab 150 python3 bench/diffusion_bwd_ab.py --V 2000 20000 --impls "default,no dependent" --out $OUT/dab
step gc 200 python3 bench/gpu_check.py --out $OUT/gc
