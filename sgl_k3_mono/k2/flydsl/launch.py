"""The FlyDSL K2 launch, driven by the shared host side.

`fly_arguments` takes exactly what `K2Launch.launch_args` packs for the Triton kernel
(the positional tuple, named by the Triton kernel's own signature, and the constexpr
dict), so there is one argument builder for both device codes; only the selection of
what the written FlyDSL phases read happens here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

FLY_PHASES = ("o_proj", "front", "latent_up")
"""K2 phases written in FlyDSL so far (k2/triton/kernel.py PHASES has all of them)."""
GRID = 256
"""One workgroup per MI355X CU (isa.PROFILES["gfx950"].resident_blocks)."""
_BIT = {"o_proj": 1, "front": 2, "latent_up": 4}  # = kernel.O_PROJ, FRONT, LATENT_UP


@dataclass(frozen=True)
class FlyK2Call:
    """The FlyDSL launch's arguments for one layer, in k2_fly_launch's order."""

    args: tuple
    consts: dict

    def run(self) -> None:
        from sgl_k3_mono.k2.flydsl.kernel import k2_fly_launch

        k2_fly_launch(*self.args, **self.consts)


def missing_phases() -> tuple[str, ...]:
    from sgl_k3_mono.k2.triton.kernel import PHASES

    return tuple(p for p in PHASES if p not in FLY_PHASES)


def fly_arguments(args: tuple, meta: dict, *, phases: Sequence[str] = ("o_proj",), grid: int = GRID) -> FlyK2Call:
    """Map K2Launch.launch_args' output onto the FlyDSL launch running `phases` (no copy,
    no new tensor: every tensor is one launch_args packed)."""
    from sgl_k3_mono.k2.flydsl.geometry import check_k
    from sgl_k3_mono.k2.triton.kernel import PHASES, k2_kernel

    bad = [p for p in phases if p not in FLY_PHASES]
    if bad or not phases:
        raise NotImplementedError(f"K2 on FlyDSL: phases {bad or list(phases)} are not written in FlyDSL yet")
    a = dict(zip(k2_kernel.arg_names, args))
    if len(a) != len(args):
        raise ValueError(f"K2 FlyDSL: {len(args)} launch arguments for {len(k2_kernel.arg_names)} names")
    H, A, S2, E, L, TP = (meta[k] for k in ("H", "A", "S2", "E", "L", "TP"))
    if H % 16 or S2 % 16 or E % 16 or L % 16:
        raise ValueError(f"K2 FlyDSL: H={H}, 2S={S2}, E={E}, L={L} must be multiples of 16")
    check_k(A, "o_proj")
    check_k(H, "front")
    check_k(L, "latent_up")
    red2 = a["red_ptr"] if TP > 1 else a["part2_ptr"]  # [latent | shared], reduced over the ranks
    call = (a["attn_ptr"], a["wo_ptr"], a["part1_ptr"], a["h2_ptr"], a["wgu_ptr"], a["wr_ptr"], a["wdn_ptr"],
            a["gu_ptr"], a["logit_ptr"], a["xin_ptr"], red2, a["lnorm_ptr"], a["wup_ptr"], a["p_ptr"],
            a["out_ptr"], a["flag_ptr"], a["sync_ptr"],
            a["M"], a["s_wo"], a["s_wgu"], a["s_wr"], a["s_wdn"], a["s_wup"], a["SLOT1"], a["err_addr"],
            a["deadline_ns"], a["rank"], a["layer"], a["stall_phase"])
    mask = sum(_BIT[p] for p in set(phases))
    consts = dict(H=H, A=A, S2=S2, E=E, L=L, TP=TP, EPS=float(meta["EPS"]), FRONT_BF16=bool(meta["FRONT_BF16"]),
                  PHASE_MASK=mask, ID_O_PROJ=PHASES.index("o_proj"), ID_FRONT=PHASES.index("front"),
                  ID_LATENT_UP=PHASES.index("latent_up"), GRID=grid)
    return FlyK2Call(call, consts)


def run_fly(args: tuple, meta: dict, *, phase=None, grid: int = GRID) -> None:
    """K2Launch.__call__ on FlyDSL. A persistent launch (phase None) or every phase
    ("all") needs every phase in FlyDSL: until then it is refused, loudly, rather than
    mixed with Triton phases inside one step."""
    from sgl_k3_mono.k2.triton.kernel import PHASES

    if phase is None or phase == "all":
        missing = missing_phases()
        if missing:
            raise NotImplementedError(f"K2 on FlyDSL: phases {list(missing)} are not written in FlyDSL yet; "
                                      f"set SGL_K3_MONO_GFX950_IMPL=triton for the Triton K2 on gfx950")
        fly_arguments(args, meta, phases=FLY_PHASES, grid=grid).run()
        return
    name = phase if isinstance(phase, str) else PHASES[int(phase)]
    fly_arguments(args, meta, phases=(name,), grid=grid).run()
