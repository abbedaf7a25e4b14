# s55 call 6: K2's new bf16 1-row default (BKS 128, STXD 6) against its one-key neighbours (over the default:
# experts_down's stages 4 / 5, its shared-down K step 64, experts_up's and latent_up's loops six stages),
# warm / after torch's sum / after 110 KB of other code. Compiles first, all at once.
set -u
source tools/device/env.sh >/dev/null 2>&1
blocks=("" STXD=4 STXD=5 BKS=64 STX=6 STU=6)
cmds=()
for b in "${blocks[@]}"; do
  cmds+=("timeout 200 python3 -m sgl_k3_mono.k2.bench --rows 1 --formats bf16 --warm-only --block '$b'")
done
warm "$OUT/k2-warm.log" "${cmds[@]}"
args=(); for b in "${blocks[@]}"; do args+=(--block "$b"); done
( timeout 260 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold \
    --cold-ways l2_cold,after_code_110kb "${args[@]}" 2>&1 | grep -E "^K2BENCH bf16|Error|Traceback" ) \
  | tee "$OUT/k2-bf16-neighbours.log"
