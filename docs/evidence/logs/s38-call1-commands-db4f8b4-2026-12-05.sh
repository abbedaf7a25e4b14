# session 38's first call (untracked): the Next list, by card
set -u; source tools/device/env.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader; date -u
big=$(python3 -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory > 100e9))")
if [ "$big" = 1 ]; then
  bash tools/device/bench.sh bf16-gate
else
  CFG=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
  ( t sgmoe 150 tests/launch/test_sglang_moe.py -k gpu ) > /tmp/sgmoe.out 2>&1 &
  ( OMP_NUM_THREADS=2 t k2-flatd-bf16 200 tests/launch/test_k2.py -k "gpu_flat_dense and bf16" ) > /tmp/flatd.out 2>&1 &
  timeout 200 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --warm-only --block '' --block FLATD=0,BNO=0,BKO=0 > /tmp/warm.out 2>&1; echo "warm rc $?"
  wait; cat /tmp/sgmoe.out /tmp/flatd.out; tail -2 /tmp/warm.out
  ( timeout 90 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --no-phases --std-config $CFG --block '' --block FLATD=0,BNO=0,BKO=0 2>&1 | grep -E "K2BENCH|device|Error" ) | tee $OUT/k2-bench-bf16-m1.log
  STD_CONFIG=$CFG ROWS=1,8 timeout 300 bash tools/device/bench.sh step-std
fi
date -u
