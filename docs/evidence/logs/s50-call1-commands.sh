# s50 call 1: the 49th session found a served step's K2 fetching its code from HBM (~12 us a launch at 1 row:
# cold 145.6 vs warm 133.4 us, H100 bf16; all of it back when the same launch ran first on a copy of the weights).
# Would weight streams read with L2's evict-first policy keep a launch's code in L2? bench k2 --l2-cold also times
# ours after the 256 MB flush read evict-first by runtime/l2_stream.py (after_evict_first_read) and after the same
# kernel's read with the default policy (after_stream_read, its control). Beside it, the remedy for MXFP4's routed
# experts (XEF / XEFD: their loads evict-first in L2): its cost alone (bench k2), its bitwise row (options test),
# and the MXFP4 step with it (bench step --k2-block: does K1, whose code K2's stream evicts, gain?).
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --warm-only" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --warm-only --block '' --block XEF=1,XEFD=1" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 8 --warm-only --block '' --block XEF=1,XEFD=1"
timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1,8 --no-phases --block "" --block XEF=1,XEFD=1 \
  2>&1 | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-xef-mxfp4.log"
timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1 --kernels --k2-block XEF=1,XEFD=1 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-xef-mxfp4.log"
t k2-options 240 tests/launch/test_k2.py -k "options_against"
