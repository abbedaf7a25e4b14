"""The FlyDSL half of `sgl-k3-mono compile-check`: every FlyDSL launch variant compiled
for gfx950 on a machine with no GPU and no ROCm, and its ISA checked hard.

Each variant compiles in its own process (compile_check runs `--one`): an LLVM
instruction-selection failure aborts the process instead of raising. The child runs
with COMPILE_ONLY=1, ARCH / FLYDSL_GPU_ARCH = gfx950 (without them FlyDSL silently
targets gfx942), ROCM_PATH at the shim tools/setup_gfx950_toolchain.sh builds (zig's
ld.lld, the math bitcode) and an ISA dump directory, then calls the launch with the
arguments the shared host side packs, on CPU tensors of the real TP-8 shapes (FlyDSL
only reads their dtype, shape and strides).

Checks on the dumped ISA (FlyDSL 0.5.0 can swallow an LLVM error and emit an empty
kernel with exit code 0, so an empty body and any `error:` line are failures):
target gfx950; a real body; the instructions each variant must contain (MFMA in the
projection phases, dwordx4 buffer loads, the barrier's and the mailboxes' atomics with
their cache bits, the timer and the trap of the deadline path); no scratch, no spills;
VGPRs within one workgroup per CU; LDS <= 160 KB.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

ARCH = "gfx950"
LDS_LIMIT = 160 * 1024
MAX_VGPR = 512
"""One 4-wave workgroup per CU is one wave per SIMD: the SIMD's whole unified register
file (512 arch + accumulation VGPRs) is that wave's."""
MAX_ARCH_VGPR = 256
SHIM_ENV = "SGL_K3_MONO_ROCM_SHIM"

# what every launch's frame must show, whatever its phases
FRAME = (
    (r"s_memrealtime", "the deadline timer"),
    (r"s_trap 2", "the deliberate fault after an expired wait"),
    (r"global_atomic_cmpswap .* sc0 sc1", "system-scope claim of the pinned-host error record"),
    (r"global_atomic_add", "depart's counter (and the grid barrier's arrival)"),
    (r"buffer_wbl2 sc1", "agent-scope release before an arrival / the epoch"),
)
BARRIER = (
    (r"global_load_dword \S+, \S+, \S+( offset:\d+)? sc1", "agent-scope acquire polls of the grid barrier"),
    (r"buffer_inv sc1", "agent-scope acquire invalidate after a poll"),
    (r"s_barrier", "workgroup barriers around the grid barrier"),
)
MAILBOX = (
    (r"buffer_wbl2 sc0 sc1", "system-scope release before a peer-visible ready tag"),
    (r"global_atomic_swap v\[\d+:\d+\], v\d+, off( offset:\d+)? sc1", "the ready tag published at system scope"),
)
PROJECTION = (
    (r"v_mfma_f32_16x16x32_bf16", "the projection on the matrix cores"),
    (r"buffer_load_dwordx4", "16-byte buffer loads of the weight rows"),
)
FORBID = (
    (r"scratch_|buffer_store_dword \S+, off, s\[0:3\]", "scratch access"),
)


@dataclass(frozen=True)
class FlyVariant:
    """One FlyDSL launch variant: how to compile it and what its ISA must show."""

    name: str
    kernel: str
    """The kernel's symbol (its dump directory, without FlyDSL's _0 suffix)."""
    build: Callable[[], None]
    """Compiles the variant in this process (COMPILE_ONLY: nothing launches)."""
    require: tuple = field(default=())
    """(regex, why) pairs the ISA must match."""
    forbid: tuple = field(default=())
    """(regex, why) pairs the ISA must not match (beyond FORBID)."""


MXFP4 = (
    (r"v_cvt_scalef32_pk_bf16_fp4", "the MXFP4 experts decoded by gfx950's scaled fp4 convert"),
)
ROUTE = (
    (r"global_atomic_smin", "the owner of each expert by atomic min"),
    (r"ds_swizzle|ds_bpermute|v_mov_b32_dpp|_dpp", "the top-k argmax across lanes"),
)
ACQUIRE_SYS = (
    (r"global_load_dword \S+, \S+, off sc0 sc1", "system-scope acquire polls of the peers' ready tags"),
    (r"buffer_inv sc0 sc1", "system-scope acquire invalidate after a peer's tag"),
)
NO_MFMA = ((r"v_mfma", "a matrix-core instruction outside the projection phases"),)


