#!/usr/bin/env bash
# s19 call 4: main after the call cache and the poisoned reads (f9f0eb7): host-bound check (do_bench-style loop, host vs GPU per step),
# the issue-15 rows side by side (softmax family + cross-entropy with torch.compile, 9 rounds; norms, 5 rounds), host-bound check again
export PYTHONPATH=src
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext
T0=$(date +%s); LIM=${LIM:-430}
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
step build 200 python3 -c "
import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print('built', m is not None, native._state['failed'], round(time.time()-t, 1), 's')"
tail -1 $OUT/build.log
step bound1 70 python3 bench/host_bound.py --rounds 5
step grad1 190 python3 bench/grad_bench.py --only log_softmax softmax cross_entropy --given-grad --native --floor --graph-step --rounds 9 --out $OUT/grad1
step grad2 130 python3 bench/grad_bench.py --only layer_norm rms_norm --given-grad --native --graph-step --rounds 5 --out $OUT/grad2
for f in bound1; do echo "-- $f"; grep -E "^\|" $OUT/$f.log; done
echo "-- grad1"; grep -E "^\| " $OUT/grad1.log | cut -c1-200
echo "-- grad2"; grep -E "^\| " $OUT/grad2.log | cut -c1-200
echo "total $(( $(date +%s) - T0 ))s"
