"""The FlyDSL K1 variants of `sgl-k3-mono compile-check` (compile_check_fly.py lists
them): each built through k1/host.py's launch_args at a real TP-8 rank's shapes (12
heads x 128, H 7168) on CPU tensors, with the gfx950 plan's grid of 256, then traced and
compiled (COMPILE_ONLY: nothing launches)."""

from __future__ import annotations

from sgl_k3_mono.k1.flydsl.geometry import PHASES
from sgl_k3_mono.k1.flydsl.launch import GRID


def tp8_launch(mode: str, rows: int, *, write: bool = False, contribution: bool = False, pad_slot=None,
               slots: int = 64, grid: int = GRID, slot_dtype=None):
    """(plan, views, io, scratch, args, meta) of one K1 launch on CPU placeholder tensors."""
    import torch

    from sgl_k3_mono.configs import load_config
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.k1.host import K1IO, K1Plan, K1Scratch, K1Views, hip_tiles, launch_args
    from sgl_k3_mono.reference.attn_res import SeamWeights

    d = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    H, h, D, K = d.hidden, d.kda_heads_local, d.kda_head_dim, d.conv_width
    P = h * D
    bf = dict(dtype=torch.bfloat16)
    bfa = torch.empty(D + h + 4, H, **bf)
    views = K1Views(qkvg=torch.empty(4 * P, H, **bf), f_a=bfa[:D], b=bfa[D:D + h], f_b=torch.empty(P, D, **bf),
                    conv=torch.empty(3 * P, K), a_log=torch.empty(h), dt_bias=torch.empty(P),
                    o_norm=torch.empty(D, **bf), seam=SeamWeights(torch.empty(1, H, **bf), torch.empty(H, **bf),
                                                                  torch.empty(H, **bf)),
                    heads=h, head_dim=D, lower_bound=d.gate_lower_bound)
    plan = K1Plan.from_dims(d, rows, mode, isa="gfx950", grid=grid, **hip_tiles(True))
    verify = mode == "verify"
    io = K1IO(prefix=torch.empty(rows, H, **bf), bank=torch.empty(rows, 8, H, **bf), nvb=4, write=write,
              slots=torch.empty(1 if verify else rows, dtype=slot_dtype or torch.int32),
              conv_pool=torch.empty(slots, K - 1, 3 * P, **bf), ssm_pool=torch.empty(slots, h, D, D),
              out=torch.empty(rows, P, **bf), residual=None if write else torch.empty(rows, H, **bf),
              contribution=torch.empty(rows, H, **bf) if contribution else None,
              verify_conv=torch.empty(4, rows, K - 1, 3 * P, **bf) if verify else None,
              verify_ssm=torch.empty(4, rows, h, D, D) if verify else None, verify_index=1 if verify else 0,
              pad_slot=pad_slot)
    scratch = K1Scratch.allocate(plan, "cpu")
    args, meta = launch_args(plan, views, io, scratch, layer=1, deadline_s=60.0)
    return plan, views, io, scratch, args, meta


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
