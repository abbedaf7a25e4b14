# s50 call 1: the 49th session found a served step's K2 fetching its code from HBM (~12 us a launch at 1 row:
# cold 145.6 vs warm 133.4 us, H100 bf16; all of it back when the same launch ran first on a copy of the weights).
# Would weight streams read with L2's evict-first policy keep a launch's code in L2? bench k2 --l2-cold now also
# times ours after the 256 MB flush read evict-first by runtime/l2_stream.py (after_evict_first_read) and after the
# same kernel's read with the default policy (after_stream_read, its control). Then the bf16 step at 1 row on this
# GPU (the standard step's MoE configs: the H100-tuned file; no H200-tuned one is committed).
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --warm-only" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --warm-only"
timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 280 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-kernels.log"
