# s52 call 2 as it ran (inline, on the machine call 1 left warm; s52-call2-commands.sh was not run): call 1's MXFP4
# step died in K1's evict-first launch (an illegal instruction), so the step with K2's XEF / XEFD alone, and K1's
# "changes no bit" tests but the evict-first one (which call 1 ran: the same illegal instruction).
set -u; source tools/device/env.sh >/dev/null 2>&1
timeout 230 python3 -m sgl_k3_mono.cli bench step --fmt mxfp4 --rows 1 --kernels --k2-block XEF=1,XEFD=1 2>&1 | grep -E "^step bench|^ M |^ *[0-9]+ |^kernels|Error|Traceback|--kernels" | tee "$OUT/step-xef-mxfp4.log"
t k1-nobit 200 tests/launch/test_k1.py -k "no_bit and not evict_first"
