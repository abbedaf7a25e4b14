# s49 call 3: call 2 (H200) put the cold launch's whole loss in the expert phases and latent_up (o_proj, seam and
# front unchanged), and reading the launch's small tensors back after the flush recovered none of it; SPF no gain.
# Left: the code's fetch, or the weights' address translations (the routed experts' pages, scattered, each a short
# stream at 1 row). l2cold_pages_warm reads one word of every 64 KB of the weights after the flush (translations back,
# next to none of the bytes). Then, on an H200, the 1-row bf16 step (SGLang's default fused-MoE config: no H200-tuned
# file exists) for the owed H200 figure.
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --trace --warm-only" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --trace --warm-only"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-pages-bf16.log"
timeout 120 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --no-phases --trace --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-pages-mxfp4.log"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels 2>&1 \
    | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback|k1_kernel|k2_kernel|kernels M 1: sum" | tee "$OUT/step-h200.log"
fi
