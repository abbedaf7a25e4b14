# s51 call 1 (s50-call1's questions, never answered: 22 tries, no GPU call ran): would weight streams read with
# L2's evict-first policy keep K2's code in L2 (49th session: a served step's K2 fetches its code from HBM,
# ~12 us a launch at 1 row)? (1) bench k2 --l2-cold: ours after the 256 MB flush read evict-first
# (runtime/l2_stream.py, after_evict_first_read) beside the same kernel's default-policy read
# (after_stream_read) and warm. (2) the remedy in the MXFP4 step: K1's pipelined copies evict-first
# (K1Plan.l2_evict_first, PTX rewritten by runtime/ptx_l2_policy.py) and K2's routed-expert loads evict-first
# (XEF / XEFD), each a column beside the default. (3) K1's bitwise GPU test of the policy.
set -u
source tools/device/env.sh >/dev/null 2>&1
python3 -c "import triton; from triton import knobs; print('triton', triton.__version__, 'stages hook:', hasattr(knobs.runtime, 'add_stages_inspection_hook'))" | tee "$OUT/triton.log"
timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-l2cold-ef.log"
timeout 230 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1 --kernels --k1-evict-first \
  --k2-block XEF=1,XEFD=1 2>&1 | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" \
  | tee "$OUT/step-ef-mxfp4.log"
t k1-ef 120 tests/launch/test_k1.py -k l2_evict_first
