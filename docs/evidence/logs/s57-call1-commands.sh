# s57 call 1: what the card allows. An H200: bf16-gate (K2's bf16 GPU tests, the standard paths' checks, SGLang's
# fused MoE tuned for K3's shapes, K2 bf16 against it; step-std follows in call 2 on the same machine).
# An H100: the WARM=4/5 probe prepared in the fifty-sixth session (s56-probe-warm-next-commands.sh).
# Carry [".whl", ".ab-probe", ".tcache"]: .tcache is tools/device/tcache.py's build of the code kernels and these K2 builds
# (`code k2:bf16:1 k2:bf16:2 k2:bf16:4 k2:bf16:8 k2:mxfp4:8`, and in .ab-probe `k2:bf16:1` with WARM=4 / WARM=5 /
# trace), installed by env.sh; the end lists what the machine compiled anyway.
# Rebuild them here: bash tools/setup_triton36.sh; rm -rf .tcache .tcache.work; PYTHONPATH=. .venv-t36/bin/python
# tools/device/tcache.py build .tcache code k2:bf16:1 k2:bf16:2 k2:bf16:4 k2:bf16:8 k2:mxfp4:8; (cd .ab-probe &&
# PYTHONPATH=$PWD ../.venv-t36/bin/python ../tools/device/tcache.py build ../.tcache k2:bf16:1 k2:bf16:1:WARM=4
# k2:bf16:1:WARM=5 k2:bf16:1:trace k2:bf16:1:WARM=4:trace)   (.ab-probe as s56-probe-warm-next-commands.sh says)
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== gpu: $gpu"
case "$gpu" in
  *H200*) bash tools/device/bench.sh bf16-gate ;;
  *) bash docs/evidence/logs/s56-probe-warm-next-commands.sh ;;
esac
source tools/device/env.sh > /dev/null 2>&1; tcache_compiled
