"""Which device code runs the launches on this ISA, shared by K1's and K2's host sides.

- sm_90: Triton (the only implementation there).
- gfx950: FlyDSL by default; Triton when SGL_K3_MONO_GFX950_IMPL=triton asks for it
  (the Triton launches also compile for gfx950; see docs/evidence/gfx950.md for what
  each build costs in registers).

Choosing FlyDSL needs a working FlyDSL of the pinned version. A missing, unimportable
or other-version FlyDSL is a refusal at startup (`selection_reasons`, called from
config_reasons), never a silent switch to Triton: the user asked for one device code
and gets that one or a reason. Pure Python until `flydsl_problem` runs its probe.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

IMPL_ENV = "SGL_K3_MONO_GFX950_IMPL"
"""Environment switch for gfx950: "flydsl" (default) or "triton"."""
FLYDSL_PACKAGE = "flydsl"
FLYDSL_VERSION = "0.5.0"
"""The FlyDSL the gfx950 launches are compile-checked with. Pinned exactly: its env-var
names, its silent drop of unsupported math and its cache key change between versions.
Keep equal to FLYDSL_PIN in tools/setup_gfx950_toolchain.sh."""

_IMPLS = {"sm_90": ("triton",), "gfx950": ("flydsl", "triton")}
_DEFAULT = {"sm_90": "triton", "gfx950": "flydsl"}


@dataclass(frozen=True)
class KernelChoice:
    """The device code one process's launches run, and why."""

    isa: str
    impl: str
    """"triton" or "flydsl"."""
    why: str
    """One line for logs and `check`: default, or the env var that chose it."""


def choose(isa: str, env: Optional[Mapping[str, str]] = None) -> KernelChoice:
    """The implementation for `isa`. ValueError for an ISA without launches or an env
    value that names no implementation of this ISA (fail closed: no guessing)."""
    env = os.environ if env is None else env
    if isa not in _IMPLS:
        raise ValueError(f"no launches for ISA {isa!r} (have {sorted(_IMPLS)})")
    asked = env.get(IMPL_ENV, "").strip().lower()
    if isa != "gfx950" or not asked:
        return KernelChoice(isa, _DEFAULT[isa], "default for " + isa)
    if asked not in _IMPLS[isa]:
        raise ValueError(f"{IMPL_ENV}={asked!r}: accepted on {isa} are {list(_IMPLS[isa])}")
    return KernelChoice(isa, asked, f"{IMPL_ENV}={asked}")


def _installed_version() -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(FLYDSL_PACKAGE)
    except PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _import_probe() -> Optional[str]:
    """Import FlyDSL's compiler in a child process: its native libraries can abort the
    process (not an exception), and that must not take the server down with it."""
    code = "import flydsl.compiler, flydsl.expr"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"import failed ({tail[:200]})"
    return None


CONFLICTING_MLIR = {"cutlass._mlir": "NVIDIA's CuTe DSL (nvidia-cutlass-dsl)"}
"""Python packages with their own MLIR nanobind bindings: once one is loaded, importing
FlyDSL's aborts the process ("refusing to add duplicate key ... to enumeration"), seen
on this project's CPU machine after SGLang's argument resolution had loaded the CuTe DSL."""


def _conflict() -> Optional[str]:
    """A loaded module that makes importing FlyDSL into this process abort, if any. Only
    asked in a ROCm process (the server that would import FlyDSL); `check` asking about
    gfx950 from another machine is not that process."""
    import sys

    if not _rocm_process():
        return None
    for prefix, what in CONFLICTING_MLIR.items():
        if any(name == prefix or name.startswith(prefix + ".") for name in sys.modules):
            return (f"this process has loaded {what} ({prefix}), whose MLIR bindings make importing "
                    f"FlyDSL's abort the process")
    return None


def _rocm_process() -> bool:
    torch = __import__("sys").modules.get("torch")
    return torch is not None and getattr(torch.version, "hip", None) is not None


def flydsl_problem() -> Optional[str]:
    """None if the pinned FlyDSL is installed, imports, and can load into this process;
    else what is wrong, one line."""
    got = _installed_version()
    if got is None:
        return f"package {FLYDSL_PACKAGE} is not installed"
    if got != FLYDSL_VERSION:
        return f"{FLYDSL_PACKAGE}=={got} is installed"
    broken = _import_probe()
    if broken is not None:
        return f"{FLYDSL_PACKAGE}=={got} is broken: {broken}"
    return _conflict()


def selection_reasons(isa: Optional[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
    """Refusals of the device-code choice on `isa` (none on an ISA without launches:
    SGLang's own device check refuses those)."""
    if isa not in _IMPLS:
        return []
    try:
        choice = choose(isa, env)
    except ValueError as e:
        return [str(e)]
    if choice.impl != "flydsl":
        return []
    problem = flydsl_problem()
    if problem is None:
        return []
    return [f"FlyDSL launches on {isa} ({choice.why}) need {FLYDSL_PACKAGE}=={FLYDSL_VERSION}, but {problem}: "
            f"pip install {FLYDSL_PACKAGE}=={FLYDSL_VERSION}, or set {IMPL_ENV}=triton"]
