#!/usr/bin/env bash
# s18 call 2: after the exact-max rewrite (base2_exponents keeps max(X)), the float32 floor of saved statistics beside row outputs, native constants/launch_counts/batched checks: native_check, s18_check, the softmax family and attention d64 side by side
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-540}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print(native.extension_name()); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step grad1 200 python3 bench/grad_bench.py --only log_softmax softmax cross_entropy --given-grad --native --floor --graph-step --rounds 7 --out $OUT/grad1
grep -E "^\| " $OUT/grad1.log | cut -c1-200
step check 150 python3 bench/native_check.py
grep -E "FAIL|native_check|conv1d.*native node|pool.*native node" $OUT/check.log | cut -c1-300 | head -20
step s18 150 python3 bench/s18_check.py
grep -E "FAIL|s18_check|cross_entropy" $OUT/s18.log | cut -c1-250 | head -20
step attn 150 python3 bench/grad_bench.py --only attention_d64 attention_causal_d64 --given-grad --native --no-compile --rounds 3 --out $OUT/attn
grep -E "^\| " $OUT/attn.log | cut -c1-200
step host 40 python3 bench/probe_host_step.py --cases log_softmax --n 300 --breakdown
grep -E "^[a-z]" $OUT/host.log
echo "total $(( $(date +%s) - T0 ))s"
