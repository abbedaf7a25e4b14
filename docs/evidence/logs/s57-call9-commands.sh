# s57 call 9 (a fresh machine): does the rebuilt .tcache.txz (86 entries: call 1's plus `sgseam:1..8`, and SGLang's
# kernels built with their sm_90 launch options) cover bench k2's bf16 standard path too? K2 bf16 at 1 and 8 rows
# with the standard column, then what the machine compiled anyway. Carry [".whl", ".tcache.txz"]; the archive is
# built by s57-call1-commands.sh's header commands with `sgseam:1 sgseam:2 sgseam:4 sgseam:8` added after k2:mxfp4:8.
set -u
source tools/device/env.sh > /tmp/env.log 2>&1; grep TCACHE /tmp/env.log
( timeout 200 python3 -m sgl_k3_mono.k2.bench --formats bf16 --rows 1,8 --no-phases 2>&1 \
    | grep -E "^K2BENCH bf16 |Error|Traceback" | cut -c1-250 ) | tee "$OUT/k2-bf16-std.log"
tcache_compiled
