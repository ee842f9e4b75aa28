#!/usr/bin/env bash
# s18 call 3: attention D64 (full and causal) GPU time before (7a15b28, .lead/pre) and after the exact-max rewrite (HEAD), graph-step, 3 rounds, in turn
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-420}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
for t in post pre post2; do
  if [ $t = pre ]; then P=.lead/pre/src; B=.lead/pre/bench; else P=src; B=bench; fi
  step attn_$t 150 env PYTHONPATH=$P python3 $B/grad_bench.py --only attention_d64 attention_causal_d64 --given-grad --no-compile --graph-step --rounds 3 --out $OUT/attn_$t
  grep -E "^\| " $OUT/attn_$t.log | cut -c1-220
done
echo "total $(( $(date +%s) - T0 ))s"
