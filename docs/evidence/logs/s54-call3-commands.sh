# s54 call 3 (run at cb76431 as `timeout 90 <the first K2 line> | tee $OUT/k2-full.log; K2B=BKS=128,STXD=6 bash
# <this file's later lines>`, the file then named s54-call2-commands.sh): bench k2 bf16 1 row with all the
# shorter-code options (call 1 ran out of time before timing it); the bf16 1-row step on this tree (experts_up's unused paths not built: c87da6a) with K2's default and
# with call 1's best shorter-code block (K2B), then the old tree's step (.ab-old: 95d7ea4's, carried), one after
# the other on the same GPU; MXFP4 K2 (its builds are the old tree's) with latent_up's shorter K step (it pays 2 us
# after other code); K1 after 110 KB of other code (bench k1 --after-code, never run).
set -u
source tools/device/env.sh >/dev/null 2>&1
old=.ab-old
K2B=${K2B:-BKS=128,STXD=6}
timeout 90 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold --cold-ways \
  l2_cold,after_code_110kb --block BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6 2>&1 \
  | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback" | tee $OUT/k2-full.log
STD=$PWD/docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
st="python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD"
pat="^step bench|^ M |^ *[0-9]+ |^kernels.*k[12]_kernel|^kernels.*sum|Error|Traceback"
echo "== step new, K2B $K2B"; ( timeout 200 $st --k2-block "$K2B" 2>&1 | grep -E "$pat" ) | tee "$OUT/step-bf16-new.log"
echo "== step old"; ( cd $old && PYTHONPATH=/tmp/site:$PWD timeout 170 $st 2>&1 | grep -E "$pat" ) \
  | tee "$OUT/step-bf16-old.log"
( timeout 120 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --no-phases --trace --l2-cold \
    --cold-ways l2_cold,after_code_110kb --block "" --block BKU=128,STU=6 2>&1 \
  | grep -E "^K2BENCH|^K2TRACE|^K2WORK|Error|Traceback" ) | tee "$OUT/k2-mxfp4-bku.log"
( timeout 90 python3 -m sgl_k3_mono.k1.bench --rows 1,2 --modes decode --no-phases --after-code 2>&1 \
  | grep -E "^ *[0-9]+ +decode|^K1 at|Error|Traceback" ) | tee "$OUT/k1-after-code.log"
