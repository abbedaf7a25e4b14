# s57 call 8 (inline, as it ran): K2 MXFP4 at 8 rows traced, warm / after torch's sum / after other code.
# Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; ( timeout 150 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 8 --no-phases --trace --l2-cold --cold-ways l2_cold,after_code_110kb 2>&1 | grep -E "^K2BENCH mxfp4 |^K2TRACE|Error|Traceback" | cut -c1-300 ) | tee "$OUT/k2-mxfp4-m8-trace.log"
