# s55 call 4: BKS=128,STXD=6 now the bf16 1-row default (its gate passed in call 1, it
# won again in call 3): K2's bf16 small and real groups on the new default, with, at once, the bf16 builds from 2
# rows (changed in s54: experts_up's never-run paths not built; not yet timed) against the old tree (.ab-old,
# 95d7ea4's), 2 / 4 / 8 rows. Carry [".whl", ".ab-old"].
set -u
source tools/device/env.sh >/dev/null 2>&1
( OMP_NUM_THREADS=2 t k2-bf16-small 200 tests/launch/test_k2.py -k "gpu_small and bf16" ) > "$OUT/k2-bf16-small.out" 2>&1 &
p0=$!
( OMP_NUM_THREADS=2 t k2-bf16-real 240 tests/launch/test_k2.py \
    -k "gpu and ((bf16 and (gpu_real or flat_dense)) or flat_expert)" ) > "$OUT/k2-bf16-real.out" 2>&1 &
p1=$!
old=.ab-old
w="timeout 240 python3 -m sgl_k3_mono.k2.bench --rows 2,4,8 --formats bf16 --warm-only"
warm "$OUT/k2-warm.log" "$w --block ''" "cd $old && PYTHONPATH=/tmp/site:\$PWD $w --block ''"
wait $p0 $p1
cat "$OUT/k2-bf16-small.out" "$OUT/k2-bf16-real.out"
k2t="python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 2,4,8 --no-phases --trace"
for run in new:100 old:100 new:100; do
  tree=${run%%:*}; d=.; [ $tree = old ] && d=$old
  echo "== K2 $tree"
  ( cd $d && PYTHONPATH=/tmp/site:$PWD timeout ${run#*:} $k2t 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|Error" )
done | tee "$OUT/k2-bf16-rows-ab.log"
