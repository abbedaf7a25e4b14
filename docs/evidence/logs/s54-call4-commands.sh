# s54 call 4: the new bf16 1-row default (BKS 128, STXD 6) gated: K2's bf16 GPU tests (small; real, with the flat
# loops) beside the compiles, then bench k2 bf16 1 row, the new default against the block before it (BKS=0,STXD=0:
# unset), warm / after torch's sum / after other code, traced.
set -u
source tools/device/env.sh >/dev/null 2>&1
( OMP_NUM_THREADS=2 t k2-bf16-small 130 tests/launch/test_k2.py -k "gpu_small and bf16" ) > "$OUT/k2-bf16-small.out" 2>&1 &
p0=$!
( OMP_NUM_THREADS=2 t k2-bf16-real 170 tests/launch/test_k2.py \
    -k "gpu and ((bf16 and (gpu_real or flat_dense)) or flat_expert)" ) > "$OUT/k2-bf16-real.out" 2>&1 &
p1=$!
w="timeout 160 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --trace --warm-only"
warm "$OUT/k2-warm.log" "$w --block ''" "$w --block BKS=0,STXD=0"
wait $p0 $p1
cat "$OUT/k2-bf16-small.out" "$OUT/k2-bf16-real.out"
( timeout 100 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold \
    --cold-ways l2_cold,after_code_110kb --block "" --block BKS=0,STXD=0 2>&1 \
  | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback" ) | tee "$OUT/k2-bf16-default.log"
