# s46 call 3: the step file alone on the head; then the 1-row bf16 step with K1's seam alone and K2's alone skipped
set -u
source tools/device/env.sh >/dev/null 2>&1
( OMP_NUM_THREADS=4 t forward-gpu 330 tests/forward/test_forward_gpu.py -k "not k_split and not standard_step" ) \
  > "$OUT/forward-gpu.out" 2>&1
cat "$OUT/forward-gpu.out"
cfg=(--std-config "$PWD/docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json")
cd .ab-old/probe
export PYTHONPATH=/tmp/site:$PWD
step() { timeout 150 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 "${cfg[@]}" 2>&1 \
  | grep -E "^ *[0-9]+ |Error|Traceback"; }
for v in k1 k2 none; do
  echo "STEPPROBE variant '$v'"
  SGL_K3_MONO_PROBE_NOSEAM=$v step
done | tee "$OUT/step-probe-split.log"
