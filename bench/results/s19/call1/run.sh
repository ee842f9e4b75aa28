#!/usr/bin/env bash
# s19 call 1: the lean native step (C++ call cache, node recorded before the launch, allocations without dispatch)
# against s18's (abcdb6b, .lead/pre): builds, native_check (new), host probes (alternating), grad_bench log-softmax (both)
T0=$(date +%s); LIM=${LIM:-560}
NEW="env PYTHONPATH=src TORCH_EXTENSIONS_DIR=/tmp/ext_new"
OLD="env PYTHONPATH=.lead/pre/src TORCH_EXTENSIONS_DIR=/tmp/ext_old"
step() { local name=$1 want=$2; shift 2
  local left=$(( LIM - ($(date +%s) - T0) - 10 )); (( left < 20 )) && { echo "SKIP $name"; return; }
  (( want > left )) && want=$left
  echo "=== $name (limit ${want}s) $(date +%T)"; timeout $want "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name $(date +%T)"; }
BUILD='import time; t=time.time()
from dtriton.backends.triton import native
m = native.module(); print("built", m is not None, native._state["failed"], round(time.time()-t, 1), "s")'
( $NEW python3 -c "$BUILD" > $OUT/build_new.log 2>&1 ) &
( cd .lead/pre && env PYTHONPATH=src TORCH_EXTENSIONS_DIR=/tmp/ext_old python3 -c "$BUILD" > $OUT/build_old.log 2>&1 ) &
wait
tail -1 $OUT/build_new.log; tail -1 $OUT/build_old.log
step check 110 $NEW python3 bench/native_check.py
grep -E "FAIL|native_check" $OUT/check.log | cut -c1-300 | head -12
for r in 1 2; do
  step host_new$r 30 $NEW python3 bench/probe_host_step.py --cases log_softmax softmax --n 300 --breakdown
  step host_old$r 30 $OLD python3 .lead/pre/bench/probe_host_step.py --cases log_softmax softmax --n 300 --breakdown
done
step grad_new 110 $NEW python3 bench/grad_bench.py --only log_softmax softmax --given-grad --native --floor --graph-step --rounds 7 --no-compile --out $OUT/grad_new
step grad_old 110 $OLD python3 .lead/pre/bench/grad_bench.py --only log_softmax softmax --given-grad --native --floor --graph-step --rounds 7 --no-compile --out $OUT/grad_old
for f in host_new1 host_old1 host_new2 host_old2; do echo "-- $f"; grep -E "^[a-z]|C\+\+ forward|forward |backward of" $OUT/$f.log | cut -c1-120; done
echo "-- grad_new"; grep -E "^\| " $OUT/grad_new.log | cut -c1-200
echo "-- grad_old"; grep -E "^\| " $OUT/grad_old.log | cut -c1-200
echo "total $(( $(date +%s) - T0 ))s"
