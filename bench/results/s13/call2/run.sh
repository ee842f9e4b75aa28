export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
mkdir -p $OUT/ab
step 560 330 python3 bench/probe_out_ablate.py --budget 260 --out $OUT/ab > $OUT/ab.log 2>&1
sed -n '/^case  shape/,$p' $OUT/ab.log | grep -vE " (fwd norestate|norestate|w2|w8) " | cut -c1-96
for r in 1 2; do step 560 80 python3 bench/diffusion_bwd_ab.py --V 2000 6000 20000 100000 > $OUT/dab$r.log 2>&1; grep -E "^\| [0-9]+ \| (derived|manual) \(default\)" $OUT/dab$r.log | cut -c1-45; done
grep -E "^V=(6000|20000) .*(derived|manual) \(default\)" $OUT/dab1.log | sed 's/backward per kernel.*step per/step per/' | cut -c1-600
