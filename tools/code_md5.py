"""Is a change to the device code's Python a change to the code? Compiles K1's and K2's Triton
builds from one source tree on the CPU (no GPU) and prints an md5 of each build's machine
code: sm_90 SASS (cuobjdump, no line info), or the gfx950 code section (labels and
instructions, without comments and debug sections, which name source lines). Two trees
that print the same lines run the same code; the GPU results of one stand for the other.

    git archive REV sgl_k3_mono configs | tar -x -C /tmp/old
    python tools/code_md5.py /tmp/old sm_90 > old.txt
    python tools/code_md5.py . sm_90 > new.txt && diff old.txt new.txt

The local Triton (CI's, 3.8) is not the H200's (3.6): equal md5s here say the two trees
compile alike, not which SASS the device compiles.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys


def builds(cc, target: str) -> dict:
    """name -> (a thunk giving (kernel, args, meta), constexpr overrides)."""
    b = {f"k2-mxfp4-M{m}": (lambda m=m: cc._k2_variant("mxfp4", "sm_90", m, target), {}) for m in (1, 2, 8)}
    b["k2-mxfp4-tp8-M1"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 1, target, tp=8), {})
    b["k2-mxfp4-tp2-M4"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 4, target, tp=2), {})
    b["k2-bf16-M4"] = (lambda: cc._k2_variant("bf16", "sm_90", 4, target), {})
    b["k2-bf16-M1"] = (lambda: cc._k2_variant("bf16", "sm_90", 1, target), {})
    if target == "sm_90":  # the probes and the phased launch (the benchmark's and the tests')
        b["k2-mxfp4-M1-trace"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 1, target), {"TRACE": True})
        b["k2-mxfp4-M8-trace-spass2"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 8, target),
                                         {"TRACE": True, "SPASS": 2})
        b["k2-mxfp4-M4-phase5"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 4, target), {"PHASE": 5})
        b["k2-mxfp4-M2-phase1-step1"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 2, target),
                                         {"PHASE": 1, "SEAM_STEP": 1})
        b["k2-mxfp4-M2-seam-rows"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 2, target), {"SEAM_SPLIT": False})
        b["k2-mxfp4-tp2-M3-seam-rows"] = (lambda: cc._k2_variant("mxfp4", "sm_90", 3, target, tp=2),
                                          {"SEAM_SPLIT": False})
    for mode in ("decode", "verify"):
        for m in (1, 8):
            b[f"k1-{mode}-M{m}"] = (lambda mode=mode, m=m: cc._k1_variant(mode, m, target), {})
    if target == "sm_90" and "tiles" in cc._k1_variant.__code__.co_varnames:  # K1Plan.g_last (a tree that has it)
        for m in (1, 8):
            b[f"k1-decode-M{m}-g-last"] = (lambda m=m: cc._k1_variant("decode", m, target, tiles=dict(g_last=True)), {})
    return b


def machine_code(ck, target: str) -> str:
    if target == "sm_90":
        from sgl_k3_mono.compile_check import cuobjdump

        return cuobjdump(ck.asm["cubin"], "-sass")
    body = ck.asm["amdgcn"].split("\t.section\t.debug")[0]
    return "\n".join(line.split(";")[0].rstrip() for line in body.splitlines()
                     if re.match(r"^\t[a-z][a-z_0-9.]*(\s|$)", line) or re.match(r"^\.?L?BB\w*:|^\w+:", line))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[1] not in ("sm_90", "gfx950"):
        print(__doc__)
        return 2
    tree, target = os.path.abspath(argv[0]), argv[1]
    sys.path.insert(0, tree)
    from sgl_k3_mono import compile_check as cc

    if not cc.__file__.startswith(tree):
        raise SystemExit(f"imported {cc.__file__}, not the tree {tree}")
    cc._stub_driver(target)
    for name, (build, extra) in builds(cc, target).items():
        kernel, args, meta = build()
        meta = dict(meta, HIP=target == "gfx950")
        meta.setdefault("PHASE", -1)
        meta.update(extra)
        ck = kernel.warmup(*args, grid=(132,), **meta)
        code = machine_code(ck, target)
        print(name, hashlib.md5(code.encode()).hexdigest(), len(code.splitlines()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
