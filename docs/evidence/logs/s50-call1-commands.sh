# s50 call 1 (trimmed to fit what failed starts left: the probe bf16 only, no pre-compile): the 49th session found a served step's K2 fetching its code from HBM (~12 us a launch at 1 row:
# cold 145.6 vs warm 133.4 us, H100 bf16; all of it back when the same launch ran first on a copy of the weights).
# Would weight streams read with L2's evict-first policy keep a launch's code in L2? bench k2 --l2-cold also times
# ours after the 256 MB flush read evict-first by runtime/l2_stream.py (after_evict_first_read) and after the same
# kernel's read with the default policy (after_stream_read, its control). Then the remedy in the MXFP4 step:
# K1's pipelined copies (its ~90 MB in-projection stream) evict-first (K1Plan.l2_evict_first, the PTX rewritten:
# runtime/ptx_l2_policy.py), and K2's routed-expert loads evict-first (XEF / XEFD); (K1's bitwise GPU test: no room left in the session's device time).
set -u
source tools/device/env.sh >/dev/null 2>&1
python3 -c "import triton; from triton import knobs; print('triton', triton.__version__, 'stages hook:', hasattr(knobs.runtime, 'add_stages_inspection_hook'))"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
timeout 220 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1 --kernels --k1-evict-first \
  --k2-block XEF=1,XEFD=1 2>&1 | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" \
  | tee "$OUT/step-ef-mxfp4.log"

