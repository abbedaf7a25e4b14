# s55 call 2 (prepared in s54 as call 3): is it where K2's code sits, not when it runs, that decides what is lost after other
# code? At 1 row the phases that never pay (o_proj, seam, front) sit in the kernel's first 64 KB, the ones that do
# above it, bf16 and MXFP4 alike; K1's decode builds (61-64 KB) do not pay (tools/k2_code_by_phase.py, CPU).
# FLATD=0 moves the front's tail to 65-81 KB (bf16; MXFP4 64-80), FR=0 puts routing in a phase of its own at
# 52-75 KB: if the place decides, their fronts / the route phase pay after other code; if the order does, they do
# not. K1 verify at 8 rows (89 KB) should then pay too.
set -u
source tools/device/env.sh >/dev/null 2>&1
W=l2_cold,after_code_110kb
w="timeout 200 python3 -m sgl_k3_mono.k2.bench --rows 1 --trace --warm-only"
warm "$OUT/k2-warm.log" "$w --formats bf16 --block FLATD=0" "$w --formats bf16 --block FR=0" \
  "$w --formats mxfp4 --block FLATD=0" "$w --formats bf16 --block ''" "$w --formats mxfp4 --block ''"
for f in bf16 mxfp4; do
  ( timeout 170 python3 -m sgl_k3_mono.k2.bench --formats $f --rows 1 --no-phases --trace --l2-cold --cold-ways $W \
      --block "" --block FLATD=0 $([ $f = bf16 ] && echo --block FR=0) 2>&1 \
    | grep -E "^K2BENCH (bf16|mxfp4)|^K2TRACE|^K2WORK|Error|Traceback" ) | tee "$OUT/k2-$f-place.log"
done
( timeout 90 python3 -m sgl_k3_mono.k1.bench --rows 8 --modes decode,verify --no-phases --after-code 2>&1 \
  | grep -E "^ *[0-9]+ +(decode|verify)|Error|Traceback" ) | tee "$OUT/k1-after-code-8.log"
