# s57 call 4 (inline, as it ran): bring back the Triton cache entries this machine compiled after .tcache's install
# (its misses), to compare their keys and IR with the CPU build's. Carry [".whl", ".tcache.txz"].
source tools/device/env.sh > /tmp/env.log 2>&1; cd "$TRITON_CACHE_DIR" && d=$(find . -newer /tmp/tcache-installed \( -name '*.cubin' -o -name '*.so' \) -printf '%h\n' | sort -u); echo "$d"; tar -czf "$OUT/tc-misses.tgz" $d; ls -la "$OUT"; python3 -c "import triton, os; print(triton.__file__)"; env | grep -i '^TRITON'
