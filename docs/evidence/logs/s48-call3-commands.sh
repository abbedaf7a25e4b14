# s48 call 3: call 2's --ab-buffers timed ours, later in the same process, as slow as LS (1065-1073 us against its
# first timing's 1007-1009): the LS loss was the order of the timings. Is it the GPU's clocks after sustained load?
# nvidia-smi samples clocks, power and throttle reasons every 200 ms beside bench step --ab-buffers, whose second
# round idles 5 s before each timing.
set -u
source tools/device/env.sh >/dev/null 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
STD=docs/evidence/logs/s37-call2-sglang-moe-k3-tuned-h100.json
date -u +%T
timeout 300 python3 -m sgl_k3_mono.cli bench step --fmt bf16 --rows 1 --k1-linear-seam --ab-buffers --ab-idle 5 \
  --std-config $STD 2>&1 \
  | grep -E "^step bench|^ M |^ *[0-9]+ |^ab-buffers|Error|Traceback" | tee "$OUT/step-ab-idle.log"
date -u +%T
kill $smi
awk -F', ' 'NR>1 {print $2, $4, $6}' "$OUT/smi.csv" | sort | uniq -c | sort -rn | head -20
