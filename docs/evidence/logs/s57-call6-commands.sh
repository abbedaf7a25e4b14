# s57 call 6 (inline, as it ran): the bf16 step at 2, 4, 8 rows on this tree (SGLang's default MoE config).
# Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; ( timeout 430 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 2,4,8 2>&1 | tail -14 ) | tee "$OUT/step-bf16-2-8.log"; tcache_compiled
