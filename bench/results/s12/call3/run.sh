export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
step 560 70 python3 bench/explore_rows.py --case depthwise --budget 8 > $OUT/erd.log 2>&1
grep -E "^default|^best|^#0 " $OUT/erd.log | cut -c1-120
step 560 60 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 100000 --out $OUT/dab > $OUT/dab.log 2>&1
tail -n 8 $OUT/dab.log | cut -c1-200
step 560 160 python3 bench/conv.py --cases depthwise --budget 15 --out $OUT/conv > $OUT/conv.log 2>&1
grep -E "^depthwise|#0 " $OUT/conv.log | cut -c1-110
step 560 60 python3 bench/gqa_bwd_check.py > $OUT/gqa.log 2>&1
tail -n 5 $OUT/gqa.log | cut -c1-200
step 560 250 python3 bench/gpu_check.py --only gluon --out $OUT/gc > $OUT/gc.log 2>&1
grep -E "cases|^(WRONG|FAILED|not)" $OUT/gc.log | cut -c1-160; grep -c "^ok" $OUT/gc.log; grep -E "^ok +grad" $OUT/gc.log | cut -c1-90
