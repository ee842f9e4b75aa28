#!/usr/bin/env bash
# s16 call 4: (a) GPU correctness of the last program storing outputs (last_check incl. a split column sum,
# gpu_check); (b) training steps in 5 rounds (implementations in turn): layer norm / RMSNorm with dw(/db)
# stored by the last program (backward 2 kernels) vs "partials" (3), softmax, log-softmax (issue 15)
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-430}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step last 100 python3 bench/last_check.py --cases col,bn --calls 20
grep -E "FAIL|checks" $OUT/last.log | head
step grad 300 python3 bench/grad_bench.py --only layer_norm rms_norm softmax log_softmax --given-grad --graph-step --rounds 5 --out $OUT/grad \
  --variant 'partials={"layer_norm_grad_X_w_b": {"split_mode": "partials"}}' --variant 'partials={"rms_norm_grad_X_w": {"split_mode": "partials"}}'
grep -E "^\| " $OUT/grad.log | cut -c1-200
