export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
mkdir -p $OUT/pv $OUT/pool
step 470 250 python3 bench/probe_out_ablate.py --budget 210 --out $OUT/pv > $OUT/pv.log 2>&1
sed -n '/^case  shape/,$p' $OUT/pv.log | grep -E "call|linear|_out |rows" | cut -c1-96
step 470 200 python3 bench/reductions.py --only pool --dtypes float32,float16 --budget 8 --out $OUT/pool > $OUT/pool.log 2>&1
grep -E "^pool .*(dtriton|torch|compile)" $OUT/pool.log | cut -c1-110 | tail -n 24
