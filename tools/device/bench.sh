#!/bin/bash
# The benchmarks on one H200, one device call a mode (each fits the 600 s a call may run):
#   bash tools/device/bench.sh launches  # K2 and K1 against their standard paths and byte floors (~5 min)
#   bash tools/device/bench.sh step      # the decode step, bf16 experts (with the standard step) and MXFP4 (~8 min)
#   bash tools/device/bench.sh sweep     # K2's in-launch phase profile and its tile options (KSX, BNF, BNH, PF,
#                                        # 16 warps) (~8 min)
#   bash tools/device/bench.sh sweep-k1  # K1's in-projection prefetch, decode and verify (~4 min)
#   bash tools/device/bench.sh sweep-experts  # K2's MXFP4 expert options: register prefetch (XPD), whole-item
#                                             # L2 prefetch (XL2), with and without the K split (KSX) (~5 min)
# Logs under $OUT.
set -u
source tools/device/env.sh
case "${1:-}" in
  launches)
    ( timeout 120 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4,bf16 --no-phases 2>&1 \
        | grep -E "K2BENCH|device|Error" ) | tee "$OUT/k2-bench.log"
    ( timeout 100 python3 -m sgl_k3_mono.k1.bench 2>&1 | tail -14 ) | tee "$OUT/k1-bench.log" ;;
  step)
    ( timeout 250 python3 -m sgl_k3_mono.cli bench step --fmt bf16 2>&1 | tail -12 ) | tee "$OUT/step-bench-bf16.log"
    ( timeout 250 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 2>&1 | tail -12 ) | tee "$OUT/step-bench-mxfp4.log" ;;
  sweep)
    ( timeout 100 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4 --no-phases --trace 2>&1 \
        | grep -E "K2BENCH|K2TRACE|device|Error" ) | tee "$OUT/k2-trace.log"
    ( timeout 420 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4 --no-phases \
        --block KSX=2 --block KSX=4 --block num_warps=16,KSX=2 --block BNF=16 --block BNF=32 --block BNH=56 \
        --block PF=4096 --block PF=14336 --block KSX=2,BNF=16,BNH=56,PF=14336 2>&1 | grep -E "K2BENCH|Error" ) \
        | tee "$OUT/k2-sweep.log" ;;
  sweep-k1)
    for pf in 0 4096 14336; do
      ( timeout 90 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --no-phases --prefetch $pf 2>&1 \
          | tail -9 ) | tee -a "$OUT/k1-prefetch.log"
    done ;;
  sweep-experts)
    ( timeout 420 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4 --no-phases \
        --block "" --block XPD=1 --block XPD=2 --block XL2=1 --block XL2=2 --block XL2=2,XPD=1 \
        --block XL2=1,KSX=2 --block XL2=2,KSX=2 --block XPD=1,KSX=2 2>&1 | grep -E "K2BENCH|Error" ) \
        | tee "$OUT/k2-sweep-experts.log" ;;
  *) echo "usage: bench.sh launches|step|sweep|sweep-k1|sweep-experts" >&2; exit 2 ;;
esac
