# s53 call 2: which property of the kernel run before K2 costs it ~12 us at 1 row. Call 1's trace put the loss
# on experts_up / experts_down / latent_up (front, 42 KB of code, pays none), and torch's sum of 4 KB (one
# program) cost it all while a 256 MB Triton stream cost none. Ways: the stream's kernel over 4 KB (short,
# same code and grid), l2_stream.spin on 1 program / on every SM (few instructions, returns at once) / busy
# 100 us on every SM, and code_22kb on 1 program.
set -u
source tools/device/env.sh >/dev/null 2>&1
W=l2_cold,after_stream,after_stream_4kb,after_sum_tiny,after_spin_1,after_spin_sms,after_spin_sms_100us,after_code_22kb,after_code_22kb_1
timeout 420 python3 -m sgl_k3_mono.k2.bench --formats bf16,mxfp4 --rows 1 --no-phases --trace --l2-cold --cold-ways $W 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-after-what.log"
