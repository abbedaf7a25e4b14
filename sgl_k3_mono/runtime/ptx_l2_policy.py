"""L2's evict-first policy on the `cp.async` copies Triton pipelines (sm_90 PTX).

A served step's K2 fetches its code from HBM again after a K1 has streamed ~90 MB of
in-projection weights through L2 (k2-sm90.md, forty-ninth section: ~12 us a launch). Those
weights are read once a step; carrying L2's evict-first policy they would be L2's first
victims and leave the other launch's code in place. Triton emits `cp.async` for the loads it
pipelines and drops `eviction_policy` from them (Triton 3.8 here), so a kernel that wants
the policy says so with `mark()` (a PTX comment), and the PTX stage, wrapped by `install()`
through Triton's `knobs.runtime.add_stages_inspection_hook`, rewrites that kernel's copies:

    cp.async.cg.shared.global [d], [s], 16, n;
 -> cp.async.cg.shared.global.L2::cache_hint [d], [s], 16, n, %sgl_ef;

with `%sgl_ef` made once at the entry by `createpolicy.fractional.L2::evict_first`. The
same bytes land in the same place: only L2's replacement order changes. A kernel without
the mark compiles as before (its cache key takes this hook's version, nothing else).
"""

from __future__ import annotations

import re

import triton
import triton.language as tl

MARK = "// sgl-k3-mono: cp.async L2::evict_first"
"""The comment a kernel's PTX carries to have its copies rewritten."""
VERSION = "sgl-k3-mono-ptx-l2-policy-1"
"""Added to every kernel's cache key while the hook is installed (a rewrite's change must
not find the old cubin)."""
POLICY_REG = "%sgl_ef"

_MARK_ASM = tl.constexpr("mov.u32 $0, 0; " + MARK)
_COPY = re.compile(r"cp\.async\.(cg|ca)\.shared(::cta)?\.global((?:\.L2::(?:64|128|256)B)?)"
                   r"\s+(\[[^\]]*\]\s*,\s*\[[^\]]*\]\s*,[^;]*);")


@triton.jit
def mark():
    """Put the mark in this kernel's PTX (call it once, anywhere it runs)."""
    tl.inline_asm_elementwise(_MARK_ASM, "=r", [], dtype=tl.int32, is_pure=False, pack=1)


def rewrite(ptx: str) -> str:
    """The marked kernel's PTX with every `cp.async` copy under L2's evict-first policy
    (unmarked PTX returned as it is). Refuses PTX it cannot rewrite whole: copies outside
    the one `.entry` (a `.func` does not see the entry's policy register), copies that
    already carry a cache hint, or no copy at all."""
    if MARK not in ptx:
        return ptx
    if re.search(r"^\s*\.(visible\s+)?\.?func\b", ptx, re.M):
        raise ValueError("ptx_l2_policy: the marked kernel has a .func; its copies would not see the policy")
    if ".L2::cache_hint" in ptx:
        raise ValueError("ptx_l2_policy: the marked kernel already carries L2 cache hints")
    entry = re.search(r"\.entry\s+\w+\s*\([^)]*\)[^{]*\{", ptx, re.S)
    if entry is None:
        raise ValueError("ptx_l2_policy: no .entry body in the marked kernel's PTX")
    body, n = _COPY.subn(lambda m: f"cp.async.{m.group(1)}.shared{m.group(2) or ''}.global.L2::cache_hint"
                                   f"{m.group(3)} {m.group(4)}, {POLICY_REG};", ptx[entry.end():])
    if n == 0:
        raise ValueError("ptx_l2_policy: the marked kernel has no cp.async copy to rewrite")
    head = (f"\n\t.reg .b64 \t{POLICY_REG};\n"
            f"\tcreatepolicy.fractional.L2::evict_first.b64 \t{POLICY_REG}, 1.0;")
    return ptx[:entry.end()] + head + body


_installed = False


def install() -> None:
    """Wrap Triton's PTX stage with `rewrite` (idempotent; any hook set before is kept and
    runs first). Process-wide: every kernel compiled after it hashes VERSION into its cache
    key, and only marked ones change."""
    global _installed
    if _installed:
        return
    from triton import knobs

    if not hasattr(knobs.runtime, "add_stages_inspection_hook"):  # a marked kernel would compile unrewritten
        raise RuntimeError(f"ptx_l2_policy: Triton {triton.__version__} has no knobs.runtime."
                           "add_stages_inspection_hook; the L2 evict-first policy cannot be applied")
    prev = knobs.runtime.add_stages_inspection_hook

    def hook(*args):
        if not args:  # the cache key's part
            if prev is None:
                return VERSION, VERSION
            key, digest = prev()
            return key + VERSION, digest + VERSION
        if prev is not None:
            prev(*args)
        stages = args[1]
        ptx_stage = stages.get("ptx")
        if ptx_stage is not None:
            stages["ptx"] = lambda src, metadata: rewrite(ptx_stage(src, metadata))

    knobs.runtime.add_stages_inspection_hook = hook
    _installed = True
