# s55 call 3, its second part (run by s55-call3-commands.sh): the fifty-fourth session's probe
# (logs/s54-probe-k2-barrier-noinline.patch: K2's grid barrier a called function, not inlined at its eight phase
# ends; 10 KB less code in line at bf16 1 row, CPU) timed against this tree,
# bf16 1 row, warm / after torch's sum / after 110 KB of other code, traced; this tree, the probe, this tree again.
# Before the call, on this machine:
#   rm -rf .ab-probe && mkdir .ab-probe && git archive HEAD sgl_k3_mono configs | tar -x -C .ab-probe
#   (cd .ab-probe && patch -p1 < ../docs/evidence/logs/s54-probe-k2-barrier-noinline.patch)
# and carry [".whl", ".ab-probe"]. A probe: its numbers are checked by no test here; it is timed only.
set -u
source tools/device/env.sh >/dev/null 2>&1
probe=.ab-probe
w="timeout 200 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --trace --warm-only --block ''"
warm "$OUT/k2-warm.log" "$w" "cd $probe && PYTHONPATH=/tmp/site:\$PWD $w"
k2t="python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways l2_cold,after_code_110kb"
for run in tree:170 probe:120 tree:120; do
  t=${run%%:*}; d=.; [ $t = probe ] && d=$probe
  echo "== K2 $t"
  ( cd $d && PYTHONPATH=/tmp/site:$PWD timeout ${run#*:} $k2t 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback" )
done | tee "$OUT/k2-bf16-probe.log"
