#!/bin/bash
# The benchmarks on one H200 (~8 min): K2 and K1 against their standard paths and byte
# floors, then the decode step. Logs under $OUT.
set -u
source tools/device/env.sh
( timeout 120 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4,bf16 --no-phases 2>&1 \
    | grep -E "K2BENCH|device|Error" ) | tee "$OUT/k2-bench.log"
( timeout 100 python3 -m sgl_k3_mono.k1.bench 2>&1 | tail -14 ) | tee "$OUT/k1-bench.log"
( timeout 100 python3 -m sgl_k3_mono.k1.bench --seam-tile 2>&1 | tail -14 ) | tee "$OUT/k1-bench-seam-tile.log"
( timeout 260 python3 -m sgl_k3_mono.cli bench step 2>&1 | tail -12 ) | tee "$OUT/step-bench.log"
