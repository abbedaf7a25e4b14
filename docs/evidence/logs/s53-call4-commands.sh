# s53 call 4: what K2's warps wait on when it runs after other code. bf16, a TP-8 rank, 1 row: the persistent
# launch run twice, the second profiled by Nsight Compute (warp states), with nothing between (warm) or 110 KB of
# other straight-line code between (code: bench k2's after_code_110kb). Application replay, caches untouched by
# ncu, so every pass runs what precedes the launch. no_instruction vs imc_miss vs long_scoreboard says whether
# the cost is the code's fetch, the constants' or the data's.
set -u
source tools/device/env.sh >/dev/null 2>&1
export NCU_M=1 NCU_FMT=bf16
NCU_BEFORE=code timeout 200 python3 tools/device/ncu_k2_experts.py k2 2>&1 | tail -2  # (compiles, outside ncu)
for b in warm code; do
  echo "== NCU_BEFORE=$b"
  NCU_BEFORE=$b timeout 220 ncu --clock-control none --cache-control none --replay-mode application \
    -k regex:k2_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats -o "$OUT/ncu-$b" python3 tools/device/ncu_k2_experts.py k2 > "$OUT/ncu-$b.run.log" 2>&1
  tail -2 "$OUT/ncu-$b.run.log"
  ncu --import "$OUT/ncu-$b.ncu-rep" --page details --csv 2>/dev/null > "$OUT/ncu-$b-details.csv"
  grep -E "Duration|Stall|Warp Cycles Per|Issued Warp|No Eligible|Active Warps" "$OUT/ncu-$b-details.csv" | cut -d, -f12- | head -40
  ncu --import "$OUT/ncu-$b.ncu-rep" --page raw --csv 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin))
h, u, v = rows[0], rows[1], rows[2]
for i, n in enumerate(h):
    if ('issue_stalled' in n and (n.endswith('.pct') or n.endswith('.ratio'))) or n.startswith('gpu__time_duration'):
        print('NCURAW', n, v[i], u[i])
" | tee "$OUT/ncu-$b-raw.log"
  rm -f "$OUT/ncu-$b.ncu-rep"
done