def _k2_fly(rows: int, tp: int, phases: tuple, layout: str = "plain") -> None:
    from sgl_k3_mono.compile_check import _k2_variant
    from sgl_k3_mono.k2.flydsl.launch import fly_arguments

    _, args, meta = _k2_variant("mxfp4", "gfx950", rows, "gfx950", tp=tp, layout=layout)
    fly_arguments(args, meta, phases=phases).run()


def _all_phases() -> tuple:
    from sgl_k3_mono.k2.flydsl.launch import persistent_phases

    return persistent_phases(8)


# (variant label, phases, what the ISA must show beyond the frame, what it must not).
# Phases alone are how the tests and the benchmark launch them (TP 8: o_proj and
# combine publish after a barrier; seam and reduce alone read the peers unwaited, as
# Triton's phase launches); "persistent" is the whole layer, every wait included.
K2_SETS = (
    ("o_proj", ("o_proj",), BARRIER + MAILBOX + PROJECTION, ()),
    ("seam", ("seam",), (), NO_MFMA),
    ("front", ("front",), PROJECTION, ()),
    ("route", ("route",), ROUTE, NO_MFMA),
    ("experts_up", ("experts_up",), PROJECTION + MXFP4, ()),
    ("experts_down", ("experts_down",), PROJECTION + MXFP4, ()),
    ("combine", ("combine",), BARRIER + MAILBOX, NO_MFMA),
    ("reduce", ("reduce",), (), NO_MFMA),
    ("latent_up", ("latent_up",), PROJECTION, ()),
    ("persistent", None, BARRIER + MAILBOX + ACQUIRE_SYS + PROJECTION + MXFP4 + ROUTE, ()),
)


def variants(full: bool) -> list[FlyVariant]:
    rows = (1, 2, 4, 8) if full else (1, 8)
    k2 = [FlyVariant(f"fly-k2-{label}-tp8-M{m}", "k2_fly_kernel",
                     lambda m=m, ph=phases: _k2_fly(m, 8, ph or _all_phases()), FRAME + extra, forbid)
          for label, phases, extra, forbid in K2_SETS for m in rows]
    # the experts as SGLang's AITER post-load leaves them (the default on gfx950): the two
    # phases that read them, and the whole layer
    from sgl_k3_mono.compile_check import AITER_LAYOUTS

    k2 += [FlyVariant(f"fly-k2-{label}-tp8-{lay}-M{m}", "k2_fly_kernel",
                      lambda m=m, ph=phases, lay=lay: _k2_fly(m, 8, ph or _all_phases(), lay), FRAME + extra, forbid)
           for label, phases, extra, forbid in K2_SETS if label in ("experts_up", "experts_down", "persistent")
           for lay in AITER_LAYOUTS for m in rows[:1]]
    return k2 + _k1_variants(full)


def _k1_variants(full: bool) -> list[FlyVariant]:
    """The FlyDSL K1 (k1/flydsl/variants.py): the persistent launch and each phase alone,
    decode and verify."""
    from sgl_k3_mono.k1.flydsl.variants import fly_variants

    return fly_variants(full)


def shim_path() -> Optional[str]:
    """The ROCM_PATH shim: $SGL_K3_MONO_ROCM_SHIM, else where the setup script puts it."""
    path = os.environ.get(SHIM_ENV) or os.path.join(sys.prefix, "share", "sgl-k3-mono", "rocm-shim")
    return path if os.path.isfile(os.path.join(path, "llvm", "bin", "ld.lld")) else None


def child_env(dump_dir: str) -> dict:
    """The child's environment; KeyError-free: a missing shim is reported by `check`."""
    return {**os.environ, "ROCM_PATH": shim_path() or "", "ARCH": ARCH, "FLYDSL_GPU_ARCH": ARCH,
            "COMPILE_ONLY": "1", "FLYDSL_DEBUG_DUMP_ASM": "1", "FLYDSL_DUMP_DIR": dump_dir,
            "FLYDSL_RUNTIME_ENABLE_CACHE": "0"}


