# s55 call 5: the bf16 1-row step with K2's new default (BKS 128, STXD 6) against the
# old tree's (.ab-old: 95d7ea4's), one after the other on the same GPU. Carry [".whl", ".ab-old"].
set -u
source tools/device/env.sh >/dev/null 2>&1
old=.ab-old
STD=$PWD/docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
st="python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --kernels --std-config $STD"
pat="^step bench|^ M |^ *[0-9]+ |^kernels.*k[12]_kernel|^kernels.*sum|Error|Traceback"
echo "== step new"; ( timeout 220 $st 2>&1 | grep -E "$pat" ) | tee "$OUT/step-bf16-new.log"
echo "== step old"; ( cd $old && PYTHONPATH=/tmp/site:$PWD timeout 170 $st 2>&1 | grep -E "$pat" ) \
  | tee "$OUT/step-bf16-old.log"
