#!/usr/bin/env bash
# s17 call 6: after the review fixes (counters held by the plan, fresh-thread context, forward AD, multi-launcher and keyed-int variants, background build): native_check, host, the issue-15 rows side by side, 7 rounds
# side by side (Python node / native node / eager / torch.compile), 7 rounds in turn
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-480}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print(native.extension_name()); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step check 150 python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | head -20
step host 60 python3 bench/probe_host_step.py --cases log_softmax layer_norm --n 300 --breakdown
grep -E "^[a-z]|^    [a-zC]" $OUT/host.log
step grad 330 python3 bench/grad_bench.py --only log_softmax softmax cross_entropy layer_norm rms_norm diffusion --given-grad --native --rounds 7 --out $OUT/grad
grep -E "^\| " $OUT/grad.log | cut -c1-170
