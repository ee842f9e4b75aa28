#!/usr/bin/env bash
# s15 call 2: dependent launch for kernels of <= 4096 programs (norms, diffusion); signal at the end; 3x3 pools default
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-480}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"
  grep -E "^\| |^norm |^pool " $OUT/$name.log | grep -v check | cut -c1-150 | tail -n 30; }
step dab 80 python3 bench/diffusion_bwd_ab.py --V 2000 20000 100000 --impls "default,no dependent"
step n_thr 150 python3 bench/reductions.py --only norm --cases frobenius,layernorm,instancenorm --budget 0 --warm-ms 300 --variants 'nopdl={"dependent_launch": false}'
step n_end 90 python3 bench/reductions.py --only norm --cases frobenius,layernorm --budget 0 --warm-ms 300 --no-compile --pdl-signal end --pdl-max-programs 1000000000
step pool3 130 python3 bench/reductions.py --only pool --cases 3x3 --budget 0 --warm-ms 300
