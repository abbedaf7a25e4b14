# s48 call 7 (on s48-main: main + bench step --kernels / --order-check + timing.settle_graphs): call 6's probe: graphs A, B, C replayed a 165-kernel chain in 394 us, the fourth (D) in 451; bench step
# times copy bandwidth on two graphs, so ours at 1 row was its third (fast) and every other column later (slow).
# timing.settle_graphs now captures four throwaway graphs before a process's first timing. Check: the probe settled
# (A should be as slow as D), then bench step at 1 row with --order-check (the table's ours should match the pairs').
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 60 python3 tools/device/graph_order_probe.py 150 --settle 2>&1 | tee "$OUT/graph-order-probe-settled.log"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 300 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --order-check --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|Error|Traceback" | tee "$OUT/step-order-settled.log"
# then, if time is left, the MXFP4 step at 1 and 8 rows, settled, with --order-check
timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1,8 --order-check 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|Error|Traceback" | tee "$OUT/step-order-settled-mxfp4.log"
