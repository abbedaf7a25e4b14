# s51 call 2: call 1 never started (eight failed starts left 884 s of device time), so its first two questions
# only: (1) bench k2 --l2-cold: K2 after the 256 MB flush read evict-first (after_evict_first_read) beside the
# default-policy read (after_stream_read) and warm; (2) the MXFP4 step with K1's copies evict-first
# (K1Plan.l2_evict_first) and K2's expert loads evict-first (XEF / XEFD), each a column beside the default.
set -u
source tools/device/env.sh >/dev/null 2>&1
python3 -c "import triton; from triton import knobs; print('triton', triton.__version__, 'stages hook:', hasattr(knobs.runtime, 'add_stages_inspection_hook'))" | tee "$OUT/triton.log"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
timeout 220 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1 --kernels --k1-evict-first \
  --k2-block XEF=1,XEFD=1 2>&1 | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" \
  | tee "$OUT/step-ef-mxfp4.log"
