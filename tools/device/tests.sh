#!/bin/bash
# The GPU tests, one group a device call (each fits the 600 s a call may run):
#   bash tools/device/tests.sh k2       # nvidia-h200-x2: K2 at TP 1 (~180 s in the thirteenth session; more cases
#                                       # since: up to 420 s) and TP 2 (~90 s)
#   bash tools/device/tests.sh k1       # nvidia-h200: every K1 GPU test (~330 s)
#   bash tools/device/tests.sh forward  # nvidia-h200: the step harness at TP 1 (~460-530 s; at TP 2: tp2)
#   bash tools/device/tests.sh tp2      # nvidia-h200-x2: K2 at TP 2 and the step at TP 2 + stall, nothing else
#   bash tools/device/tests.sh ksx-forward  # nvidia-h200: real MXFP4 steps with and without the K split, 3 seeds
#   bash tools/device/tests.sh tp       # nvidia-h200-x4/x8 (issue 7): K2 at TP 4/8, small and real rank shapes, stalls
#   bash tools/device/tests.sh tp-step  # nvidia-h200-x4/x8: the step at TP 4/8 and its stalls (neither yet run)
#   bash tools/device/tests.sh one-gpu  # nvidia-h200: the K2 and K1 groups at once, each in its own pytest process
#                                       # (K2 small / real / the rest, K1): the compiles, most of each group's time,
#                                       # overlap on the host's cores (~6.5 min, fourteenth session). Not the step
#                                       # file: beside them its host reference took 89-162 s a case, so it ran out
#                                       # of time; give it `tests.sh forward`'s call alone
#   bash tools/device/tests.sh k2-one-gpu  # nvidia-h200: one-gpu's three K2 groups, not K1's
set -u
source tools/device/env.sh
case "${1:-}" in
  k2) t k2-gpu 420 tests/launch/test_k2.py tests/launch/test_k2_routing.py -k gpu
      t k2-tp2 170 tests/launch/test_k2_tp.py -k "not real" ;;  # (the real-shape cases: tp2)
  k1) t k1-gpu 540 tests/launch/test_k1.py -k "not interpret" ;;
  forward) t forward-gpu 570 tests/forward/test_forward_gpu.py -k "not k_split and not standard_step" ;;  # (458-530 s in the
           # 21st-35th sessions; the standard step's SGLang case: bench.sh bf16-gate; the TP-2 group: tp2)
  ksx-forward) t ksx-forward 540 tests/forward/test_forward_gpu.py -k k_split ;;  # KSX 2 over 3 seeds (~7 min)
  tp2) t k2-tp2 400 tests/launch/test_k2_tp.py  # nvidia-h200-x2: both TP-2 groups alone (~240 s; real rank shapes since the 36th: more)
       t forward-tp2 150 tests/forward/test_forward_tp.py ;;
  tp) t k2-tp 560 tests/launch/test_k2_tp.py ;;  # (its real rank shapes at TP 8: eight 7.4 GB builds, never run)
  tp-step) t forward-tp 560 tests/forward/test_forward_tp.py ;;
  one-gpu)  # (OMP threads a process, so the host references do not oversubscribe the 16 cores)
    OMP_NUM_THREADS=2 t k2-small 450 tests/launch/test_k2.py -k "gpu_small" &
    OMP_NUM_THREADS=2 t k2-real 450 tests/launch/test_k2.py -k "gpu_real" &
    OMP_NUM_THREADS=2 t k2-rest 450 tests/launch/test_k2.py -k "gpu and (phase_by_phase or expert_options or ring)" &
    OMP_NUM_THREADS=2 t k2-rest2 450 tests/launch/test_k2.py tests/launch/test_k2_routing.py tests/launch/test_triton_smem.py tests/launch/test_sglang_moe.py \
      -k "gpu and not gpu_small and not gpu_real and not phase_by_phase and not expert_options and not ring \
and not seam_run_twice and not flat_dense and not flat_expert" &
    OMP_NUM_THREADS=2 t k2-rest3 450 tests/launch/test_k2.py -k "gpu and (seam_run_twice or flat_dense or flat_expert)" &
    OMP_NUM_THREADS=2 t k2-aiter 450 tests/launch/test_k2_expert_layouts.py -k gpu &
    OMP_NUM_THREADS=3 t k1-gpu 450 tests/launch/test_k1.py -k "not interpret" &
    wait ;;
  k2-one-gpu)  # one-gpu's K2 groups alone (when K1's code has not changed since its tests last passed)
    OMP_NUM_THREADS=2 t k2-small 420 tests/launch/test_k2.py -k "gpu_small" &
    OMP_NUM_THREADS=2 t k2-real 420 tests/launch/test_k2.py -k "gpu_real" &
    OMP_NUM_THREADS=2 t k2-rest 420 tests/launch/test_k2.py -k "gpu and (phase_by_phase or expert_options or ring)" &
    OMP_NUM_THREADS=2 t k2-rest2 420 tests/launch/test_k2.py tests/launch/test_k2_routing.py tests/launch/test_triton_smem.py tests/launch/test_sglang_moe.py \
      -k "gpu and not gpu_small and not gpu_real and not phase_by_phase and not expert_options and not ring \
and not seam_run_twice and not flat_dense and not flat_expert" &
    OMP_NUM_THREADS=2 t k2-rest3 420 tests/launch/test_k2.py -k "gpu and (seam_run_twice or flat_dense or flat_expert)" &
    OMP_NUM_THREADS=2 t k2-aiter 420 tests/launch/test_k2_expert_layouts.py -k gpu &
    wait ;;
  *) echo "usage: tests.sh k2|k1|forward|tp2|tp|tp-step|one-gpu|k2-one-gpu" >&2; exit 2 ;;
esac
