# s56 call 1: what the card allows of the owed runs. An H200: bf16-gate (K2's bf16 GPU tests, the standard
# paths' checks, SGLang's fused MoE tuned for K3's shapes, K2 bf16 against it; call 2 then runs step-std).
# An H100: the step file's real MXFP4 case and the MXFP4 step table (step-mx; not run since the 52nd session),
# then K2 MXFP4 at 1-8 rows warm / after torch's sum / after 110 KB of other code. Carry [".whl"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== gpu: $gpu"
case "$gpu" in
  *H200*) bash tools/device/bench.sh bf16-gate ;;
  *)
    bash tools/device/bench.sh step-mx
    source tools/device/env.sh >/dev/null 2>&1
    ( timeout 200 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1,2,4,8 --no-phases --l2-cold \
        --cold-ways l2_cold,after_code_110kb 2>&1 | grep -E "^K2BENCH|Error|Traceback" ) | tee "$OUT/k2-mxfp4-rows.log" ;;
esac
