#!/usr/bin/env bash
# s16 call 11: RMSNorm's and layer norm's backward per kernel: last vs partials, 3 vs 2 stages (RMSNorm's step
# graph was 4 us slower with the new default in call 8)
export PYTHONPATH=src
for c in rms_norm layer_norm; do
  timeout 100 python3 bench/probe_ln_bwd.py --case $c --budget 0 > $OUT/$c.log 2>&1; echo "rc=$? $c"
  grep -v Warning $OUT/$c.log | grep -v "^  " | cut -c1-100 | tail -13
done
