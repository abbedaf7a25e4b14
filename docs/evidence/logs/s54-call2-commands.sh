# s54 call 2 (prepared in s53): the bf16 1-row step with call 1's shorter-code K2 block beside the default (edit the
# block to the best call 1 printed after other code), and latent_up's shorter K step for MXFP4 K2 (its latent_up
# pays 2 us after other code too); K1 after other code.
set -u
source tools/device/env.sh >/dev/null 2>&1
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 240 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD \
  --k2-block BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels.*k[12]_kernel|^kernels.*sum|Error|Traceback" | tee "$OUT/step-bf16-stx.log"
timeout 200 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --no-phases --trace --l2-cold \
  --cold-ways l2_cold,after_code_110kb --block "" --block BKU=128,STU=6 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" | tee "$OUT/k2-mxfp4-bku.log"
# K1 after other code (bench k1 --after-code, 53rd): does K1 lose to other code as K2 does (K1 in the step 50-51 us)?
timeout 200 python3 -m sgl_k3_mono.k1.bench --rows 1,2 --modes decode --no-phases --after-code 2>&1 \
  | grep -E "^ *[0-9]+ +decode|^K1 at|Error|Traceback" | tee "$OUT/k1-after-code.log"
