export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
mkdir -p $OUT/n $OUT/d
step 560 340 python3 bench/reductions.py --only norm --cases batchnorm,instancenorm,groupnorm8 --budget 25 --budget-for batchnorm=35 --profile --out $OUT/n > $OUT/norm.log 2>&1
grep -E "^norm .*(dtriton|torch|compile)" $OUT/norm.log | cut -c1-110
step 560 220 python3 bench/reductions.py --only dims --budget 15 --out $OUT/d > $OUT/dims.log 2>&1
grep -E "^dims .*(dtriton|torch|compile)" $OUT/dims.log | cut -c1-110
