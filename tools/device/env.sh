# Sourced by tools/device/{tests,bench}.sh on the device machine (repository root, carry
# [".whl"]): SGLang's kit on the path (its kernels are the baselines and references), $OUT
# ready, and `t NAME TIMEOUT PYTEST-ARGS...` to run pytest into $OUT/NAME.log and print the
# lines that carry a verdict. Regenerate .whl with ../shared/device/make-sglang-kit.sh.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
# One Triton cache for every process: importing SGLang (the kit's baselines) points
# TRITON_CACHE_DIR at ~/.cache/sglang/triton unless it is set, so a `--warm-only` process
# (no SGLang) and the timed one that follows used two caches, and every timed row compiled
# again (20-37 s a row, fourteenth session: tools/device/cache_probe.py).
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
# (.tcache.txz, when carried: compiles done on the CPU for this call, tools/device/tcache.py; it installs
# them only if this Triton keys them as they were built)
if [ -f .tcache.txz ]; then
  python3 tools/device/tcache.py install .tcache.txz || echo "TCACHE install failed: the call compiles as before"
  [ -e /tmp/tcache-installed ] || touch /tmp/tcache-installed  # (tcache_compiled: what was built here after it)
fi
# tcache_compiled: the kernels this machine compiled after .tcache was installed (its misses), a count a name
tcache_compiled() {
  [ -e /tmp/tcache-installed ] || return 0
  echo "== TCACHE compiled here since the install:"
  find "$TRITON_CACHE_DIR" -name '*.cubin' -newer /tmp/tcache-installed -printf '%f\n' | sort | uniq -c
}
mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name --format=csv,noheader  # (the copy's git log is stale: record the commit here)
# (XDIST=N: N pytest workers, pytest-xdist from the .whl folder, so the tests compile their
# launches on the host's cores in parallel. Twelfth session: the K2 group's 39 tests all
# passed in 4.7 min with 8 workers, but the session never ended, so there was no summary and
# no printed figures (cause not found); the forward group's host-side reference then
# oversubscribed the cores. Serial, the default, is what the evidence rests on.)
t() {
  local name=$1 to=$2; shift 2
  local par=(-s -rf)  # a worker's prints reach the log only as its passed tests' captured output
  [ -n "${XDIST:-}" ] && par=(-n "$XDIST" -rfP)
  ( timeout "$to" python3 -m pytest -q -p no:cacheprovider --tb=short "${par[@]}" "$@" 2>&1 ) > "$OUT/$name.log"
  echo "== $name (rc $?)"
  grep -E "K1GPU|K2GPU|K2RING|K2OPT|K2SPASS|K2FLATD|SGMOE|K2AITER|STEPCMP|KSXCMP|K1 vs SGLang|passed|failed|FAILED|Error|rank [0-9]: exit|assert" "$OUT/$name.log" \
    | cut -c1-600 | tail -14
}
# warm LOG CMD...: every CMD (a string; compile-only runs: bench k1/k2 --warm-only) at once
# in the background, so a sweep's variants compile on the host's cores in parallel and the
# timed run after it finds them in Triton's cache (16 cores: ~1/16 of the compile time).
# (Each process draws its random layer under one lock, SGL_K3_MONO_WEIGHTS_LOCK: five drawing at
# once, 19 GB each, ran an H100 out of memory; built, a bf16 layer holds about 9 GB.)
warm() {
  local log=$1; shift
  local pids=() c
  for c in "$@"; do ( SGL_K3_MONO_WEIGHTS_LOCK=/tmp/k2-weights.lock eval "$c" ) >> "$log" 2>&1 & pids+=($!); done
  wait "${pids[@]}"
  echo "== warm: $# jobs, $(grep -c WARM "$log") variants compiled, $(grep -c Error "$log") errors ($(date -u +%T))"
}
