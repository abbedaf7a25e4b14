# s49 call 3: call 2 (H200) put the cold launch's whole loss in the expert phases and latent_up (o_proj, seam and
# front unchanged), and reading the launch's small tensors back after the flush recovered none of it; SPF no gain.
# Left: the code's fetch, or the weights' address translations (the routed experts' pages, scattered, each a short
# stream at 1 row). l2cold_pages_warm reads one word of every 64 KB of the weights after the flush (translations back,
# next to none of the bytes). (bf16 only: failed starts left 344 s of device time; the H200 step and MXFP4 dropped.)
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" "timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --trace --warm-only"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-pages-bf16.log"
