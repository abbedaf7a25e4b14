# s49 call 4: call 3 (H100) found the weights' translations not it either (pages touched after the flush: 146.8 us,
# cold 147.2, data warm 145.9, warm 133.1). Last candidate, the code: ours_l2_cold_after_other runs the same launch on
# a copy of the weights between the flush and ours (its code, scratch and inputs back in L2, none of ours' weights).
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-after-other-bf16.log"
