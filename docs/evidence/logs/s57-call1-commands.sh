# s57 call 1: what the card allows. An H200: bf16-gate (K2's bf16 GPU tests, the standard paths' checks, SGLang's
# fused MoE tuned for K3's shapes, K2 bf16 against it; step-std follows in call 2 on the same machine).
# An H100: the WARM=4/5 probe prepared in the fifty-sixth session (s56-probe-warm-next-commands.sh).
# Carry [".whl", ".ab-probe", ".tcache.txz"]: tools/device/tcache.py's build, which env.sh installs (TCACHE lines; the end lists
# what the machine compiled anyway): the code kernels, K2 bf16 1-8 rows, MXFP4 8 rows, SGLang's fused MoE as
# bench k2's standard path and the tuner's grid run it, and the probe tree's WARM=4 / 5 and traced builds. Here:
#   bash tools/setup_triton36.sh; rm -rf .tcache .tcache.work .tcache.txz
#   PYTHONPATH=. .venv-t36/bin/python tools/device/tcache.py build .tcache code k2:bf16:1 k2:bf16:2 k2:bf16:4 \
#     k2:bf16:8 k2:mxfp4:8 sgmoe:1 sgmoe:2 sgmoe:4 sgmoe:8 sgmoe-grid:1 sgmoe-grid:2 sgmoe-grid:4 sgmoe-grid:8
#   (cd .ab-probe && PYTHONPATH=$PWD ../.venv-t36/bin/python ../tools/device/tcache.py build ../.tcache k2:bf16:1 \
#     k2:bf16:1:WARM=4 k2:bf16:1:WARM=5 k2:bf16:1:trace k2:bf16:1:WARM=4:trace)
# (.ab-probe as s56-probe-warm-next-commands.sh says; 84 entries, 0.73 MiB as .txz)
set -u
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "== gpu: $gpu"
case "$gpu" in
  *H200*) bash tools/device/bench.sh bf16-gate ;;
  *) bash docs/evidence/logs/s56-probe-warm-next-commands.sh ;;
esac
source tools/device/env.sh > /dev/null 2>&1; tcache_compiled
