# s50 call 2: call 1's machine was taken back mid-call (nothing came back); 273 s of device time left, so only
# its first question: after the 256 MB flush read evict-first in L2, does K2 still fetch its code from HBM?
# (ours_after_evict_first_read against ours_after_stream_read, the same read with the default policy, and warm)
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 170 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
