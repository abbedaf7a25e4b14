# session 39's first call: the Next list, by card
set -u; source tools/device/env.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
big=$(python3 -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory > 100e9))")
if [ "$big" = 1 ]; then
  timeout 470 bash tools/device/bench.sh bf16-gate
else
  # the five real MXFP4 cases the 38th session's call 6 did not reach, then bf16's in-launch phases
  t k2-mxfp4-real 330 tests/launch/test_k2.py -k "gpu_real and mxfp4"
  K2_EXTRA=--trace timeout 200 bash tools/device/bench.sh k2 k2-trace-bf16 150 bf16 1,2,4,8 ""
fi
date -u
