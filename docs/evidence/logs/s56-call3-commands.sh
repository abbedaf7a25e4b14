# s56 call 3 (inline, on call 2's warm machine; carry [".whl", ".ab-probe"]): call 2's traced probe timing printed
# nothing (its 190 s ran out, most likely compiling the traced builds and SGLang's standard kernels), so the probe's
# three blocks untraced, warm / after torch's sum / after 110 KB of other code.
source tools/device/env.sh >/dev/null 2>&1; cd .ab-probe && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold --cold-ways l2_cold,after_code_110kb --block '' --block WARM=1 --block WARM=2 > $OUT/k2-warm-probe-b.log 2>&1; echo rc $?; grep -E "^K2BENCH bf16|Error|error|Traceback" $OUT/k2-warm-probe-b.log | cut -c1-500; tail -5 $OUT/k2-warm-probe-b.log | cut -c1-500
