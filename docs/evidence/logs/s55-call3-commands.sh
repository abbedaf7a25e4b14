# s55 call 3: call 1's timing of BKS=128,STXD=6 ran out of its limit (its first timed row compiled SGLang's
# standard kernels), so the block against the default again; then s55-call3-probe-commands.sh (the
# barrier-noinline probe against this tree).
set -u
source tools/device/env.sh >/dev/null 2>&1
( timeout 150 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --trace --l2-cold \
    --cold-ways l2_cold,after_code_110kb --block "" --block BKS=128,STXD=6 --block "" 2>&1 \
  | grep -E "^K2BENCH bf16|^K2TRACE|^K2WORK|Error|Traceback" ) > "$OUT/k2-bf16-bks.log"
grep -E "^K2BENCH bf16 +M" "$OUT/k2-bf16-bks.log"
bash docs/evidence/logs/s55-call3-probe-commands.sh
