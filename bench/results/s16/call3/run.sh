#!/usr/bin/env bash
# s16 call 3: layer norm / RMSNorm training steps with dw(/db) folded and stored by the last program (issue 15):
# backward 2 kernels (was 3: "partials" row), call / graph times vs eager and torch.compile; host time of the step
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-400}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step grad 230 python3 bench/grad_bench.py --only layer_norm rms_norm --given-grad --graph-step --out $OUT/grad \
  --variant 'partials={"layer_norm_grad_X_w_b": {"split_mode": "partials"}}' --variant 'partials={"rms_norm_grad_X_w": {"split_mode": "partials"}}'
grep -E "^\| " $OUT/grad.log | cut -c1-220
step host 120 python3 bench/probe_host_step.py --cases layer_norm --n 200 --top 12
grep -E "enqueue|us per step" -A0 $OUT/host.log | cut -c1-150
