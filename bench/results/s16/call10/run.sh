#!/usr/bin/env bash
# s16 call 10: host time of the softmax and log-softmax steps (log-softmax call 0.081 ms at GPU 0.0485, softmax 0.064)
export PYTHONPATH=src
timeout 150 python3 bench/probe_host_step.py --cases softmax log_softmax --n 300 --top 25 > $OUT/host.log 2>&1; echo rc=$?
grep -v Warning $OUT/host.log | cut -c1-150
