# s49 call 2: call 1 found bench k2's one-layer replays not flattered by the weights (3 copies in turn: 133.7 us, the
# plain replay 133.6 at 1 row bf16), but with L2 flushed before each launch 146.3 us, the step's K2 (144.3-145.0).
# Which phase pays, and is it the launch's small data (inputs, scratch, norms) or its code? Traced with L2 flushed,
# and timed and traced with the small tensors read back into L2 after the flush (l2cold_data_warm). Beside the
# default, SPF=1: the seam's small reads (bank rows, prefix, its norm weights) asked of L2 as the launch starts.
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1,2 --trace --warm-only --block '' --block SPF=1" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --trace --warm-only --block '' --block SPF=1"
timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1,2 --no-phases --trace --l2-cold \
  --block "" --block SPF=1 2>&1 | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-trace-bf16.log"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --no-phases --trace --l2-cold \
  --block "" --block SPF=1 2>&1 | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-trace-mxfp4.log"
t k2-spf 200 tests/launch/test_k2.py -k "seam_inputs_asked"
