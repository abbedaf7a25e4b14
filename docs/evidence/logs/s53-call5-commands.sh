# s53 call 5: call 3 found bf16 BKX 128 (experts_up's code 68 -> 17 KB, CPU compile) no faster after other code
# (145.8 us against 146.0) and 2.4 us slower warm. Traced, to see which phases pay after other code with the
# smaller code, and whether more stages give BKX 128 back its warm time.
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 400 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold \
  --cold-ways l2_cold,after_code_110kb --block "" --block BKX=128 --block BKX=128,STAGES=6 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" | tee "$OUT/k2-bf16-bkx128-trace.log"
