#!/usr/bin/env bash
# s16 call 8: the final default (dw/db folded and stored by the last program, its row loop pipelined 3 deep):
# layer norm / RMSNorm training steps, 5 rounds in turn, vs eager and torch.compile (issue 15); the backward's kernels
export PYTHONPATH=src
T0=$(date +%s); LIM=${LIM:-330}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step lnbwd 60 python3 bench/probe_ln_bwd.py --budget 0
grep -v Warning $OUT/lnbwd.log | grep -v "^  " | cut -c1-120 | tail -8
step grad 250 python3 bench/grad_bench.py --only layer_norm rms_norm --given-grad --graph-step --rounds 5 --out $OUT/grad \
  --variant 'partials={"layer_norm_grad_X_w_b":{"split":{"i":8},"split_mode":"partials","stages":{"d_w":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128}},"d_b":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128}},"out1":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128},"grid":["j"]},"out2":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128},"grid":["j"]}}}}' \
  --variant 'partials={"rms_norm_grad_X_w":{"split":{"i":8},"split_mode":"partials","stages":{"d_w":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128}},"out1":{"num_warps":4,"strategy":{"i":"loop"},"tile":{"i":32,"j":128},"grid":["j"]}}}}'
grep -E "^\| " $OUT/grad.log | cut -c1-200
