# s53 call 3: K2's blocks were all chosen warm (launch after launch), where its late phases' code stays cached; a
# served K2 runs after other code (call 2: 22 KB of it on one SM costs every program). Blocks that make less
# straight-line code, timed warm and after other code (after_code_110kb; l2_cold: torch's 256 MB sum), 1 row.
set -u
source tools/device/env.sh >/dev/null 2>&1
W=l2_cold,after_code_110kb
timeout 280 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1 --no-phases --l2-cold --cold-ways $W \
  --block "" --block BKX=256 --block BKX=128 --block STAGES=2 --block BKD=64 --block num_warps=4 2>&1 \
  | grep -E "^K2BENCH|^device|Error|Traceback" | tee "$OUT/k2-bf16-blocks-cold.log"
timeout 240 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 1 --no-phases --l2-cold --cold-ways $W \
  --block "" --block KUX=1 --block KSX=1 --block STAGES=2 --block XPD=0 2>&1 \
  | grep -E "^K2BENCH|Error|Traceback" | tee "$OUT/k2-mxfp4-blocks-cold.log"
