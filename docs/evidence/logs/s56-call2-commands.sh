# s56 call 2: the WARM probe (logs/s56-probe-k2-warm.patch on 611c8c2's tree, carried as .ab-probe): the
# programs the seam leaves idle (M x SP of 132 seam it) run experts_up's, experts_down's and latent_up's loops
# once, dry, while it runs (WARM=1: a third of them each phase; WARM=2: each all three). Is the code they fetch
# what K2 loses after other code? bf16, 1 row, a TP-8 rank. Compiles first (this tree's default, the probe's
# default, WARM=1, WARM=2) beside the probe's check (s56-probe-warm-check.py: each against the reference,
# bitwise against the probe's default); then the probe's three blocks warm / after torch's sum / after 110 KB of
# other code (traced), then this tree's default the same way. Carry [".whl", ".ab-probe"].
set -u
source tools/device/env.sh >/dev/null 2>&1
P=.ab-probe
( cd $P && PYTHONPATH=/tmp/site:$PWD timeout 270 python3 ../docs/evidence/logs/s56-probe-warm-check.py 2>&1 \
    | grep -E "WARMCHK|Error|Traceback|assert" ) > "$OUT/warm-check.log" 2>&1 &
pc=$!
w="timeout 270 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --warm-only"
warm "$OUT/warm.log" "$w --block ''" "cd $P && PYTHONPATH=/tmp/site:\$PWD $w --block ''" \
  "cd $P && PYTHONPATH=/tmp/site:\$PWD $w --block WARM=1" "cd $P && PYTHONPATH=/tmp/site:\$PWD $w --block WARM=2"
wait $pc; cat "$OUT/warm-check.log"
cw="--no-phases --l2-cold --cold-ways l2_cold,after_code_110kb"
( cd $P && PYTHONPATH=/tmp/site:$PWD timeout 190 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 $cw --trace \
    --block '' --block WARM=1 --block WARM=2 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|Error|Traceback" ) \
  | tee "$OUT/k2-warm-probe.log"
( timeout 100 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 $cw 2>&1 | grep -E "^K2BENCH bf16|Error|Traceback" ) \
  | tee "$OUT/k2-main.log"
