#!/bin/bash
# The benchmarks on one H200, one device call a mode (each fits the 600 s a call may run):
#   bash tools/device/bench.sh launches  # K2 and K1 against their standard paths and byte floors (~5 min)
#   bash tools/device/bench.sh step      # the decode step, bf16 experts (with the standard step) and MXFP4 (~8 min)
#   bash tools/device/bench.sh tp        # (x2 / x4 / x8) bench k2-tp: K2 at TP 2-8 against SGLang's composition
#                                        # over NCCL, the reduces alone (NCCL, torch symm-mem, SGLang's JIT one)
#   bash tools/device/bench.sh tp-step   # (x2 / x4 / x8) bench step --tp: the step at TP 2-8 against the standard
#                                        # step with NCCL reduces
#   bash tools/device/bench.sh bf16-gate [[ROWS:]BLOCK...]  # bf16 K2's GPU tests, the standard paths' checks,
#                                        # SGLang's fused MoE tuned for K3's shapes, then K2 (its default and the
#                                        # blocks given) against SGLang's default and tuned configs (~8 min)
#   STD_CONFIG=FILE ROWS=1,8 bash tools/device/bench.sh step-std  # the bf16 step against the standard step with
#                                        # SGLang's fused MoE in the tuned configs (~5-9 min)
#   bash tools/device/bench.sh trace     # K2's in-launch phase trace of the default
#   bash tools/device/bench.sh defaults  # K2's default against its one-key neighbours (~4 min)
#   bash tools/device/bench.sh step-mx   # the step file's real MXFP4 case, then the MXFP4 step table (~5 min)
#   bash tools/device/bench.sh gate BLOCK...  # a new K2 default's gate, first call: K2's small and real groups
#                                        # beside the warm step, then the default against BLOCK... (its
#                                        # neighbours), traced (~8 min)
#   bash tools/device/bench.sh gate-rest # its second call: K2's rest group beside the step file, then the
#                                        # MXFP4 step table (~8 min; not yet run in this form)
#   bash tools/device/bench.sh ab BLOCK...    # a K2 option's A/B: every K2 GPU test (the options test holds its
#                                        # bitwise row) beside the warm step, then the default against BLOCK...,
#                                        # traced (~9 min)
#   AB_OLD=DIR bash tools/device/bench.sh ab-tree  # every K1 GPU test and K2's small and real groups, then K2 and
#                                        # K1 timed here against the tree in DIR (~8 min)
#   bash tools/device/bench.sh k1 NAME VARIANT...  # bench k1 for each VARIANT (its flags, "" the defaults),
#                                        # decode and verify, compiled in parallel, then timed twice in turn
#                                        # (K1_ROWS, default 1,2,4,8; ~1 min a timed run)
#   bash tools/device/bench.sh ncu-src [ROWS:BLOCK...]  # the persistent launch under Nsight Compute, SASS line
#                                        # by line (issue, memory, stalls; ~1 min a spec; one .tgz back)
#   bash tools/device/bench.sh k2 NAME TIMEOUT FORMATS ROWS BLOCK...  # one K2 sweep of the blocks given
# A mode that one session's A/B needed once (standard and sgmoe-tune: bf16-gate and step-std now; sweep-k1:
# `k1 NAME "--prefetch 0" "--prefetch 4096"` now; cands,
# dense2, m1; sweep-experts, ring, carve, sdu, xdb, l2b, xet, fr, lsq, upf,
# stages, odd-rows, owed (gate-rest covers it), ncu-mem (ncu-src profiles the persistent launch), ...)
# lives in the git history at the commit docs/evidence names for its call; gate and ab are their common form.
# (Until the fourteenth session every timed row compiled its launch again, 20-45 s, after the
# warm step had compiled it: SGLang's import moved Triton's cache. env.sh now pins it.)
# Logs under $OUT. Each sweep compiles its variants first, all at once (env.sh `warm`).
set -u
source tools/device/env.sh
# k2_sweep NAME TIMEOUT FORMATS ROWS BLOCK...: bench k2 over the blocks ("" = the defaults),
# their launches compiled in parallel first
# (K2_EXTRA: more bench arguments for both, e.g. --trace; K2_TRACES=1 with --trace keeps every traced
# launch's stamps, a file a block in $OUT/traces, which python -m sgl_k3_mono.k2.trace_report FILE reads
# here: mind the 8 files a call brings back)
k2_sweep() {
  local name=$1 to=$2 fmts=$3 rows=$4; shift 4
  local cmds=() args=() b x=${K2_EXTRA:-}
  [ -n "${K2_TRACES:-}" ] && args+=(--trace-out "$OUT/traces")
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
# k2_small_real TIMEOUT: K2's small-shape and real-shape groups, side by side
k2_small_real() {
  OMP_NUM_THREADS=2 t k2-small "$1" tests/launch/test_k2.py -k "gpu_small" &
  OMP_NUM_THREADS=2 t k2-real "$1" tests/launch/test_k2.py -k "gpu_real" &
  wait
}
# k2_rest TIMEOUT: K2's third group, as three pytest processes side by side (one no longer fit 450 s,
# thirty-second session): phase by phase, the options and the rings (k2-rest); graph replay, fault
# injection, routing and smem (k2-rest2); the probes' bitwise tests, the seam run twice and FLATD (k2-rest3).
# The experts in AITER's layouts (tests/launch/test_k2_expert_layouts.py) are tests.sh's k2-aiter group, not here
K2_REST_A="gpu and (phase_by_phase or expert_options or ring)"
K2_REST_C="gpu and (seam_run_twice or flat_dense or flat_expert)"
K2_REST_B="gpu and not gpu_small and not gpu_real and not phase_by_phase and not expert_options and not ring \
and not seam_run_twice and not flat_dense and not flat_expert"
k2_rest() {
  OMP_NUM_THREADS=2 t k2-rest "$1" tests/launch/test_k2.py -k "$K2_REST_A" &
  OMP_NUM_THREADS=2 t k2-rest2 "$1" tests/launch/test_k2.py tests/launch/test_k2_routing.py \
    tests/launch/test_triton_smem.py tests/launch/test_sglang_moe.py -k "$K2_REST_B" &
  OMP_NUM_THREADS=2 t k2-rest3 "$1" tests/launch/test_k2.py -k "$K2_REST_C" &
  wait
}
# k2_gpu_tests TIMEOUT: tests.sh k2-one-gpu's three K2 groups, each its own pytest process, into
# $OUT/k2-one-gpu.out (here so that env.sh's install into /tmp/site runs once); a mode runs it in the
# background beside its warm step and waits for it before timing (K2_WAIT). Under the compiles of two
# warm steps the rest group needed more than 420 s once (nineteenth session, call 1)
k2_gpu_tests() {
  ( k2_small_real "$1" & k2_rest "$1" & wait ) > "$OUT/k2-one-gpu.out" 2>&1
}
case "${1:-}" in
  launches)
    ( timeout 120 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats mxfp4,bf16 --no-phases 2>&1 \
        | grep -E "K2BENCH|device|Error" ) | tee "$OUT/k2-bench.log"
    ( timeout 100 python3 -m sgl_k3_mono.k1.bench 2>&1 | tail -14 ) | tee "$OUT/k1-bench.log" ;;
  step)  # (bf16 ran past 250 s at 8 rows on a fresh machine in the twenty-sixth session; MXFP4 took 188 s)
    ( timeout 320 python3 -m sgl_k3_mono.cli bench step --fmt bf16 2>&1 | tail -12 ) | tee "$OUT/step-bench-bf16.log"
    ( timeout 240 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 2>&1 | tail -12 ) | tee "$OUT/step-bench-mxfp4.log" ;;
  tp)  # nvidia-h200-x2/x4/x8 (issue 7): bench k2-tp, bf16 experts (what an H200 serves) at 1 and 8 rows against
       # SGLang's composition with NCCL, the reduces alone, then MXFP4 (~8 min at most; not yet run: 36th session)
    ( timeout 330 python3 -m sgl_k3_mono.cli bench k2-tp --rows 1,8 --formats bf16 2>&1 \
        | grep -E "K2TP|Error|error|Traceback" ) | tee "$OUT/k2-tp-bf16.log"
    ( timeout 220 python3 -m sgl_k3_mono.cli bench k2-tp --rows 1,8 --formats mxfp4 --no-sglang-ar 2>&1 \
        | grep -E "K2TP|Error|error|Traceback" ) | tee "$OUT/k2-tp-mxfp4.log" ;;
  tp-step)  # nvidia-h200-x2/x4/x8 (issue 7): bench step --tp (every GPU here, a power of two), bf16 experts at 1 and
            # 8 rows against the standard step with NCCL reduces (~9 min at most; not yet run: 36th session)
    n=$(python3 -c "import torch; n = torch.cuda.device_count(); print(8 if n >= 8 else 4 if n >= 4 else 2)")
    ( timeout 560 python3 -m sgl_k3_mono.cli bench step --tp "$n" --fmt bf16 --rows 1,8 2>&1 | tail -14 ) \
      | tee "$OUT/step-bench-tp$n.log" ;;
  bf16-gate)  # bf16 K2's defaults gated and the bf16 standard paths checked and tuned, one call (at most ~7.5 min). Side by
              # side: K2's bf16 GPU tests (small and real shapes, FLATD bitwise), the standard paths' GPU checks
              # (SGLang's fused MoE composition; the standard step on it), the compiles (K2's default and the
              # blocks given after the mode, ROWS:BLOCK for some rows only; the tuner's grid). Then SGLang's
              # fused MoE tuned for Kimi-K3's rank shapes as SGLang's tuner would (no config file ships for E 896,
              # N 384: tools/device/sglang_moe_tune.py), then bench k2 bf16: the blocks against SGLang's default
              # config (std) and the tuned ones (std_tuned)
    shift  # (the .out files and the compiles' log in /tmp: a call brings 8 files back; pytest's logs are in $OUT)
    blocks=""
    for b in "" "$@"; do blocks+=" --block '$b'"; done
    ( OMP_NUM_THREADS=2 t k2-bf16-small 250 tests/launch/test_k2.py -k "gpu_small and bf16" ) \
      > /tmp/k2-bf16-small.out 2>&1 &
    ( OMP_NUM_THREADS=2 t k2-bf16-real 300 tests/launch/test_k2.py -k "gpu and ((bf16 and (gpu_real or flat_dense)) or flat_expert)" ) \
      > /tmp/k2-bf16-real.out 2>&1 &
    ( t sgmoe 180 tests/launch/test_sglang_moe.py -k gpu ) > /tmp/sgmoe.out 2>&1 &
    ( OMP_NUM_THREADS=2 t step-std 180 tests/forward/test_forward_gpu.py -k "standard_step" ) \
      > /tmp/step-std.out 2>&1 &
    # (memory: 8-19 GB a process; an H100's 78 GB takes one tuner process beside the tests, an H200 two)
    n=$(python3 -c "import torch; print(2 if torch.cuda.get_device_properties(0).total_memory > 100e9 else 1)")
    # (each block compiles in a process of its own, as k2_sweep's do: one process compiling six
    # blocks one after the other would not fit its 230 s; about 9 GB each once built: on an H100, beside
    # the tests, give few blocks, an H200 has not yet run more than one such process)
    cmds=()
    for b in "" "$@"; do
      cmds+=("timeout 230 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats bf16 --warm-only --block '$b'")
    done
    for ((p = 0; p < n; p++)); do
      cmds+=("timeout 230 python3 tools/device/sglang_moe_tune.py 1,2,4,8 --warm-part $p/$n")
    done
    warm /tmp/warm.log "${cmds[@]}"
    grep -E "SGTUNE warm|Error" /tmp/warm.log | cut -c1-300 | tail -6
    wait  # (the tests: nothing beside the timings)
    cat /tmp/k2-bf16-small.out /tmp/k2-bf16-real.out /tmp/sgmoe.out /tmp/step-std.out
    tuned="$OUT/sglang-moe-k3-tuned.json"  # (written a row count at a time: a time limit keeps the rows done)
    ( timeout 80 python3 tools/device/sglang_moe_tune.py 1,2,4,8 "$tuned" 2>&1 \
        | grep -E "SGTUNE|Error|Traceback" ) | tee "$OUT/sgmoe-tune.log"
    std=""; [ -s "$tuned" ] && std="--std-config $tuned" && cp "$tuned" /tmp/sglang-moe-k3-tuned.json  # (step-std's, next call)
    ( eval "timeout 150 python3 -m sgl_k3_mono.k2.bench --rows 1,2,4,8 --formats bf16 --no-phases $std$blocks" 2>&1 \
        | grep -E "K2BENCH|device|Error" ) | tee "$OUT/k2-bench-bf16.log" ;;
  step-std)  # the bf16 step table against the standard step on SGLang's fused MoE, its configs from STD_CONFIG
             # (a tuned file; unset: the one bf16-gate wrote on this warm machine, else SGLang's default),
             # ROWS (1,8; 1,8 then 2,4 took 106 + 68 s on a warm H100 after bench k2 in the 38th session),
             # each row count in a process of its own: in one process 1 row after 8 timed our launches 53 us
             # slower than 1 row alone, the standard step not (40th session, not understood)
    cfg=(); conf=${STD_CONFIG:-/tmp/sglang-moe-k3-tuned.json}
    [ -s "$conf" ] && cfg=(--std-config "$conf"); echo "step-std: standard MoE configs ${cfg[*]:-none (SGLang default)}"
    rows=${ROWS:-1,8}
    for r in ${rows//,/ }; do
      ( timeout 300 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows "$r" "${cfg[@]}" 2>&1 \
          | grep -E "^step bench|^ M |^ *[0-9]+ |Error|Traceback" )
    done | tee "$OUT/step-bench-bf16.log" ;;
  step-mx)  # a K2 default that changes only the MXFP4 expert path (mma): the step file's real MXFP4 case, then
            # the MXFP4 step table, one after the other so the table times an idle GPU (~5 min: 216 s
            # of a call in the twenty-seventh session)
    ( t forward-mxfp4 300 tests/forward/test_forward_gpu.py -k "real-mxfp4" ) > "$OUT/forward-mxfp4.out" 2>&1
    ( timeout 240 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 2>&1 | tail -12 ) | tee "$OUT/step-bench-mxfp4.log"
    cat "$OUT/forward-mxfp4.out" ;;
  gate-rest)  # a new K2 default's gate, second call: K2's rest group beside the step file (but the K split's
              # seeds), then the MXFP4 step table on the idle GPU (~8 min; not yet run in this form: the
              # twenty-eighth session's call 3 ran the tail of the rest group and the step file's real cases)
    k2_rest 330 > "$OUT/k2-rest.out" 2>&1 &
    ( OMP_NUM_THREADS=2 t forward-gpu 330 tests/forward/test_forward_gpu.py -k "not k_split and not standard_step" ) \
      > "$OUT/forward-gpu.out" 2>&1 &
    wait
    ( timeout 200 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 2>&1 | tail -12 ) | tee "$OUT/step-bench-mxfp4.log"
    cat "$OUT/k2-rest.out" "$OUT/forward-gpu.out" ;;
  trace)  # the default's in-launch phase trace
    K2_EXTRA=--trace k2_sweep k2-trace 300 mxfp4 1,2,4,8 "" ;;
  defaults)  # K2's default against its one-key neighbours: experts_down's prefetch, the shared down's
             # place (SDU auto against forced on / off), KUD 3, the split seam, the K split (2, and
             # ksx_choice's per row count), and at 1 row the dense phases on tensor cores, or as GEMVs
             # of 64-row tiles (o_proj: 112 tiles, one a program, where 16-row ones are 448: 11.8 us
             # in the thirteenth session's trace against 8.7 at 2 rows) (~4 min with the cache pinned:
             # ~2 s a timed block)
    k2_sweep k2-defaults-mxfp4 300 mxfp4 1,2,4,8 "" XPDD=1 SDU=0 SDU=1 KUD=3 SEAM_SPLIT=0 KSX=2 \
      KSX=-1 DENSE_GEMV=0 BN=64,BK=128 ;;
  gate)  # a new K2 default's gate, first call: K2's small and real groups beside the warm step, then the default
         # against the blocks given (its neighbours), traced. The rest group and the step file are `gate-rest`, a
         # second call: beside these two they no longer fit 470 s (twenty-eighth session, call 2)
    shift
    k2_small_real 470 > "$OUT/k2-small-real.out" 2>&1 &
    K2_WAIT="$!" K2_EXTRA=--trace k2_sweep k2-gate 80 mxfp4 1,2,4,8 "" "$@"
    cat "$OUT/k2-small-real.out" ;;
  ab)  # a K2 option's A/B (what l2b, xet, fr and lsq ran): every K2 GPU group beside the warm step (the options
       # test holds the option's bitwise row), then the default against the blocks given, traced
    shift
    k2_gpu_tests 470 &
    K2_WAIT="$!" K2_EXTRA=--trace k2_sweep k2-ab 120 mxfp4 1,2,4,8 "" "$@"
    cat "$OUT/k2-one-gpu.out" ;;
  ab-tree)  # this tree against another (AB_OLD: that tree's sgl_k3_mono and configs, `git archive` into an
             # ignored folder and carried), for a change no block option can switch: every K1 GPU test and K2's
             # small and real groups on this tree beside the warm steps, then K2 (traced) and K1 timed here and
             # there one after the other (K2 new / old / new, K1 new / old) (~8 min). Ran once: the twenty-fourth
             # session's two-step split seam against e82cd8d (k2-sm90.md; the seam lost and was reverted)
    old=${AB_OLD:?AB_OLD: the tree to time against}
    ( OMP_NUM_THREADS=2 t k1-gpu 430 tests/launch/test_k1.py -k "not interpret" ) > "$OUT/k1-gpu.out" 2>&1 &
    p0=$!
    k2_small_real 430 > "$OUT/k2-one-gpu.out" 2>&1 &
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
  k1)  # K1 variants side by side: each pass times every variant once, in the order given
    shift; k1n=$1; shift
    k1c=()
    for v in "$@"; do
      k1c+=("timeout 200 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows ${K1_ROWS:-1,2,4,8} --warm-only $v")
    done
    warm "$OUT/$k1n-warm.log" "${k1c[@]}"
    for pass in 1 2; do
      for v in "$@"; do
        # shellcheck disable=SC2086
        ( echo "K1AB pass $pass, variant '$v'"
          timeout 150 python3 -m sgl_k3_mono.k1.bench --modes decode,verify --rows "${K1_ROWS:-1,2,4,8}" --no-phases \
            $v 2>&1 | grep -E "^ *[0-9]+ +(decode|verify)|Error|copy bandwidth" ) | tee -a "$OUT/$k1n.log"
      done
    done ;;
  ncu-src)  # what the persistent launch's warps do, SASS line by line (twenty-ninth session): Nsight Compute on
             # K2's MXFP4 launch (a TP-8 rank) alone, not its phases as launches of their own, for each
             # ROWS:BLOCK given (default "1:" "8:"): issue, memory, and warp-state samples a line; the
             # source page (CSV) and the details page gzipped, the stalls summed by ncu_sass_stalls.py,
             # all in $OUT/ncu-src.tgz (ncu_sass_loops.py splits a source page by loop). The specs
             # compile first, in parallel (~1 min a spec after that)
    shift
    specs=("$@"); [ ${#specs[@]} -eq 0 ] && specs=("1:" "8:")
    cmds=()
    for spec in "${specs[@]}"; do
      w="timeout 300 python3 -m sgl_k3_mono.k2.bench --rows ${spec%%:*} --formats mxfp4"
      cmds+=("$w --block '${spec#*:}' --warm-only")
    done
    warm "$OUT/ncu-src-warm.log" "${cmds[@]}"
    i=0
    for spec in "${specs[@]}"; do
      i=$((i + 1)); rep="$OUT/ncu-src-$i"
      echo "== $i: NCU_M=${spec%%:*} NCU_BLOCK=${spec#*:}"
      NCU_M=${spec%%:*} NCU_BLOCK=${spec#*:} timeout 200 ncu --clock-control none -k regex:k2_kernel \
        --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
        --section SchedulerStats --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
        --section LaunchStats -o "$rep" python3 tools/device/ncu_k2_experts.py k2 > "$rep.run.log" 2>&1
      tail -3 "$rep.run.log"
      ncu --import "$rep.ncu-rep" --page details --csv 2>/dev/null | gzip > "$rep-details.csv.gz"
      ncu --import "$rep.ncu-rep" --page source --print-source sass --csv 2>/dev/null > "$rep-sass.csv"
      python3 tools/device/ncu_sass_stalls.py "$rep-sass.csv" 30
      gzip "$rep-sass.csv"; rm -f "$rep.ncu-rep"
    done 2>&1 | tee "$OUT/ncu-src.log"
    ( cd "$OUT" && tar czf ncu-src.tgz ncu-src[-.]* --remove-files ) ;;  # one file back (a call returns few)
  k2) shift; k2_sweep "$@" ;;  # bench.sh k2 NAME TIMEOUT FORMATS ROWS BLOCK...: any K2 sweep (K2_EXTRA too)
  *) echo "usage: bench.sh launches|step|step-mx|bf16-gate|step-std|trace|defaults|gate|gate-rest|ab|ab-tree|k1|ncu-src|k2 ..." >&2
     exit 2 ;;
esac
