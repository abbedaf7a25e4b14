# s57 call 5 (inline, as it ran): K2 bf16 at 2, 4, 8 rows warm / after torch's sum / after 110 KB of other code.
# Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; ( timeout 300 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 2,4,8 --no-phases --l2-cold --cold-ways l2_cold,after_code_110kb 2>&1 | grep -E "^K2BENCH bf16 |^device|Error|Traceback" | cut -c1-330 ) | tee "$OUT/k2-bf16-rows-cold.log"; tcache_compiled
