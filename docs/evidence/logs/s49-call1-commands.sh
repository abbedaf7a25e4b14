# s49 call 1 (main at 0ecd607): is bench k2's 1-row bf16 K2 (134.5 us, 40th/43rd) flattered by L2? In the step the
# profiler put each K2 at 145.8-147.7 us (s48 call 1). bench k2 now also times ours with L2 flushed by a 256 MB read
# before each launch (less the read alone: ours_l2_cold) and over 3 copies of the layer in turn (ours_rot3, a
# launch's share, nothing subtracted). Beside it: the step's kernel list at 1 row (settled timer) with the L2 hand-off
# (--l2-next: K1 asks L2 for its K2's o_proj; the 13th session's loss was the first-graphs artifact's size), and the
# timer's GPU test.
set -u
source tools/device/env.sh >/dev/null 2>&1
warm "$OUT/warm.log" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1,2 --trace --warm-only" \
  "timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1,8 --warm-only"
timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1,2 --no-phases --trace --l2-cold --rotate 3 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|^device|Error|Traceback" | tee "$OUT/k2-l2cold-bf16.log"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1,8 --no-phases --l2-cold --rotate 3 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-mxfp4.log"
t timing-gpu 60 tests/gpu/test_timing_gpu.py
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --l2-next --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-kernels.log"
