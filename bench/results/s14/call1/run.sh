export PYTHONPATH=src PYTHONUNBUFFERED=1
T0=$SECONDS; left() { echo $(( ${1} - (SECONDS - T0) )); }
step() { local lim=$1 cap=$2; shift 2; local l=$(left $lim); [ $l -gt 20 ] || { echo "skip: $*"; return; }; [ $l -gt $cap ] && l=$cap; timeout $l "$@"; echo "rc $? ($*)" | cut -c1-80; }
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
mkdir -p $OUT/n
VAR='c32[frobenius]={"stages":{"sum0":{"tile":{"c":32}}}};st3[frobenius]={"stages":{"sum0":{"num_stages":3}}};st4[frobenius]={"stages":{"sum0":{"num_stages":4}}};w4[frobenius]={"stages":{"sum0":{"num_warps":4}}};sp1k[frobenius]={"split":{"h":256,"n":4}};o1k[layernorm_chw float32]={"tile":{"h":4}};s16[layernorm_chw]={"stages":{"mean0":{"tile":{"h":16}},"mean1":{"tile":{"h":16}}}};s16o1k[layernorm_chw float32]={"tile":{"h":4},"stages":{"mean0":{"tile":{"h":16}},"mean1":{"tile":{"h":16}}}}'
step 550 60 python3 bench/probe_l2_order.py --out $OUT/l2 > $OUT/l2.log 2>&1
sed -n "/^| dtype/,\$p" $OUT/l2.log
step 550 300 python3 bench/reductions.py --only norm --cases frobenius,layernorm_chw --budget 30 --profile --variants "$VAR" --out $OUT/n > $OUT/norm.log 2>&1
grep -E "^norm .*(dtriton|torch|compile)" $OUT/norm.log | cut -c1-110
step 550 60 python3 bench/ncu_out1.py --impl derived --order > $OUT/order_d.log 2>&1
step 550 60 python3 bench/ncu_out1.py --impl manual --order > $OUT/order_m.log 2>&1
paste <(cut -c1-70 $OUT/order_d.log) <(cut -c1-70 $OUT/order_m.log) | head -30
for i in derived manual; do
step 550 80 ncu --clock-control none --cache-control all -k regex:out1 -c 6 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats python3 bench/ncu_out1.py --impl $i --steps 2 > $OUT/ncu_$i.log 2>&1
grep -E "^  [a-z_]+out1|Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Grid Size|Registers" $OUT/ncu_$i.log | tail -24
done
