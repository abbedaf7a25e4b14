"""The FlyDSL K1 variants of `sgl-k3-mono compile-check` (compile_check_fly.py lists
them): each built through k1/host.py's launch_args at a real TP-8 rank's shapes (12
heads x 128, H 7168) on CPU tensors, with the gfx950 plan's grid of 256, then traced and
compiled (COMPILE_ONLY: nothing launches)."""

from __future__ import annotations

from sgl_k3_mono.k1.flydsl.geometry import PHASES
from sgl_k3_mono.k1.flydsl.launch import GRID


def tp8_launch(mode: str, rows: int, *, grid: int = GRID, **kw):
    """(plan, views, io, scratch, args, meta) of one gfx950 K1 launch on CPU placeholders."""
    from sgl_k3_mono.k1.placeholders import tp8_placeholder_launch

    return tp8_placeholder_launch(mode, rows, isa="gfx950", hip=True, grid=grid, **kw)


def build(mode: str, rows: int, phases=PHASES, **kw) -> None:
    from sgl_k3_mono.k1.flydsl.launch import fly_arguments

    *_, args, meta = tp8_launch(mode, rows, **{"contribution": True, **kw})
    fly_arguments(args, meta, phases=phases).run()


def fly_variants(full: bool) -> list:
    """compile_check_fly.FlyVariant rows of the K1 launch, decode and verify:
    "persistent" (all three phases, both grid barriers, the stall switch at each phase)
    at rows 1 and 8 (--full: 1, 2, 4, 8), and each phase as its own launch (how the
    phased tests and the benchmark run it) at 8 rows (--full: 1 and 8). Every one must
    show the frame (timer, trap, the record's claim, depart); the persistent one the
    grid barrier's acquire polls; in_proj the MFMAs on 16-byte buffer loads, and no
    other phase an MFMA; kda the finisher's agent-scope acquire."""
    from sgl_k3_mono.compile_check_fly import BARRIER, FRAME, NO_MFMA, PROJECTION, FlyVariant

    finish = ((r"buffer_inv sc1", "the finishing item's agent-scope acquire of the other items' o"),)
    sets = (("persistent", PHASES, BARRIER + PROJECTION + finish, ()),
            ("seam", ("seam",), (), NO_MFMA),
            ("in_proj", ("in_proj",), PROJECTION, ()),
            ("kda", ("kda",), finish, NO_MFMA))
    out = []
    for label, phases, extra, forbid in sets:
        rows = ((1, 2, 4, 8) if full else (1, 8)) if label == "persistent" else ((1, 8) if full else (8,))
        for mode in ("decode", "verify"):
            for m in rows:
                out.append(FlyVariant(f"fly-k1-{label}-{mode}-tp8-M{m}", "k1_fly_kernel",
                                      lambda mode=mode, m=m, ph=phases: build(mode, m, ph), FRAME + extra, forbid))
    return out
