# s46 call 2: the head's K1 phased cases and the step file (GL now the verify default), beside the
# probe tree's step compiles; then the 1-row bf16 step with and without the seams (probe: both skipped)
set -u
source tools/device/env.sh >/dev/null 2>&1
( t k1-phased 330 tests/launch/test_k1.py -k "gpu and phased" ) > "$OUT/k1-phased.out" 2>&1 &
a=$!
( OMP_NUM_THREADS=2 t forward-gpu 330 tests/forward/test_forward_gpu.py -k "not k_split and not standard_step" ) \
  > "$OUT/forward-gpu.out" 2>&1 &
b=$!
cfg=(--std-config "$PWD/docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json")
cd .ab-old/probe
export PYTHONPATH=/tmp/site:$PWD
step() { timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 "${cfg[@]}" 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback"; }
( step; SGL_K3_MONO_PROBE_NOSEAM=1 step ) > "$OUT/step-warm.log" 2>&1
wait $a $b
cat "$OUT/k1-phased.out" "$OUT/forward-gpu.out"
for pass in 1 2; do
  for v in "" "SGL_K3_MONO_PROBE_NOSEAM=1"; do
    echo "STEPPROBE pass $pass variant '$v'"
    if [ -n "$v" ]; then export SGL_K3_MONO_PROBE_NOSEAM=1; else unset SGL_K3_MONO_PROBE_NOSEAM; fi
    step
  done
done | tee "$OUT/step-probe.log"
