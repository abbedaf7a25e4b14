# s57 call 7 (inline, as it ran): the bf16 step at 1 row on this tree. Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; ( timeout 300 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 2>&1 | tail -4 ) | tee "$OUT/step-bf16-1.log"
