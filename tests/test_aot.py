"""`sgl-k3-mono aot` on this CPU: one shipped FlyDSL kernel compiled into a FlyDSL disk
cache, then served from it run-only (FLYDSL_RUNTIME_RUN_ONLY=1 fails on a miss) with no
linker present (so nothing recompiled), and missed when the ROCm bitcode bytes differ
(part of FlyDSL's key: the GPU host's bitcode must be the one the cache was built with).
Loading the cache on an MI355X has never been done (docs/evidence/gfx950.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from sgl_k3_mono import aot
from sgl_k3_mono.compile_check_fly import shim_path

NAME = "fly-every-k1-decode-add-tp8-M1"

pytestmark = pytest.mark.skipif(shim_path() is None, reason="the gfx950 toolchain is not installed: "
                                "tools/setup_gfx950_toolchain.sh (CI runs it)")


def _lookup(rocm: str, cache: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sgl_k3_mono.aot", "--one", NAME], capture_output=True, text=True,
                          env=aot._env(rocm, cache, run_only=True), timeout=600)


def test_cache_is_served_run_only_and_keyed_on_the_bitcode(tmp_path):
    cache = str(tmp_path / "cache")
    assert aot.build(cache, only=NAME, jobs=1) == []
    assert any(f.endswith(".pkl") for _, _, fs in os.walk(cache) for f in fs)

    no_linker = tmp_path / "rocm-no-lld"
    shutil.copytree(shim_path(), no_linker, symlinks=True)
    os.remove(no_linker / "llvm" / "bin" / "ld.lld")
    hit = _lookup(str(no_linker), cache)
    assert hit.returncode == 0, hit.stderr[-1500:]

    other = tmp_path / "rocm-other-bitcode"
    shutil.copytree(shim_path(), other, symlinks=True)
    bc = next(p for p in sorted((other / "amdgcn" / "bitcode").iterdir()) if p.suffix == ".bc")
    data = bc.read_bytes()
    bc.unlink()  # replace a (possibly linked) file by a changed copy
    bc.write_bytes(data + b"\0")
    miss = _lookup(str(other), cache)
    assert miss.returncode != 0 and "RUN_ONLY" in (miss.stderr + miss.stdout), miss.stderr[-1500:]
