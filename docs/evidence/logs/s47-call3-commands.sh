# s47 call 3: K1 LS v3 (95da721: the candidate columns built once as the launch starts, the tiles' wgmma async):
# its GPU test, bench k1 A/B at layer 37 (twice), the 1-row step, then bench k1 at the step's KDA layers 0 / 1 / 2
set -u
source tools/device/env.sh >/dev/null 2>&1
cmds=()
for L in 0 1 2 37; do
  for v in "" "--linear-seam"; do
    cmds+=("timeout 200 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1 --layer $L $v --warm-only")
  done
done
( warm "$OUT/ls3-warm.log" "${cmds[@]}" ) > "$OUT/ls3-warm.out" 2>&1 &
w=$!
t k1-ls 170 tests/launch/test_k1.py -k "gpu and linear_seam and not phased"
grep -E "LS vs truth|K1GPU" "$OUT/k1-ls.log" | cut -c1-400 | head -12
wait $w; cat "$OUT/ls3-warm.out"
for pass in 1 2; do
  for v in "" "--linear-seam"; do
    echo "K1LS3 layer 37 pass $pass variant '$v'"
    timeout 60 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1 --no-phases $v 2>&1 \
      | grep -E "^ *[0-9]+ +(decode|verify)|Error|layer"
  done
done | tee "$OUT/k1-ls3-ab.log"
timeout 110 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam \
  --std-config docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback" | tee "$OUT/step-ls3.log"
for L in 0 1 2; do
  for v in "" "--linear-seam"; do
    echo "K1LS3 layer $L variant '$v'"
    timeout 60 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1 --no-phases --layer $L $v 2>&1 \
      | grep -E "^ *[0-9]+ +(decode|verify)|Error|layer"
  done
done | tee "$OUT/k1-ls3-layers.log"
