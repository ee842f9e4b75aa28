export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
step 540 90 python3 bench/explore_rows.py --case depthwise --budget 10 > $OUT/erd.log 2>&1
grep -v "^  \|Warning" $OUT/erd.log | cut -c1-230 | head -40
step 540 80 python3 bench/explore_rows.py --case conv2d --budget 10 > $OUT/erc.log 2>&1
grep -v "^  \|Warning" $OUT/erc.log | cut -c1-150 | head -12
step 540 330 python3 bench/gpu_check.py --only gluon --out $OUT/gc > $OUT/gc.log 2>&1
grep -E "cases|^(WRONG|FAILED|not)" $OUT/gc.log | cut -c1-160
