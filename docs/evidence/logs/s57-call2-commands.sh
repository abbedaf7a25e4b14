# s57 call 2 (on call 1's warm machine): K2 MXFP4 at 8 rows, warm / after torch's sum / after 110 KB of other
# code, the row the fifty-sixth session's call 1 ran out of time for (its cold ways compile ~130 s first).
# Carry [".whl", ".tcache.txz"]: call 1's (its header says how it is built); env.sh installs it (TCACHE lines), and
# the end lists what the machine compiled anyway.
set -u
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
( timeout 420 python3 -m sgl_k3_mono.k2.bench --formats mxfp4 --rows 8 --no-phases --l2-cold \
    --cold-ways l2_cold,after_code_110kb 2>&1 | grep -E "^K2BENCH|Error|Traceback" ) | tee "$OUT/k2-mxfp4-m8.log"
source tools/device/env.sh > /dev/null 2>&1; tcache_compiled
