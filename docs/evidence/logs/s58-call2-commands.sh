# s58 call 2 (call 1 again, after its out-of-memory fix 0d7f4f1; no machine came for it: for the next session): `bench step --full` (Kimi-K3's 93 layers at a TP-8 rank's widths; the MoE layers' routed experts
# one shared store), bf16, rows 1 and 8 first, then 2 and 4; the compiles brought back for later calls.
# Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
nvidia-smi --query-gpu=memory.used --format=csv,noheader -l 5 > "$OUT/mem.log" 2>&1 &
( timeout 520 python3 -m sgl_k3_mono.cli bench step --full --fmt bf16 --rows 1,8,2,4 2>&1 \
  | grep -v "Config file not found" ) | tee "$OUT/step-full-bf16.log"
sort -n "$OUT/mem.log" | tail -1
tcache_compiled | tail -30
python3 tools/device/tcache.py harvest "$OUT/tc-harvest.txz"
