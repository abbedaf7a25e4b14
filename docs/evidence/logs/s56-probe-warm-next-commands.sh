# Prepared in the fifty-sixth session, NOT RUN: the WARM probe's next step (k2-sm90.md, fifty-sixth section).
# WARM=4 / 5 run the dry pass before o_proj, on the programs with neither an o_proj tile nor seam work (20 of 132 at
# 1 row: o_proj has 112 tiles, the seam 28 programs). They arrive at barrier 0 first (runtime/triton_sync.arrive:
# nothing they do waits on o_proj), so their window is o_proj's 9.3 us plus the seam's 8.4, where the seam's wait
# alone (WARM=1-3) was shorter than a cold fetch. WARM=4 warms latent_up and combine (as 3), WARM=5 all three late
# phases, a third of the programs each (as 1).
# Make the probe tree first (here, before the call): rm -rf .ab-probe && mkdir .ab-probe && git archive HEAD
# sgl_k3_mono configs | tar -x -C .ab-probe && patch -p1 -s -d .ab-probe < docs/evidence/logs/s56-probe-k2-warm.patch
# (the patch is on 611c8c2's sgl_k3_mono). Carry [".whl", ".ab-probe"]. About 8 minutes on a fresh machine.
set -u
source tools/device/env.sh >/dev/null 2>&1
P=.ab-probe
( cd $P && PYTHONPATH=/tmp/site:$PWD timeout 270 python3 ../docs/evidence/logs/s56-probe-warm-check.py WARM=4 WARM=5 2>&1 \
    | grep -E "WARMCHK|Error|Traceback|assert" ) > "$OUT/warm-check.log" 2>&1 &
pc=$!
w="cd $P && PYTHONPATH=/tmp/site:\$PWD timeout 270 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --warm-only"
warm "$OUT/warm.log" "$w --block ''" "$w --block WARM=4" "$w --block WARM=5" "$w --trace --block ''" "$w --trace --block WARM=4"
wait $pc; cat "$OUT/warm-check.log"
cw="--no-phases --l2-cold --cold-ways l2_cold,after_code_110kb"
# (the first timing on a fresh machine also compiles SGLang's standard kernels, ~115 s)
( cd $P && PYTHONPATH=/tmp/site:$PWD timeout 250 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 $cw \
    --block '' --block WARM=4 --block WARM=5 2>&1 | grep -E "^K2BENCH bf16|Error|Traceback" ) | tee "$OUT/k2-warm45.log"
( cd $P && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 $cw --trace \
    --block '' --block WARM=4 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|Error|Traceback" ) | tee "$OUT/k2-warm4-trace.log"
