export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
mkdir -p $OUT/n $OUT/p
step 540 260 python3 bench/reductions.py --only norm --cases frobenius,batchnorm --budget 30 --budget-for batchnorm=0 --warm-ms 300 --profile --variants 'blk[frobenius]={"split_order":"blocked"}' --out $OUT/n > $OUT/norm.log 2>&1
grep -E "^norm .*(dtriton|torch|compile)" $OUT/norm.log | cut -c1-110
step 540 280 python3 bench/reductions.py --only pool --budget 15 --warm-ms 150 --out $OUT/p > $OUT/pool.log 2>&1
grep -E "^pool .*(dtriton|torch|compile)" $OUT/pool.log | cut -c1-110
