# s54 call 1 (prepared in s53): experts_up's shorter K step (BKX 128: its code 68 -> 17 KB, its loss after other code
# 3.6 -> 1.2-1.5 us) through a deeper pipeline of its own (STX), the other loops left at 4 stages; STXD the same for
# experts_down. Numerics first (the GPU case with them), then K2 warm / after the sum / after other code, traced,
# then the bf16 1-row step with the best of them as --k2-block beside the default.
set -u
source tools/device/env.sh >/dev/null 2>&1
t k2-stx 240 tests/launch/test_k2.py -k "gpu_real and STX"
W=l2_cold,after_code_110kb
timeout 360 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways $W \
  --block "" --block BKX=128,STX=6 --block BKX=128,STX=8 --block BKX=128,STX=6,BKD=64,STXD=6 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" | tee "$OUT/k2-bf16-stx.log"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 240 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD \
  --k2-block BKX=128,STX=6 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels.*k[12]_kernel|^kernels.*sum|Error|Traceback" | tee "$OUT/step-bf16-stx.log"
