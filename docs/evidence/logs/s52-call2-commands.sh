# s52 call 2 (after s51-call1-commands.sh, the L2 probe and the MXFP4 step with evict-first): the GPU tests of the
# evict-first code, never run: K1's three "changes no bit" tests (l2_evict_first, l2_next, carveout) since the
# fifty-first session put them on one helper, and K2's options test with its XEF / XEFD rows (each must be bitwise
# the plain launch).
set -u
source tools/device/env.sh >/dev/null 2>&1
t k1-nobit 200 tests/launch/test_k1.py -k no_bit
t k2-opts 340 tests/launch/test_k2.py -k options_against
