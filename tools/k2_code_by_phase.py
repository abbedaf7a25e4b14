"""How much sm_90 machine code each K2 phase holds. Compiles K2 on the CPU (no GPU), disassembles
it with line info (`nvdisasm -gi`) and gives each instruction to the phase whose `if PERSISTENT or
PHASE == p` block in k2/triton/kernel.py it was inlined from (the outermost kernel.py line).

    python tools/k2_code_by_phase.py [bf16|mxfp4] [ROWS] [KEY=V,...]

(KEY=V: constexprs of the build overridden, e.g. STAGES=2: code size only, nothing derived again.)

Why: a served step's K2 fetches its code again (forty-ninth session: every K2 after a K1 or MLA runs
~12 us slower at 1 row, and the same launch run first on other weights gives it all back; fifty-third:
after other code, even on one SM, its last phases pay, each about as its code is long). The table
says which phases' code is long, to set against which phases slow after other code.
Instructions are 16 bytes; `lines` counts the distinct 128-byte lines a phase's code touches.
`out of line`: the phase's instructions after the kernel's last EXIT, ptxas's slow paths for the
shuffles of code it cannot prove warp-converged (WARPSYNC.COLLECTIVE ... ENDCOLLECTIVE), which a
converged warp never runs (54th session: 11.5 of experts_down's 33.5 KB at bf16 1 row). The
build has no called (noinline) functions; a body of one would also land after the last EXIT and
be counted here although it runs.
`at KB`: where the phase's in-line code sits, from the kernel's entry (the 5th to the 95th
percentile of its addresses). 54th session: at 1 row the phases that run no slower after other
code (o_proj, seam, front) sit in the first 64 KB, those that do above it. The 55th tested it
(FLATD=0 / FR=0 put front / routing code past 64 KB; they lost 0.3-0.6 us): not the place but
the order decides, the phases that run last pay. The 56th ran latent_up's code first on the programs the seam
leaves idle (probe WARM). latent_up then lost nothing after other code. But the cold fetch took longer than the
seam's wait, so the loss moved into the seam (docs/evidence/k2-sm90.md, 56th).
"""

from __future__ import annotations

import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = os.path.join(HERE, "..", "sgl_k3_mono", "k2", "triton", "kernel.py")


def phase_starts() -> list[tuple[int, str]]:
    """(first kernel.py line, phase name) for each phase block, in source order."""
    from sgl_k3_mono.k2.triton.frame import PHASES

    starts = [(0, "entry")]
    for no, line in enumerate(open(KERNEL), 1):
        m = re.search(r"if \(?PERSISTENT.*PHASE == (\d+):", line)
        if m:
            starts.append((no, PHASES[int(m.group(1))]))
    return starts


def by_phase(sass: str, starts: list[tuple[int, str]]) -> dict[str, list[int]]:
    """phase -> the addresses of its instructions."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    cur = "?"
    for line in sass.splitlines():
        m = re.match(r'\s*//## File ".*?k2/triton/kernel\.py", line (\d+)\s*$', line)  # outermost: no "inlined at"
        if m:
            no = int(m.group(1))
            cur = [name for first, name in starts if first <= no][-1]
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/", line)
        if m:
            out[cur].append(int(m.group(1), 16))
    return out


def last_exit(sass: str) -> int:
    """The address of the kernel's last EXIT: ptxas places its out-of-line slow paths after it."""
    return max(int(m.group(1), 16) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s*EXIT\b", sass))


def span_kb(addrs: list[int], end: int) -> tuple[float, float]:
    """(5th, 95th) percentile of the addresses up to `end` (in line), in KB from the entry."""
    a = sorted(x for x in addrs if x <= end)
    if not a:
        return (float("nan"), float("nan"))
    return (a[len(a) // 20] / 1024, a[(len(a) - 1) * 19 // 20] / 1024)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fmt = argv[0] if argv else "bf16"
    rows = int(argv[1]) if len(argv) > 1 else 1
    override = {k: int(v) for k, v in (kv.split("=") for kv in (argv[2] if len(argv) > 2 else "").split(",") if kv)}
    sys.path.insert(0, os.path.join(HERE, ".."))
    import triton

    from sgl_k3_mono import compile_check as cc

    cc._stub_driver("sm_90")
    kernel, args, meta = cc._k2_variant(fmt, "sm_90", rows, "sm_90")
    meta.setdefault("PHASE", -1)
    unknown = sorted(set(override) - set(meta))
    if unknown:
        raise SystemExit(f"k2_code_by_phase: {unknown} are none of the build's constexprs")
    meta.update(override)
    ck = kernel.warmup(*args, grid=(132,), **meta)
    sass = cc.nv_tool("nvdisasm", ck.asm["cubin"], "-gi", "-c")
    starts = phase_starts()
    phases = by_phase(sass, starts)
    total = sum(len(a) for a in phases.values())
    end = last_exit(sass)
    print(f"K2CODE {fmt} M={rows} {argv[2] if len(argv) > 2 else ''} sm_90 (Triton {triton.__version__}): {total} instructions, {total * 16 / 1024:.1f} KB")
    for name in [n for _, n in starts] + ["?"]:
        a = phases.get(name)
        if a:
            lo, hi = span_kb(a, end)
            print(f"K2CODE {name:13s} {len(a):6d} instr {len(a) * 16 / 1024:6.1f} KB "
                  f"{len({x // 128 for x in a}):5d} lines "
                  f"{sum(x > end for x in a) * 16 / 1024:6.1f} KB out of line, at {lo:5.1f}-{hi:5.1f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
