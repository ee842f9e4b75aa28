#!/usr/bin/env bash
# s15 call 3: the final policy (every Triton kernel waits; kernels of <= 4096 programs signal first) against
# no dependent launch and against waits without signals; correctness (last_check, gpu_check)
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-560}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"
  grep -E "^\| |^norm |^pool |checks|^FAIL|^fail" $OUT/$name.log | grep -v " check " | cut -c1-150 | tail -n 40; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
step dab 60 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 100000 --impls "default,no dependent" --out $OUT/dab
step polA 170 python3 bench/reductions.py --only norm,pool --cases frobenius,layernorm,instancenorm,groupnorm,pool --budget 0 --warm-ms 300 --variants 'nopdl={"dependent_launch": false}' --out $OUT/polA
step polB 90 python3 bench/reductions.py --only norm,pool --cases frobenius,layernorm,instancenorm,groupnorm,pool --budget 0 --warm-ms 300 --no-compile --pdl-signal end --out $OUT/polB
step last 50 python3 bench/last_check.py --cases fro,ln --calls 20
step gc 260 python3 bench/gpu_check.py --out $OUT/gc
