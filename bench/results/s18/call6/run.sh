#!/usr/bin/env bash
# s18 call 6: where the native log-softmax step's host time goes against eager's (torch.profiler)
export PYTHONPATH=src TORCH_EXTENSIONS_DIR=/tmp/dt_ext
timeout 200 python3 bench/profile_native_step.py --n 300 --rows 24 2>&1 | grep -v "USDT\|Warn" | tee $OUT/profile.log | tail -60
timeout 40 python3 bench/probe_host_step.py --cases log_softmax --n 300 > $OUT/host.log 2>&1; grep -E "^[a-z]" $OUT/host.log
