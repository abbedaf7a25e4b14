# s48 call 4: call 3 (clocks at 1980 MHz throughout, no throttling) timed ours slower after LS's setup (1048 us, with
# the bare step 462, launches 585, about the profiler's kernel durations) than its first timing (993, with the table's
# bare 460 timed last: launches 533). Is the first timing in a process the odd one, and does the table's launches
# column mix two states? --order-check times ours and bare back to back right after ours' first timing and again after
# every column; run 1 without LS (only the standard step between), run 2 with LS and --ab-buffers as in call 3.
set -u
source tools/device/env.sh >/dev/null 2>&1
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 250 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --order-check --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|^ab-buffers|Error|Traceback" | tee "$OUT/step-order.log"
timeout 280 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --order-check --k1-linear-seam --ab-buffers \
  --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|^ab-buffers|Error|Traceback" | tee "$OUT/step-order-ls.log"
