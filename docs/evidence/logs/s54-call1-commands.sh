# s54 call 1 (prepared in s53): experts_up's shorter K step (BKX 128: its code 68 -> 17 KB, its loss after other code
# 3.6 -> 1.2-1.5 us) through a deeper pipeline of its own (STX), the other loops left at 4 stages; then the same for
# experts_down's shared-down loop (BKS, STXD: 33 -> 20 KB) and latent_up (BKU, STU: 15 -> 9 KB). Numerics first (the
# GPU cases with them), then K2 warm / after the sum / after other code, traced, the bf16 1-row step in call 2
# (s54-call2-commands.sh).
set -u
source tools/device/env.sh >/dev/null 2>&1
t k2-stx 300 tests/launch/test_k2.py -k "gpu_real and STX"
W=l2_cold,after_code_110kb
# (the five blocks' launches, traced too, compiled at once first: env.sh `warm`)
cmds=()
for b in "" BKX=128,STX=6 BKX=128,STX=8 BKX=128,STX=6,BKS=128,STXD=6 BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6; do
  cmds+=("timeout 300 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --trace --block '$b' --warm-only")
done
warm "$OUT/k2-bf16-stx-warm.log" "${cmds[@]}"
timeout 360 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways $W \
  --block "" --block BKX=128,STX=6 --block BKX=128,STX=8 --block BKX=128,STX=6,BKS=128,STXD=6 \
  --block BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" | tee "$OUT/k2-bf16-stx.log"
