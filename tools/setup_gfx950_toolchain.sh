#!/usr/bin/env bash
# The gfx950 compile toolchain for a machine with no GPU and no ROCm, installed into an
# existing virtualenv (the one that holds this project):
#   - flydsl (pinned: the env-var names, the silent tanh drop and the cache key are
#     version specific, see docs/evidence/gfx950.md), and ziglang, whose LLD links
#     the gfx950 code objects;
#   - <venv>/share/sgl-k3-mono/rocm-shim: a ROCM_PATH with llvm/bin/ld.lld (zig's LLD)
#     and amdgcn/bitcode/{ocml,ockl}.bc (from Triton's AMD backend), which is all the
#     FlyDSL ROCDL serializer needs from ROCm. compile_check finds it there.
# Usage: tools/setup_gfx950_toolchain.sh [VENV]   (default: the active venv, else .venv)
set -euo pipefail
FLYDSL_PIN="${FLYDSL_PIN:-0.5.0}"   # keep equal to sgl_k3_mono.kernels.FLYDSL_VERSION
ZIGLANG_PIN="${ZIGLANG_PIN:-0.17.1}"
VENV="$(realpath -m "${1:-${VIRTUAL_ENV:-.venv}}")"
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "setup_gfx950_toolchain: no python at $PY" >&2; exit 2; }

"$PY" -m pip install -q --no-cache-dir "flydsl==$FLYDSL_PIN" "ziglang==$ZIGLANG_PIN"

SHIM="$VENV/share/sgl-k3-mono/rocm-shim"
mkdir -p "$SHIM/llvm/bin" "$SHIM/amdgcn/bitcode"
# MLIR's ROCDL serializer runs $ROCM_PATH/llvm/bin/ld.lld -shared x.o -o x.hsaco.
cat > "$SHIM/llvm/bin/ld.lld" <<EOS
#!/bin/sh
exec "$PY" -m ziglang ld.lld "\$@"
EOS
chmod +x "$SHIM/llvm/bin/ld.lld"
# Only kernels that call __ocml_* need these; FlyDSL also hashes them into its disk-cache
# key, so a cache meant for a real MI355X needs that machine's /opt/rocm/amdgcn/bitcode.
AMDLIB="$("$PY" -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends", "amd", "lib"))')"
cp "$AMDLIB/ocml.bc" "$AMDLIB/ockl.bc" "$SHIM/amdgcn/bitcode/"

"$SHIM/llvm/bin/ld.lld" --version
"$PY" - <<EOS
from importlib.metadata import version
import flydsl.compiler, flydsl.expr  # noqa: F401  (an import that fails is a broken install)
assert version("flydsl") == "$FLYDSL_PIN", version("flydsl")
print("flydsl", version("flydsl"), "ok; ROCM_PATH shim:", "$SHIM")
EOS
