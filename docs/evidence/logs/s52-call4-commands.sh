# s52 call 4: call 3 (H100) found the "cold" K2 cold after torch's sum of 4 KB (146.1 us bf16; L2 not emptied) and
# warm after a 256 MB read by l2_stream's small Triton kernel (134.6): not L2's contents but the kernel before it.
# The SMs' instruction caches? K2 after one / five Triton kernels of 22 KB of straight-line code each, on every SM,
# reading 4 KB (l2_stream.code_sweep), beside call 3's ways again.
set -u
source tools/device/env.sh >/dev/null 2>&1
timeout 280 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-after-code.log"
