# s48 call 2: call 1's profiler saw LS's step kernels sum to ours (1007.5-1009.0 us both) while the graph timing put
# LS 60-66 us behind; LS's step ran on buffers allocated after ours. --ab-buffers times, interleaved twice: ours, ours
# on buffers allocated afresh, LS (4 and then 6 stages), with the bare step on each.
set -u
source tools/device/env.sh >/dev/null 2>&1
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 280 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam --ab-buffers --kernels \
  --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^ab-buffers|^kernels M 1: +[0-9]+ +[0-9.]+ +[0-9.]+ .*(k1_|k2_|emcpy|Memset)|kernels M 1: sum|differs|Error|Traceback|--kernels" \
  | tee "$OUT/step-ab-buffers.log"
timeout 250 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam --ls-stages 6 --ab-buffers \
  --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^ab-buffers|Error|Traceback" | tee "$OUT/step-ab-buffers-ls6.log"