META = ("vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count",
        "group_segment_fixed_size", "private_segment_fixed_size")


@dataclass(frozen=True)
class IsaFacts:
    """What the dumped ISA of one kernel says about itself."""

    target: Optional[str]
    meta: dict
    body: str
    instructions: int

    @classmethod
    def parse(cls, text: str, kernel: str) -> "IsaFacts":
        meta = {k: int(m[1]) for k in META if (m := re.search(rf"^\s*(?:- )?\.{k}:\s+(\d+)", text, re.M))}
        target = (re.search(r'\.amdgcn_target "([^"]+)"', text) or [None, None])[1]
        m = re.search(rf"^{re.escape(kernel)}(_\d+)?:\n(.*?)^\.Lfunc_end", text, re.M | re.S)
        body = m[2] if m else ""
        n = sum(1 for ln in body.splitlines()
                if ln.strip() and not ln.strip().startswith((".", ";")) and not ln.rstrip().endswith(":"))
        return cls(target, meta, body, n)


def judge(v: FlyVariant, facts: IsaFacts, output: str) -> list[str]:
    """Every problem of one compiled variant (empty: it passes)."""
    probs = []
    errs = sorted(set(re.findall(r"^.*\berror: .*$", output, re.M)))
    if errs:
        probs.append("compiler diagnostics: " + " | ".join(errs)[:600])
    if not (facts.target or "").endswith(ARCH):
        probs.append(f"target is {facts.target!r}, not {ARCH}")
    if facts.instructions < 100:
        probs.append(f"kernel body has {facts.instructions} instructions: code was dropped")
    for rx, why in v.require:
        if not re.search(rx, facts.body, re.M):
            probs.append(f"missing /{rx}/ ({why})")
    for rx, why in FORBID + v.forbid:
        if re.search(rx, facts.body, re.M):
            probs.append(f"found /{rx}/ ({why})")
    md = facts.meta
    missing = [k for k in META if k not in md]
    if missing:
        probs.append(f"ISA metadata lacks {missing}")
        return probs
    if md["private_segment_fixed_size"]:
        probs.append(f"scratch {md['private_segment_fixed_size']} B")
    if md["vgpr_spill_count"] or md["sgpr_spill_count"]:
        probs.append(f"spills: vgpr {md['vgpr_spill_count']}, sgpr {md['sgpr_spill_count']}")
    if md["vgpr_count"] > MAX_VGPR or md["vgpr_count"] - md["agpr_count"] > MAX_ARCH_VGPR:
        probs.append(f"VGPRs {md['vgpr_count']} (AGPRs {md['agpr_count']}) over one workgroup per CU")
    if md["group_segment_fixed_size"] > LDS_LIMIT:
        probs.append(f"LDS {md['group_segment_fixed_size']} B over {LDS_LIMIT} B")
    return probs


def compile_and_judge(name: str, dump_dir: str, full_table: list[FlyVariant]):
    """The child's work: compile `name` here, find its ISA, return (facts, problems)."""
    import contextlib
    import io

    v = next(x for x in full_table if x.name == name)
    if shim_path() is None:
        return None, [f"no ROCm shim (ld.lld) at ${SHIM_ENV} or {sys.prefix}/share/sgl-k3-mono/rocm-shim: "
                      "run tools/setup_gfx950_toolchain.sh"]
    if os.environ.get("COMPILE_ONLY") != "1" or os.environ.get("ARCH") != ARCH:
        return None, ["the child must run with COMPILE_ONLY=1 and ARCH=gfx950 (set before FlyDSL loads)"]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        v.build()
    paths = [os.path.join(r, f) for r, _, fs in os.walk(dump_dir) for f in fs if f.endswith("final_isa.s")
             and re.fullmatch(rf"{re.escape(v.kernel)}(_\d+)?", os.path.basename(r))]
    if len(paths) != 1:
        return None, [f"expected one ISA dump of {v.kernel}, found {len(paths)} under {dump_dir}"]
    with open(paths[0]) as f:
        facts = IsaFacts.parse(f.read(), v.kernel)
    return facts, judge(v, facts, captured.getvalue())
