export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
mkdir -p $OUT/pv
step 200 45 python3 bench/last_check.py --calls 5 > $OUT/lc.log 2>&1
grep -vE "^ok " $OUT/lc.log | tail -n 6 | cut -c1-150
step 200 150 python3 bench/probe_out_ablate.py --budget 120 --out $OUT/pv > $OUT/pv.log 2>&1
sed -n '/^case  shape/,$p' $OUT/pv.log | grep -E "call|linear|rows" | cut -c1-96
