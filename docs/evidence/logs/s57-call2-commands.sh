# s57 call 2 (on call 1's warm machine): K2 MXFP4 at 8 rows, warm / after torch's sum / after 110 KB of other
# code, the row the fifty-sixth session's call 1 ran out of time for (its cold ways compile ~130 s first).
# Carry [".whl", ".tcache"]: .tcache is tools/device/tcache.py's build of the code kernels and these K2 builds
# (`code k2:bf16:1 k2:bf16:2 k2:bf16:4 k2:bf16:8 k2:mxfp4:8`, and in .ab-probe `k2:bf16:1` with WARM=4 / WARM=5 /
# trace), installed by env.sh; the end lists what the machine compiled anyway.
set -u
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
( timeout 420 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 8 --no-phases --l2-cold \
    --cold-ways l2_cold,after_code_110kb 2>&1 | grep -E "^K2BENCH|Error|Traceback" ) | tee "$OUT/k2-mxfp4-m8.log"
source tools/device/env.sh > /dev/null 2>&1; tcache_compiled
