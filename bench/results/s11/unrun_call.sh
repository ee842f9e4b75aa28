export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step ${LIM:-480} 90 python3 bench/gpu_check.py --only gluon-conv --out /tmp/gc > $OUT/gcc.log 2>&1
grep -E "^(ok|WRONG|FAILED|not)" $OUT/gcc.log | cut -c1-150
step ${LIM:-480} 120 python3 bench/conv.py --cases "conv2d 3x3" --budget 15 --out /tmp/conv > $OUT/conv.log 2>&1
tail -8 $OUT/conv.log | cut -c1-200
step ${LIM:-480} 60 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 100000 --out /tmp/dab > $OUT/dab.log 2>&1
tail -8 $OUT/dab.log | cut -c1-200
step ${LIM:-480} 40 python3 bench/probe_host_step.py --cases layer_norm softmax log_softmax --n 100 --top 10 > $OUT/host.log 2>&1
grep -v "^  " $OUT/host.log
step ${LIM:-480} 100 python3 bench/probe_depthwise2.py --budget-s 65 --out /tmp/dw > $OUT/dw.log 2>&1
tail -16 $OUT/dw.log | cut -c1-160
step ${LIM:-480} 100 python3 bench/reductions.py --only norm --cases batchnorm,layernorm_chw,frobenius --budget 0 --no-compile --profile --variants "$(cat .lead/variants.txt)" --out /tmp/red > $OUT/red.log 2>&1
grep -E "^norm" $OUT/red.log | cut -c1-60,100-130 | head -60
