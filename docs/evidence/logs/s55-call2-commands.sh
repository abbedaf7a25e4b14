# s55 call 2 (prepared in s54): the bf16 builds from 2 rows changed in s54 (experts_up's never-run paths not built,
# 128 registers against 194; GPU cases M 4 / 8 passed) but were not timed. This tree against the old one, 2 / 4 / 8
# rows, warm, one after the other, then this tree again. Before the call, on this machine:
#   rm -rf .ab-old && mkdir .ab-old && git archive 95d7ea4 sgl_k3_mono configs | tar -x -C .ab-old
# and carry [".whl", ".ab-old"].
set -u
source tools/device/env.sh >/dev/null 2>&1
old=.ab-old
w="timeout 240 python3 -m sgl_k3_mono.k2.bench --rows 2,4,8 --formats bf16 --warm-only"
warm "$OUT/k2-warm.log" "$w --block ''" "cd $old && PYTHONPATH=/tmp/site:\$PWD $w --block ''"
k2t="python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 2,4,8 --no-phases --trace"
# (the first run also compiles SGLang's standard-path kernels, ~50 s on a fresh machine: a longer limit)
for run in new:220 old:120 new:120; do
  tree=${run%%:*}; d=.; [ $tree = old ] && d=$old
  echo "== K2 $tree"
  ( cd $d && PYTHONPATH=/tmp/site:$PWD timeout ${run#*:} $k2t 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|Error" )
done | tee "$OUT/k2-bf16-rows-ab.log"
