# session 40's device calls (nvidia-h100-x1: one H100 80GB HBM3, started on the first unnamed call, held warm for
# all eight; carry [".whl"]; each command after `set -u; source tools/device/env.sh >/dev/null 2>&1`)
# call 1 (17:11-17:21 UTC, 998e832; cut by the call's 600 s during the last pytest)
K2_EXTRA=--trace bash tools/device/bench.sh k2 k2-m248 170 bf16 2,4,8 "" BI=32 STAGES=4 BI=32,STAGES=4 BL=64
STD_CONFIG=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json ROWS=2,4 timeout 150 bash tools/device/bench.sh step-std
t k2-mxfp4-real 300 tests/launch/test_k2.py -k "gpu_real and mxfp4"
# call 2 (17:22-17:26, ca619d8: the graph replay test with bf16 at 8 rows)
( OMP_NUM_THREADS=4 t k2-replay 260 tests/launch/test_k2.py -k "gpu and graph_replay" ) > /tmp/replay.out 2>&1 &
( OMP_NUM_THREADS=4 t k2-mxfp4-rest 260 tests/launch/test_k2.py -k "gpu_real and mxfp4 and (BNO or LSQ or nvb7)" ) > /tmp/mx.out 2>&1 &
wait
STD_CONFIG=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json ROWS=8,1 timeout 300 bash tools/device/bench.sh step-std
# call 3 (17:26-17:32, ca619d8; k2-rest cut by its own 330 s inside the options test)
STD_CONFIG=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json ROWS=1 timeout 200 bash tools/device/bench.sh step-std
( OMP_NUM_THREADS=2 t k2-rest 330 tests/launch/test_k2.py -k "gpu and (phase_by_phase or expert_options or ring)" ) > /tmp/r1.out 2>&1 &
( OMP_NUM_THREADS=2 t k2-rest3 330 tests/launch/test_k2.py -k "gpu and (seam_run_twice or flat_dense or flat_expert)" ) > /tmp/r3.out 2>&1 &
wait
# call 4 (17:32-17:34, ca619d8)
( OMP_NUM_THREADS=4 t k2-ring 200 tests/launch/test_k2.py -k "gpu and ring" ) > /tmp/ring.out 2>&1 &
( OMP_NUM_THREADS=4 t k2-opts 300 tests/launch/test_k2.py -k "gpu and expert_options" ) > /tmp/opts.out 2>&1 &
wait
# call 5 (17:34-17:36, ca619d8): bench.sh's K2_REST_B selection
source <(sed -n '/^K2_REST_B=/,/flat_expert"$/p' tools/device/bench.sh)
OMP_NUM_THREADS=8 t k2-rest2 290 tests/launch/test_k2.py tests/launch/test_k2_routing.py tests/launch/test_triton_smem.py tests/launch/test_sglang_moe.py -k "$K2_REST_B"
# call 6 (17:36-17:37, ca619d8)
timeout 170 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats bf16 --no-phases --std-config docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
# call 7 (17:37, ca619d8)
timeout 120 python3 -m sgl_k3_mono.k2.bench --rows 1,2 --formats bf16 --no-phases --trace
# call 8 (17:38, ca619d8)
timeout 100 python3 -m sgl_k3_mono.k2.bench --rows 2 --formats bf16 --no-phases --trace --block BI=32 --block BI=32,STAGES=4
