# s47 call 1: K1 LS v2 (e30b14e = main d9d584d + the LS patch) on the GPU: its test, bench k1 A/B at 1 row, the 1-row step with it
set -u
source tools/device/env.sh >/dev/null 2>&1
k1w="timeout 150 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows 1 --warm-only"
( warm "$OUT/ls-warm.log" "$k1w" "$k1w --linear-seam" ) > "$OUT/ls-warm.out" 2>&1 &
w=$!
t k1-ls 170 tests/launch/test_k1.py -k "gpu and linear_seam and not phased"
grep -E "LS vs truth|K1GPU" "$OUT/k1-ls.log" | cut -c1-400 | head -12
wait $w; cat "$OUT/ls-warm.out"
for pass in 1 2; do
  for v in "" "--linear-seam"; do
    echo "K1LS pass $pass variant '$v'"
    timeout 60 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows 1 --no-phases $v 2>&1 \
      | grep -E "^ *[0-9]+ +(decode|verify)|Error|layer"
  done
done | tee "$OUT/k1-ls-ab.log"
timeout 110 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam \
  --std-config docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback" | tee "$OUT/step-ls.log"
