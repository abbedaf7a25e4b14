# s48 call 5: call 4 timed ours at 1050-1060 us every time but the first (1002.5), the bare step 458-463 every time:
# the table's launches column (first ours - last bare) read ~50 us short. Is it what the harness's pools hold by then
# (the step replayed ~100 times on random real-width weights)? --order-check now also zeroes the pools before each
# timing, and prints their largest |ssm| and non-finite count.
set -u
source tools/device/env.sh >/dev/null 2>&1
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 280 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --order-check --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|Error|Traceback" | tee "$OUT/step-order-reset.log"
