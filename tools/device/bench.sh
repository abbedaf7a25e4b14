#!/bin/bash
# The benchmarks on one H200, one device call a mode (each fits the 600 s a call may run):
#   bash tools/device/bench.sh launches  # K2 and K1 against their standard paths and byte floors (~5 min)
#   bash tools/device/bench.sh step      # the decode step, bf16 experts (with the standard step) and MXFP4 (~8 min)
#   bash tools/device/bench.sh sweep     # K2's in-launch phase profile and its tile options (KSX, BNF, BNH, PF,
#                                        # 16 warps) (~8 min)
#   bash tools/device/bench.sh sweep-k1  # K1's in-projection prefetch, decode and verify (~4 min)
#   bash tools/device/bench.sh sweep-experts  # K2's MXFP4 expert options: register prefetch (XPD), whole-item
#                                             # L2 prefetch (XL2), with and without the K split (KSX) (~5 min)
#   bash tools/device/bench.sh k2 NAME TIMEOUT FORMATS ROWS BLOCK...  # one K2 sweep of the blocks given
#   bash tools/device/bench.sh defaults  # K2's default against its one-key neighbours (~4 min)
#   bash tools/device/bench.sh trace     # K2's in-launch phase trace of the default
#   bash tools/device/bench.sh ring      # K2's shared-memory expert ring and BK 128, A/B, with the ring's tests
#   bash tools/device/bench.sh carve     # K2 with its shared-memory carveout fitted to its block (CARVE), with the
#                                        # rings, and which shared size each build ran with (~8 min)
#   bash tools/device/bench.sh k1-carve-warm; bash tools/device/bench.sh k1-carve  # K1's fitted carveout, A/B
#   bash tools/device/bench.sh sdu       # the shared down on idle programs (SDU 2), the K split's choice, BK 256
#                                        # from 5 rows; every K2 GPU test beside it (~9 min)
#   bash tools/device/bench.sh xdb       # experts_down's items one run a program (XDB), the K split at 3 and 5
#                                        # rows; every K2 GPU test beside it (~9 min; never run yet)
#   bash tools/device/bench.sh ncu-mem   # L1 / L2 hit rates and DRAM bytes of K2's MXFP4 launch and expert
#                                        # phases under Nsight Compute (~4 min; never run yet)
#   bash tools/device/bench.sh l2b       # the expert loads' L2 prefetch-size hint (XL2B / XL2BD) and experts_down's
#                                        # expert table (XET); every K2 GPU test beside it (~9 min)
#   bash tools/device/bench.sh xet       # the default with both against the one before, XET 2, XPDD 1, KUD 3 (~9 min)
#   bash tools/device/bench.sh xet2      # the step file and every K2 GPU test on XET 2 / KUD 3, then the A/B (~9 min)
#   bash tools/device/bench.sh work      # the tests the head owed (options' KUD 3, expert table, the step file), then
#                                        # the default's trace with each program's own work a phase (~8 min)
#   bash tools/device/bench.sh fr        # the routing inside the front (FR), the shared down split over the expert
#                                        # phases (SDUQ); every K2 GPU test beside it (~9 min)
#   bash tools/device/bench.sh fr2       # FR and SDUQ 6 the default: every K2 GPU test and the step file, then the
#                                        # A/B against FR 0, BNR 64, SDUQ 16 (~9 min)
#   bash tools/device/bench.sh fr3       # the head's K2 under every K2 GPU test and the step file, then the A/B
#                                        # against BNR 16 and FR 0 (~9 min)
#   AB_OLD=DIR bash tools/device/bench.sh ab-tree  # every K1 GPU test and K2's small and real groups, then K2 and
#                                        # K1 timed here against the tree in DIR (~8 min)
#   bash tools/device/bench.sh lsq       # latent_up's norm from the latent tiles' sums of squares (LSQ) under every
#                                        # K2 GPU group, then the default against LSQ=1 (~9 min)
#   bash tools/device/bench.sh lsq2      # LSQ the default from 2 rows: every K2 GPU test and the step file, then
#                                        # the default against LSQ=0 (~9 min)
#   bash tools/device/bench.sh owed      # K2's rest group and the step file's real bf16 case, side by side (~7 min)
#   bash tools/device/bench.sh dense     # K2's dense phases: latent_up's norm chunk (BKN) and BK 256 against the
#                                        # experts_down ring at 3 to 8 rows, every K2 GPU test beside it (~9 min)
# (Until the fourteenth session every timed row compiled its launch again, 20-45 s, after the
# warm step had compiled it: SGLang's import moved Triton's cache. env.sh now pins it.)
# Logs under $OUT. Each sweep compiles its variants first, all at once (env.sh `warm`).
set -u
source tools/device/env.sh
# k2_sweep NAME TIMEOUT FORMATS ROWS BLOCK...: bench k2 over the blocks ("" = the defaults),
# their launches compiled in parallel first
# (K2_EXTRA: more bench arguments for both, e.g. --trace)
k2_sweep() {
  local name=$1 to=$2 fmts=$3 rows=$4; shift 4
  local cmds=() args=() b x=${K2_EXTRA:-}
  for b in "$@"; do
    cmds+=("timeout 300 python3 -m sgl_k3_mono.k2.bench --rows $rows --formats $fmts --block '$b' $x --warm-only")
    args+=(--block "$b")
  done
  warm "$OUT/$name-warm.log" "${cmds[@]}"
  # shellcheck disable=SC2086
  [ -n "${K2_WAIT:-}" ] && wait $K2_WAIT  # (K2_WAIT: a background job to finish before the timing)
  # shellcheck disable=SC2086
  ( timeout "$to" python3 -m sgl_k3_mono.k2.bench --rows "$rows" --formats "$fmts" --no-phases $x "${args[@]}" 2>&1 \
      | grep -E "K2BENCH|K2TRACE|K2WORK|device|Error" ) | tee "$OUT/$name.log"
}
# k2_gpu_tests TIMEOUT: tests.sh k2-one-gpu's three K2 groups, each its own pytest process, into
# $OUT/k2-one-gpu.out (here so that env.sh's install into /tmp/site runs once); a mode runs it in the
# background beside its warm step and waits for it before timing (K2_WAIT). Under the compiles of two
# warm steps the rest group needed more than 420 s once (nineteenth session, call 1)
# k2_rest TIMEOUT: K2's third group (graph replay, fault injection, phase by phase, routing, smem)
k2_rest() {
  OMP_NUM_THREADS=2 t k2-rest "$1" tests/launch/test_k2.py tests/launch/test_k2_routing.py \
    tests/launch/test_triton_smem.py -k "gpu and not gpu_small and not gpu_real"
}
k2_gpu_tests() {
  ( OMP_NUM_THREADS=2 t k2-small "$1" tests/launch/test_k2.py -k "gpu_small" &
    OMP_NUM_THREADS=2 t k2-real "$1" tests/launch/test_k2.py -k "gpu_real" &
    k2_rest "$1" &
    wait ) > "$OUT/k2-one-gpu.out" 2>&1
}
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
    k1w="timeout 200 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --warm-only --prefetch"
    warm "$OUT/k1-warm.log" "$k1w 0" "$k1w 4096" "$k1w 14336"
    for pf in 0 4096 14336; do
      ( timeout 90 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --no-phases --prefetch $pf 2>&1 \
          | tail -9 ) | tee -a "$OUT/k1-prefetch.log"
    done ;;
  sweep-experts)
    k2_sweep k2-sweep-experts 300 mxfp4 1,2,4,8 "" XPD=1 XPD=2 XL2=1 XL2=2 XL2=1,XPD=1 XL2=2,XPD=1 KSX=2 KSX=4 \
      XL2=1,KSX=2 XPD=1,KSX=2 XL2=1,XPD=1,KSX=2 num_warps=16,KSX=2 num_warps=16,KSX=2,XPD=1 STAGES=4 KUD=2
    k2_sweep k2-sweep-bf16 120 bf16 1,2,4,8 "" STAGES=4
    K2_EXTRA=--trace k2_sweep k2-trace 100 mxfp4 1,2,4,8 "" ;;
  defaults)  # K2's default against its one-key neighbours: experts_down's prefetch, the shared down's
             # place (SDU auto against forced on / off), KUD 3, the split seam, the K split (2, and
             # ksx_choice's per row count), and at 1 row the dense phases on tensor cores, or as GEMVs
             # of 64-row tiles (o_proj: 112 tiles, one a program, where 16-row ones are 448: 11.8 us
             # in the thirteenth session's trace against 8.7 at 2 rows) (~4 min with the cache pinned:
             # ~2 s a timed block)
    k2_sweep k2-defaults-mxfp4 300 mxfp4 1,2,4,8 "" XPDD=1 SDU=0 SDU=1 KUD=3 SEAM_SPLIT=0 KSX=2 \
      KSX=-1 DENSE_GEMV=0 BN=64,BK=128 ;;
  ring)  # mma_fp4's cp.async ring (XRS / XRSD) and the dense phases' K step (BK 128, the fastest
         # neighbour of the fifteenth session's call 1), A/B; the ring's GPU tests run beside the
         # warm step (two pytest processes), and finish before the timing (~6 min)
    ( t k2-ring-bitwise 420 tests/launch/test_k2.py -k ring_is_bitwise ) > "$OUT/k2-ring-bitwise.out" 2>&1 &
    p1=$!
    ( t k2-ring-cases 420 tests/launch/test_k2.py -k XRS ) > "$OUT/k2-ring-cases.out" 2>&1 &
    p2=$!
    K2_WAIT="$p1 $p2" k2_sweep k2-ring 240 mxfp4 1,2,4,8 "" BK=128 BK=128,KSX=-1 BK=128,KSX=-1,KUD=3 XRS=3 \
      XRS=3,XRSD=3 BK=128,XRS=3,XRSD=3,KSX=-1 BK=128,XRS=4,XRSD=4
    cat "$OUT/k2-ring-bitwise.out" "$OUT/k2-ring-cases.out" ;;
  carve)  # the default (the launch's carveout fitted to its block, CARVE 1, and experts_down's ring from
          # 2 rows) against the driver's carveout and the register loop: Triton 3.6 asks for the largest
          # shared part for any kernel past 48 KB (Nsight Compute: a 233 KB configuration, L1 the rest of
          # 256), which is how experts_down's ring had slowed experts_up's register loop (sixteenth
          # session); the options' bitwise test beside the warm step, then each build's shared bytes
          # and hint, and under Nsight Compute the SM's configured shared size
    t smem-gpu 120 tests/launch/test_triton_smem.py
    ( t k2-options 420 tests/launch/test_k2.py -k expert_options ) > "$OUT/k2-options.out" 2>&1 &
    p1=$!
    K2_WAIT="$p1" K2_EXTRA=--trace k2_sweep k2-carve 200 mxfp4 1,2,4,8 "" CARVE=0 XRSD=0 CARVE=0,XRSD=0 \
      XRS=2 XRS=3,XRSD=3
    cat "$OUT/k2-options.out"
    ( timeout 100 python3 tools/device/carveout_probe.py 1,2,4,8 "" CARVE=0 XRSD=0 CARVE=0,XRSD=0 2>&1 \
        | grep -E "CARVEPROBE|Error" ) | tee "$OUT/carveout-probe.log"
    ( timeout 120 ncu --clock-control none -k regex:k2_kernel --section LaunchStats \
        python3 tools/device/carveout_probe.py 2,8 "" CARVE=0 XRSD=0 2>&1 \
        | grep -E "CARVEPROBE|k2_kernel|Shared Memory Configuration Size|Dynamic Shared|Registers Per|Error" ) \
        | tee "$OUT/carveout-ncu.log" ;;
  k1-carve-warm)  # K1 with its carveout fitted (K1Plan.carve), compiled only: beside the GPU tests
    k1w="timeout 300 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --warm-only"
    warm "$OUT/k1-carve-warm.log" "$k1w" "$k1w --carve" ;;
  k1-carve)  # ... then timed against the driver's carveout (after the tests: the GPU to itself)
    for c in "" --carve; do
      ( timeout 100 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --no-phases $c 2>&1 | tail -11 ) \
        | tee -a "$OUT/k1-carve.log"
    done ;;
  dense)  # the dense phases (eighteenth session): latent_up's norm passes in BKN-wide chunks (the
          # default; BKN=128 is how they ran before), and from 3 rows BK 256 without experts_down's
          # ring (the default at 3 and 4 rows) against BK 128 with it (the default from 5); every
          # K2 GPU test beside the warm step (tests.sh k2-one-gpu's groups), the timing after them (~9 min)
    k2_gpu_tests 420 &
    p1=$!
    K2_WAIT="$p1" K2_EXTRA=--trace k2_sweep k2-dense 150 mxfp4 3,4,5,6,7,8 "" BK=128,XRSD=2 BK=256,XRSD=0 BKN=128
    cat "$OUT/k2-one-gpu.out" ;;
  sdu)  # nineteenth session (run on 9a1cc3b, before the K split became the default at 1 and 4 rows): the
        # shared down's tiles on the programs the routed items leave idle (SDU 2, the default at 1 and 2
        # rows) against after the routed items (SDU 1, as before), the K split's choice (KSX -1), and from
        # 5 rows BK 256 without experts_down's ring (the default now) against BK 128 with it; every K2 GPU
        # test beside the warm steps, the timing after them (~9 min)
    k2_gpu_tests 480 &
    p1=$!
    w2="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 5,6,8 --formats mxfp4 --trace --warm-only --block"
    ( warm "$OUT/k2-bk-prewarm.log" "$w2 ''" "$w2 BK=128,XRSD=2" ) &
    p2=$!
    K2_WAIT="$p1 $p2" K2_EXTRA=--trace k2_sweep k2-sdu 100 mxfp4 1,2,4 "" SDU=1 KSX=-1
    K2_EXTRA=--trace k2_sweep k2-bk 100 mxfp4 5,6,8 "" BK=128,XRSD=2
    cat "$OUT/k2-one-gpu.out" ;;
  xdb)  # (ran in the twentieth session: k2-sm90.md) experts_down's items one run a program (XDB 1: a program's items
        # share an expert's x rows) against round the grid, and the K split (KSX -1) at 3 and 5 rows,
        # where it was not timed; every K2 GPU test beside the warm steps (the options test now has
        # XDB's two cases), the timing after them (~9 min)
    k2_gpu_tests 520 &
    p1=$!
    w2="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 3,5 --formats mxfp4 --trace --warm-only --block"
    ( warm "$OUT/k2-ksx-prewarm.log" "$w2 ''" "$w2 KSX=-1" ) &
    p2=$!
    K2_WAIT="$p1 $p2" K2_EXTRA=--trace k2_sweep k2-xdb 100 mxfp4 1,2,4,8 "" XDB=1
    K2_EXTRA=--trace k2_sweep k2-ksx 100 mxfp4 3,5 "" KSX=-1
    cat "$OUT/k2-one-gpu.out" ;;
  l2b)  # twenty-second session: the expert loads' L2 prefetch-size hint (XL2B / XL2BD: a load that misses
        # L2 brings the aligned 128 / 256 bytes around it from HBM, the row's next k-blocks with it) and
        # experts_down's expert table (XET: no CTA-wide sum an item), each alone and together, traced;
        # every K2 GPU test beside the warm step (the options test has their bitwise rows) (~9 min)
    k2_gpu_tests 500 &
    p1=$!
    K2_WAIT="$p1" K2_EXTRA=--trace k2_sweep k2-l2b 200 mxfp4 1,2,4,8 "" XL2B=256 XL2BD=256 XL2B=256,XL2BD=256 \
      XL2B=128,XL2BD=128 XET=1 XET=1,XL2B=256,XL2BD=256
    cat "$OUT/k2-one-gpu.out" ;;
  xet)  # twenty-second session, second call: the new default (XET 1, XL2B / XL2BD 256) against the one
        # before it, the next item's expert a step ahead (XET 2), and experts_down's k-blocks loaded ahead
        # (XPDD 1) or all three in one step (KUD 3) now that an item no longer waits on a CTA-wide sum,
        # and the 128-byte hint; every K2 GPU test beside the warm step (~9 min)
    k2_gpu_tests 500 &
    p1=$!
    K2_WAIT="$p1" K2_EXTRA=--trace k2_sweep k2-xet 200 mxfp4 1,2,4,8 "" XET=0,XL2B=0,XL2BD=0 XET=2 XPDD=1 KUD=3 \
      XL2B=128,XL2BD=128
    cat "$OUT/k2-one-gpu.out" ;;
  xet2)  # twenty-second session, last call: the step file and every K2 GPU test on the new default (XET 2;
         # KUD 3 from 4 rows), then that default against the one before it (XET 1, KUD 1) at 1-8 rows (~8 min)
    ( t forward-gpu 320 tests/forward/test_forward_gpu.py -k "not k_split" ) > "$OUT/forward-gpu.out" 2>&1 &
    p0=$!
    k2_gpu_tests 430 &
    p1=$!
    K2_WAIT="$p0 $p1" K2_EXTRA=--trace k2_sweep k2-xet2 40 mxfp4 1,2,4,8 "" XET=1,KUD=1
    cat "$OUT/forward-gpu.out" "$OUT/k2-one-gpu.out" ;;
  work)  # twenty-third session, first call: what had not run on the head's kernel (the options test's KUD 3
         # row, the expert table on the GPU, the step file's real cases) beside the warm step; then the
         # default's trace with each program's own work a phase (entry to its barrier: the pole the grid
         # waits on), and the shared down in experts_down (SDU 0) beside it (~8 min)
    ( t forward-gpu 420 tests/forward/test_forward_gpu.py -k "not k_split" ) > "$OUT/forward-gpu.out" 2>&1 &
    p0=$!
    ( t k2-options 420 tests/launch/test_k2.py tests/launch/test_k2_routing.py -k "expert_options or (table and gpu)" ) \
      > "$OUT/k2-options.out" 2>&1 &
    p1=$!
    K2_WAIT="$p0 $p1" K2_EXTRA=--trace k2_sweep k2-work 120 mxfp4 1,2,4,8 "" SDU=0
    cat "$OUT/forward-gpu.out" "$OUT/k2-options.out" ;;
  fr)  # twenty-third session, second call: the routing and the shared SiTU inside the front (FR; with the
       # front's own 64-row tiles for the router too, BNR 64), and at 1-2 rows the shared down's tiles split
       # between experts_up and experts_down (SDUQ sixteenths in experts_up); every K2 GPU test beside the
       # warm steps (the options test has both's bitwise rows), the timing after them (~9 min)
    k2_gpu_tests 480 &
    p1=$!
    w2="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 1,2 --formats mxfp4 --trace --warm-only --block"
    ( warm "$OUT/k2-sduq-prewarm.log" "$w2 SDUQ=6" "$w2 SDUQ=8" "$w2 SDUQ=10" "$w2 FR=1,SDUQ=8" ) &
    p2=$!
    K2_WAIT="$p1 $p2" K2_EXTRA=--trace k2_sweep k2-fr 100 mxfp4 1,2,4,8 "" FR=1 FR=1,BNR=64
    K2_EXTRA=--trace k2_sweep k2-sduq 100 mxfp4 1,2 SDUQ=6 SDUQ=8 SDUQ=10 FR=1,SDUQ=8
    cat "$OUT/k2-one-gpu.out" ;;
  fr2)  # twenty-third session, third call: the new default (FR; SDUQ 6 at 1 row) under every K2 GPU test and
        # the step file beside the warm step; then the default against a routing phase of its own (FR 0),
        # FR with the front's 64-row tiles for the router too (BNR 64), and at 1 row all the shared down in
        # experts_up (SDUQ 16) (~9 min)
    ( t forward-gpu 470 tests/forward/test_forward_gpu.py -k "not k_split" ) > "$OUT/forward-gpu.out" 2>&1 &
    p0=$!
    k2_gpu_tests 470 &
    p1=$!
    K2_WAIT="$p0 $p1" K2_EXTRA=--trace k2_sweep k2-fr2 60 mxfp4 1,2,4,8 "" FR=0 BNR=64 SDUQ=16
    cat "$OUT/forward-gpu.out" "$OUT/k2-one-gpu.out" ;;
  fr3)  # twenty-fourth session, first call (on e82cd8d): the head's K2 (FR's first helper a runtime argument,
        # frh) under every K2 GPU test and the step file beside the warm step; then the default against
        # 16-row router / shared tiles (BNR 16: the routing starts sooner, the front deals more tiles) and FR 0
    ( t forward-gpu 470 tests/forward/test_forward_gpu.py -k "not k_split" ) > "$OUT/forward-gpu.out" 2>&1 &
    p0=$!
    k2_gpu_tests 470 &
    p1=$!
    K2_WAIT="$p0 $p1" K2_EXTRA=--trace k2_sweep k2-fr3 60 mxfp4 1,2,4,8 "" BNR=16 FR=0
    cat "$OUT/forward-gpu.out" "$OUT/k2-one-gpu.out" ;;
  lsq)  # latent_up's norm from the latent tiles' shares of the sum of squares (LSQ; ran as an option in the
        # twenty-fifth session, then made the default from 2 rows): every K2 GPU group beside the warm step, then
        # the default against LSQ=1, traced (~9 min)
    k2_gpu_tests 470 &
    p1=$!
    K2_WAIT="$p1" K2_EXTRA=--trace k2_sweep k2-lsq 80 mxfp4 1,2,4,8 "" LSQ=1
    cat "$OUT/k2-one-gpu.out" ;;
  lsq2)  # twenty-fifth session, third call: LSQ the default from 2 rows; every K2 GPU test and the step file
         # on it beside the warm step, then the default against LSQ=0, traced (~9 min)
    ( t forward-gpu 470 tests/forward/test_forward_gpu.py -k "not k_split" ) > "$OUT/forward-gpu.out" 2>&1 &
    p0=$!
    k2_gpu_tests 470 &
    p1=$!
    K2_WAIT="$p0 $p1" K2_EXTRA=--trace k2_sweep k2-lsq2 60 mxfp4 1,2,4,8 "" LSQ=0
    cat "$OUT/forward-gpu.out" "$OUT/k2-one-gpu.out" ;;
  owed)  # what the twenty-fifth session's calls left unrun on LSQ's default (5fca291): K2's rest group (graph
          # replay, fault injection, phase by phase, routing, smem) and the step file's real bf16 case, side by
          # side (~7 min); then `bash tools/device/bench.sh step` for the step table on it
    k2_rest 560 > "$OUT/k2-rest.out" 2>&1 &
    p0=$!
    ( t forward-bf16 560 tests/forward/test_forward_gpu.py -k "real-bf16" ) > "$OUT/forward-bf16.out" 2>&1 &
    wait $p0 $!
    cat "$OUT/k2-rest.out" "$OUT/forward-bf16.out" ;;
  ab-tree)  # this tree against another (AB_OLD: that tree's sgl_k3_mono and configs, `git archive` into an
             # ignored folder and carried), for a change no block option can switch: every K1 GPU test and K2's
             # small and real groups on this tree beside the warm steps, then K2 (traced) and K1 timed here and
             # there one after the other (K2 new / old / new, K1 new / old) (~8 min). Ran once: the twenty-fourth
             # session's two-step split seam against e82cd8d (k2-sm90.md; the seam lost and was reverted)
    old=${AB_OLD:?AB_OLD: the tree to time against}
    ( OMP_NUM_THREADS=2 t k1-gpu 430 tests/launch/test_k1.py -k "not interpret" ) > "$OUT/k1-gpu.out" 2>&1 &
    p0=$!
    ( OMP_NUM_THREADS=2 t k2-small 430 tests/launch/test_k2.py -k "gpu_small" &
      OMP_NUM_THREADS=2 t k2-real 430 tests/launch/test_k2.py -k "gpu_real" & wait ) > "$OUT/k2-one-gpu.out" 2>&1 &
    p1=$!
    k2w="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4 --trace --warm-only --block ''"
    k1w="timeout 300 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --warm-only"
    warm "$OUT/ab-warm.log" "$k2w" "$k1w" "cd $old && PYTHONPATH=/tmp/site:\$PWD $k2w" \
      "cd $old && PYTHONPATH=/tmp/site:\$PWD $k1w"
    wait $p0 $p1
    k2t="timeout 80 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4 --no-phases --trace"
    k1t="timeout 80 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --no-phases"
    for tree in new old new; do
      d=.; [ $tree = old ] && d=$old
      echo "== K2 $tree"; ( cd $d && PYTHONPATH=/tmp/site:$PWD $k2t 2>&1 | grep -E "K2BENCH|K2TRACE|K2WORK|Error" )
    done | tee "$OUT/k2-ab.log"
    for tree in new old; do
      d=.; [ $tree = old ] && d=$old
      echo "== K1 $tree"; ( cd $d && PYTHONPATH=/tmp/site:$PWD $k1t 2>&1 | tail -9 )
    done | tee "$OUT/k1-ab.log"
    cat "$OUT/k1-gpu.out" "$OUT/k2-one-gpu.out" ;;
  ncu-mem)  # where experts_up's register loop gets its bytes (the sixteenth session's L1 lead, never read):
             # Nsight Compute's L1 / L2 hit rates, DRAM throughput and shared-memory configuration of K2's
             # MXFP4 launches, the persistent launch and then its phases 4 and 5 as launches of their own
             # (their builds hold less shared memory, so their L1 is not the persistent launch's), at 8
             # rows with the default (no ring) and with experts_down's ring (XRSD 2), and at 1 row (~4 min)
    for spec in "8:" "8:XRSD=2" "1:"; do
      echo "== NCU_M=${spec%%:*} NCU_BLOCK=${spec#*:}"
      ( NCU_M=${spec%%:*} NCU_BLOCK=${spec#*:} timeout 150 ncu --clock-control none -k regex:k2_kernel \
          --launch-count 3 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
          python3 tools/device/ncu_k2_experts.py k2 2>&1 \
          | grep -E "k2_kernel|Duration|Hit Rate|DRAM Throughput|Memory Throughput|Mem Busy|Shared Memory Configuration|Registers Per|ERROR|Error" )
    done | tee "$OUT/ncu-mem.log" ;;
  trace)  # the default's in-launch phase trace
    K2_EXTRA=--trace k2_sweep k2-trace 300 mxfp4 1,2,4,8 "" ;;
  k2) shift; k2_sweep "$@" ;;  # bench.sh k2 NAME TIMEOUT FORMATS ROWS BLOCK...: any K2 sweep (K2_EXTRA too)
  *) echo "usage: bench.sh launches|step|sweep|sweep-k1|sweep-experts|defaults|ring|carve|k1-carve-warm|k1-carve|dense|sdu|xdb|l2b|xet|xet2|work|fr|fr2|fr3|ab-tree|lsq|lsq2|owed|ncu-mem|trace|k2 ..." >&2; exit 2 ;;
esac
