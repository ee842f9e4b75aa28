export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
step 480 70 python3 bench/explore_rows.py --case depthwise --budget 6 > $OUT/erd.log 2>&1
grep -E "^default|^best|^#0 " $OUT/erd.log | cut -c1-120
for r in 1 2 3; do step 480 45 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 --out $OUT/dab$r > $OUT/dab$r.log 2>&1; grep -E "^\| [0-9]+ \| (derived|manual) \(default\)" $OUT/dab$r.log | cut -c1-45; done
step 480 300 python3 bench/gpu_check.py --only gluon --out $OUT/gc > $OUT/gc.log 2>&1
grep -E "cases|^(WRONG|FAILED|not)" $OUT/gc.log | cut -c1-160; grep -E "gqa" $OUT/gc.log | cut -c1-100
