# s55 call 1 (prepared in s54, whose device time ran out before it): the fifty-fourth session's bf16 1-row winner
# (BKS 128, STXD 6: experts_down's shared-down loop in K steps of 128, six stages for its loops; timed in s54 calls
# 2-3, never checked against the reference on a GPU) gated: K2's bf16 GPU tests (small; real, whose new case
# `BKS=128,STXD=6` builds what the default would be; the flat loops) beside the compiles, then bench k2 bf16 1 row,
# the block against the default, warm / after torch's sum / after other code, traced. If the case passes and the
# block wins again, make it the default in tiles.k2_tiles (the 54th's reverted ec88463 did) and rerun the K2 groups.
set -u
source tools/device/env.sh >/dev/null 2>&1
( OMP_NUM_THREADS=2 t k2-bf16-small 200 tests/launch/test_k2.py -k "gpu_small and bf16" ) > "$OUT/k2-bf16-small.out" 2>&1 &
p0=$!
( OMP_NUM_THREADS=2 t k2-bf16-real 240 tests/launch/test_k2.py \
    -k "gpu and ((bf16 and (gpu_real or flat_dense)) or flat_expert)" ) > "$OUT/k2-bf16-real.out" 2>&1 &
p1=$!
w="timeout 200 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --trace --warm-only"
warm "$OUT/k2-warm.log" "$w --block ''" "$w --block BKS=128,STXD=6"
wait $p0 $p1
cat "$OUT/k2-bf16-small.out" "$OUT/k2-bf16-real.out"
( timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold \
    --cold-ways l2_cold,after_code_110kb --block "" --block BKS=128,STXD=6 2>&1 \
  | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback" ) | tee "$OUT/k2-bf16-default.log"
