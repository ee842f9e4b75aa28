#!/usr/bin/env bash
# s18 call 4: dominated rows on the GPU's compiled code: cross-entropy >= 0, log-softmax max <= 0, before (7a15b28) and after the exact-max rewrite
export TORCH_EXTENSIONS_DIR=/tmp/dt_ext DTRITON_NATIVE_STEPS=0
echo "=== after (HEAD)"; PYTHONPATH=src timeout 200 python3 bench/s18_exact_check.py 2>&1 | grep -v Warn | tail -12
echo "=== before (7a15b28)"; PYTHONPATH=.lead/pre/src timeout 200 python3 .lead/s18_exact_check.py 2>&1 | grep -v Warn | tail -12
