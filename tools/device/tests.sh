#!/bin/bash
# The GPU tests, one group a device call (each fits the 600 s a call may run):
#   bash tools/device/tests.sh k2       # nvidia-h200-x2: K2 at TP 1 (~180 s, more with the thirteenth session's cases) and TP 2 (~90 s)
#   bash tools/device/tests.sh k1       # nvidia-h200: every K1 GPU test (~330 s)
#   bash tools/device/tests.sh forward  # nvidia-h200-x2: the step harness at TP 1 (~210-270 s) and TP 2 + stall (~75 s)
#   bash tools/device/tests.sh tp2      # nvidia-h200-x2: K2 at TP 2 and the step at TP 2 + stall, nothing else
#   bash tools/device/tests.sh tp       # nvidia-h200-x4/x8 (issue 7): K2 at TP 4/8, the step at TP 4, stalls (never run)
set -u
source tools/device/env.sh
case "${1:-}" in
  k2) t k2-gpu 330 tests/launch/test_k2.py tests/launch/test_k2_routing.py -k gpu
      t k2-tp2 150 tests/launch/test_k2_tp.py ;;
  k1) t k1-gpu 540 tests/launch/test_k1.py -k "not interpret" ;;
  forward) t forward-gpu 360 tests/forward/test_forward_gpu.py
           t forward-tp2 150 tests/forward/test_forward_tp.py ;;
  tp2) t k2-tp2 150 tests/launch/test_k2_tp.py  # nvidia-h200-x2: both TP-2 groups alone (~240 s)
       t forward-tp2 150 tests/forward/test_forward_tp.py ;;
  tp) t k2-tp 300 tests/launch/test_k2_tp.py
      t forward-tp 250 tests/forward/test_forward_tp.py ;;
  *) echo "usage: tests.sh k2|k1|forward|tp2|tp" >&2; exit 2 ;;
esac
