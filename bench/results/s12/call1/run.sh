export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step 560 190 python3 bench/gpu_check.py --only gluon --out $OUT/gc > $OUT/gc.log 2>&1
grep -E "cases|^(WRONG|FAILED|not)" $OUT/gc.log | cut -c1-160
step 560 170 python3 bench/conv.py --cases depthwise --budget 15 --out $OUT/conv > $OUT/conv.log 2>&1
grep -E "^depthwise" $OUT/conv.log | cut -c1-110
step 560 330 python3 bench/probe_flat.py --out $OUT/pf --budget 150 > $OUT/pf.log 2>&1
tail -n 60 $OUT/pf.log | cut -c1-130
