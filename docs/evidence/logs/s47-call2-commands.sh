# s47 call 2: probe (logs/s47-probe-ls-raw-candidates.patch on e30b14e): LS's tiles with the candidates fed to the
# wgmma as stored (no contribution add, no norm weight: wrong numbers, the same bytes), so its wgmma stays async
# (pendings 1, as the default's); bench k1 A/B at 1 row and the 1-row step's "LS launches us" column
set -u
source tools/device/env.sh >/dev/null 2>&1
k1w="timeout 150 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows 1 --warm-only"
warm "$OUT/probe-warm.log" "$k1w" "$k1w --linear-seam" > "$OUT/probe-warm.out" 2>&1
cat "$OUT/probe-warm.out"
for pass in 1 2; do
  for v in "" "--linear-seam"; do
    echo "K1LS-PROBE pass $pass variant '$v'"
    timeout 60 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows 1 --no-phases $v 2>&1 \
      | grep -E "^ *[0-9]+ +(decode|verify)|Error|layer"
  done
done | tee "$OUT/k1-probe-ab.log"
timeout 110 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam \
  --std-config docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback" | tee "$OUT/step-probe.log"
