# s54 call 1: experts_up builds neither its routed items' item-at-a-time path where FLATX's loop runs them all (4bb969e) nor
# the shared down's tile where SDU is off (bf16 sm_90 builds only: experts_up 68 -> 20 KB at 1 row, 28 -> 14 KB from 2 rows, CPU).
# (1) K2's bf16 GPU tests (small, real with the new STX options' two cases, the flat loops) beside the compiles;
# (2) bf16 1 row, traced, warm / after torch's sum / after 110 KB of other code: the new default, the new default
# with experts_down's shorter-code shared loop (its K sum alone is 14 KB at the default K step, BK 512), with all the shorter-code options, and the old tree's default (.ab-old: 95d7ea4's sgl_k3_mono and configs, carried).
set -u
source tools/device/env.sh >/dev/null 2>&1
old=.ab-old
( OMP_NUM_THREADS=2 t k2-bf16-small 290 tests/launch/test_k2.py -k "gpu_small and bf16" ) > "$OUT/k2-bf16-small.out" 2>&1 &
p0=$!
( OMP_NUM_THREADS=2 t k2-bf16-real 290 tests/launch/test_k2.py \
    -k "gpu and ((bf16 and (gpu_real or flat_dense)) or flat_expert)" ) > "$OUT/k2-bf16-real.out" 2>&1 &
p1=$!
B=("" BKS=128,STXD=6 BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6)
w="timeout 240 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --trace --warm-only"
cmds=()
for b in "${B[@]}"; do cmds+=("$w --block '$b'"); done
cmds+=("cd $old && PYTHONPATH=/tmp/site:\$PWD $w --block ''")
warm "$OUT/k2-warm.log" "${cmds[@]}"
wait $p0 $p1
cat "$OUT/k2-bf16-small.out" "$OUT/k2-bf16-real.out"
k2t="python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways l2_cold,after_code_110kb"
args=(); for b in "${B[@]}"; do args+=(--block "$b"); done
echo "== K2 new"; ( timeout 130 $k2t "${args[@]}" 2>&1 | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" ) \
  | tee "$OUT/k2-new.log"
echo "== K2 old"; ( cd $old && PYTHONPATH=/tmp/site:$PWD timeout 80 $k2t --block "" 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" ) | tee "$OUT/k2-old.log"
