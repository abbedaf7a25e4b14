# s48 call 6: (1) does plain torch show it: graphs A, B, C, D of one chain of small kernels, A timed alone, with B
# alive, after B is destroyed; (2) the bf16 step at 1, 2, 4 and 8 rows with --order-check (ours and bare back to
# back, twice, right after ours' first timing and after every column), so every row count's launches column can be
# read from one moment of the process.
set -u
source tools/device/env.sh >/dev/null 2>&1
for n in 150 40; do timeout 60 python3 tools/device/graph_order_probe.py $n; done 2>&1 | tee "$OUT/graph-order-probe.log"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 480 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1,2,4,8 --order-check --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^order|Error|Traceback" | tee "$OUT/step-order-rows.log"
