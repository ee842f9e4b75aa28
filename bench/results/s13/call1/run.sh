export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step 560 100 python3 bench/last_check.py --calls 20 > $OUT/lc.log 2>&1
grep -vE "^ok " $OUT/lc.log | tail -n 12 | cut -c1-150
for r in 1 2; do step 560 50 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 --out $OUT/dab$r > $OUT/dab$r.log 2>&1; grep -E "^\| [0-9]+ \| (derived|manual) \(default\)" $OUT/dab$r.log | cut -c1-45; done
mkdir -p $OUT/ab
step 560 330 python3 bench/probe_out_ablate.py --budget 290 --out $OUT/ab > $OUT/ab.log 2>&1
sed -n '/^case  shape/,$p' $OUT/ab.log | cut -c1-100
