# s54 call 2 (run at cb76431, on the machine call 1 left warm): call 1's timing of this tree ran past its 130 s
# (SGLang's standard-path kernels compiling on a fresh machine), so the new default, experts_down's shorter-code
# shared loop, and the old tree's default (.ab-old: 95d7ea4's sgl_k3_mono and configs, carried) timed again,
# bf16 1 row, traced, warm / after torch's sum / after other code.
source tools/device/env.sh >/dev/null 2>&1; k2t="python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways l2_cold,after_code_110kb"; for b in "" "BKS=128,STXD=6"; do echo "== new '$b'"; timeout 90 $k2t --block "$b" 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback"; done | tee $OUT/k2-new.log; echo "== old"; (cd .ab-old && PYTHONPATH=/tmp/site:$PWD timeout 90 $k2t --block "" 2>&1 | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback") | tee $OUT/k2-old.log
