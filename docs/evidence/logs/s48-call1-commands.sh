# s48 call 1: where LS's step time goes. LS v3 (s48-ls = main + the s47 patch's four commits) wins ~4 us a K1 in
# bench k1 but loses ~17 us a K1 in the 1-row step. bench step --kernels prints every kernel of one step replay
# (profiler, graph replays), ours beside LS; then LS with 6 stages (120 KB: one program an SM, where 80 KB lets two
# share one), then bench k1 A/B of both LS forms at layer 1.
set -u
source tools/device/env.sh >/dev/null 2>&1
cmds=()
for L in 0 1 2; do
  for v in "" "--linear-seam" "--linear-seam --stages 6"; do
    cmds+=("timeout 200 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1 --layer $L $v --warm-only")
  done
done
warm "$OUT/warm.log" "${cmds[@]}"
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
timeout 150 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam --kernels --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-ls-kernels.log"
timeout 150 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam --ls-stages 6 --kernels \
  --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-ls6-kernels.log"
for pass in 1 2; do
  for v in "" "--linear-seam" "--linear-seam --stages 6"; do
    echo "K1LS layer 1 pass $pass variant '$v'"
    timeout 60 python3 -m sgl_k3_mono.k1.bench --modes decode --rows 1 --layer 1 --no-phases $v 2>&1 \
      | grep -E "^ *[0-9]+ +(decode|verify)|Error|layer"
  done
done | tee "$OUT/k1-ls-ab.log"
