# s53 call 1 (prepared in s52): the fifty-second session found K2's served-step loss in the SMs' instruction caches
# (K2 after five 22 KB-code Triton kernels reading 4 KB: 147.5 us bf16 1 row, warm 133.7; after a 256 MB stream that
# empties L2: 133.6). Which phases pay after other code, traced (K2TRACE rows per cold way), bf16 and MXFP4 at 1 row;
# then the H200-or-H100 step at 1 row with the standard path beside it.
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 300 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --trace --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-after-code-trace.log"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 240 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels.*k[12]_kernel|^kernels.*sum|Error|Traceback" | tee "$OUT/step-bf16.log"
