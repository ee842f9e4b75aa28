#!/usr/bin/env bash
# s18 call 1: native_check (conv1d diagnostics), host probe, the softmax-family rows with the autograd floor row and graph-step GPU time, 9 rounds; then CE/LN/RMS 7 rounds
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
step grad1 200 python3 bench/grad_bench.py --only log_softmax softmax --given-grad --native --floor --graph-step --rounds 9 --out $OUT/grad1
grep -E "^\| " $OUT/grad1.log | cut -c1-200
step host 60 python3 bench/probe_host_step.py --cases log_softmax --n 300 --breakdown
grep -E "^[a-z]|^    [a-zC]" $OUT/host.log
step check 150 python3 bench/native_check.py
grep -E "FAIL|native_check|conv1d" $OUT/check.log | cut -c1-400 | head -20
step grad2 150 python3 bench/grad_bench.py --only layer_norm rms_norm cross_entropy --given-grad --native --floor --rounds 5 --out $OUT/grad2
grep -E "^\| " $OUT/grad2.log | cut -c1-200
echo "total $(( $(date +%s) - T0 ))s"
