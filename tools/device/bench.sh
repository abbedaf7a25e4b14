#!/bin/bash
# Benchmarks; ~8 min on nvidia-h200. Logs under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
( timeout 280 python3 -m sgl_k3_mono.k2.bench --rows 4,8 --formats mxfp4 --no-phases \
    --block MX4D=0 --block XU=1 --block XU=2 --block XU=2,MX4D=0 --block EXPERT_GEMV=0 --block "" 2>&1 | grep -E "K2BENCH|device|Error" ) | tee "$OUT/k2-sweep.log"
( timeout 100 python3 -m sgl_k3_mono.k1.bench --modes decode 2>&1 | tail -8 ) | tee "$OUT/k1-bench.log"
( timeout 100 python3 -m sgl_k3_mono.k1.bench --modes decode --seam-tile 2>&1 | tail -6 ) | tee "$OUT/k1-bench-seam-tile.log"
( timeout 150 python3 -m sgl_k3_mono.cli bench step 2>&1 | tail -20 ) | tee "$OUT/step-bench.log"
