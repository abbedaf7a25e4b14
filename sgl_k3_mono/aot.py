"""`sgl-k3-mono aot`: the FlyDSL launches of a TP-8 Kimi-K3 deployment on gfx950, compiled
on a CPU machine into a FlyDSL disk cache that the GPU job then only loads.

Every FlyDSL kernel of the shipped set (compile_every.fly_groups: K1 decode and verify,
every layer kind, K2, widths 1..8) is compiled in its own process with
FLYDSL_RUNTIME_CACHE_DIR set, then looked up again with FLYDSL_RUNTIME_RUN_ONLY=1, which
fails on a miss: so every entry written is one FlyDSL will serve from the cache.

On the MI355X, point FLYDSL_RUNTIME_CACHE_DIR at the copied directory before SGLang
starts; FLYDSL_RUNTIME_RUN_ONLY=1 there makes a missing entry an error at the build's
warm-up (startup) instead of a compile. FlyDSL's key covers its own build, the target,
the traced kernel (the plugin's source, constants and tensor shapes, strides and dtypes)
and the bytes of $ROCM_PATH/amdgcn/bitcode: build with `--rocm-bitcode` pointing at a
copy of the GPU host's `/opt/rocm/amdgcn/bitcode` (the default is the CPU toolchain's,
copied from Triton's wheel), and install the same flydsl==0.5.0 and plugin version.
The kernels are traced on the shapes the build's warm-up passes (plugin-owned buffers,
SGLang's weights as loaded, int32 slot indices); a served tensor of another dtype or
shape is another key: it misses, and compiles at warm-up unless RUN_ONLY forbids it.
Nothing here has been loaded on an MI355X (docs/evidence/gfx950.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Optional


def _shim_with(bitcode: Optional[str], work: str) -> str:
    """ROCM_PATH for the compiles: the toolchain's shim, or a copy of it whose
    amdgcn/bitcode holds `bitcode`'s files (the cache key hashes those bytes)."""
    from sgl_k3_mono.compile_check_fly import shim_path

    shim = shim_path()
    if shim is None:
        raise SystemExit("sgl-k3-mono aot: no gfx950 toolchain; run tools/setup_gfx950_toolchain.sh")
    if bitcode is None:
        return shim
    own = os.path.join(work, "rocm")
    shutil.copytree(shim, own, symlinks=True)
    dst = os.path.join(own, "amdgcn", "bitcode")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(bitcode, dst)
    return own


def _env(rocm: str, cache: str, run_only: bool) -> dict:
    from sgl_k3_mono.compile_check_fly import ARCH

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_DUMP") and k != "FLYDSL_DEBUG_DUMP_ASM"}
    env.update(ROCM_PATH=rocm, ARCH=ARCH, FLYDSL_GPU_ARCH=ARCH, COMPILE_ONLY="1", FLYDSL_RUNTIME_CACHE_DIR=cache,
               FLYDSL_RUNTIME_ENABLE_CACHE="1")
    if run_only:
        env["FLYDSL_RUNTIME_RUN_ONLY"] = "1"
    return env


def _child(name: str) -> int:
    """Build one variant in this process (the parent set the environment)."""
    from sgl_k3_mono.compile_every import fly_members

    variant = next(v for v, _ in fly_members()[0] if v.name == name)
    variant.build()
    return 0


def build(cache: str, *, bitcode: Optional[str] = None, only: str = "", jobs: int = 1) -> list[tuple[str, str]]:
    """Compile then look up every shipped FlyDSL kernel; [(name, problem)] of the failures."""
    from sgl_k3_mono.compile_check import _in_parallel
    from sgl_k3_mono.compile_every import fly_groups

    os.makedirs(cache, exist_ok=True)
    groups, refused = fly_groups()
    for line in refused:
        print(f"refused {line}", flush=True)
    names = [v.name for v, _ in groups if v.name.startswith(only)]
    with tempfile.TemporaryDirectory(prefix="sgl-k3-mono-aot-") as work:
        rocm = _shim_with(bitcode, work)

        def one(name: str) -> tuple[str, str]:
            for run_only in (False, True):
                done = subprocess.run([sys.executable, "-m", "sgl_k3_mono.aot", "--one", name], capture_output=True,
                                      text=True, env=_env(rocm, cache, run_only), timeout=1200)
                if done.returncode != 0:
                    step = "the run-only lookup (the entry is not usable)" if run_only else "the compile"
                    return name, f"{step} failed (rc {done.returncode}): {done.stderr.strip()[-600:]}"
            return name, ""

        failures = []
        for name, problem in _in_parallel(one, names, jobs):
            print(f"{'FAIL' if problem else 'ok  '} {name}" + (f"\n       - {problem}" if problem else ""),
                  flush=True)
            if problem:
                failures.append((name, problem))
    entries = sum(len(fs) for _, _, fs in os.walk(cache))
    print(f"{len(names) - len(failures)} cached and found again run-only, {len(failures)} failed; "
          f"{entries} files in {cache}")
    return failures


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="sgl-k3-mono aot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", help="where the FlyDSL disk cache is written (FLYDSL_RUNTIME_CACHE_DIR on the GPU)")
    ap.add_argument("--rocm-bitcode", help="a copy of the GPU host's /opt/rocm/amdgcn/bitcode (part of the key)")
    ap.add_argument("--only", default="", help="variant name prefix (fly-every-...)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        return _child(a.one)
    if not a.cache_dir:
        ap.error("--cache-dir is required")
    return 1 if build(a.cache_dir, bitcode=a.rocm_bitcode, only=a.only, jobs=a.jobs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
