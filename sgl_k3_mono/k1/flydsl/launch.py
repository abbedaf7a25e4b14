"""The FlyDSL K1 launch, driven by the shared host side (k1/host.py): `fly_arguments`
takes exactly what host.launch_args packs for the Triton kernel (named by the Triton
kernel's own signature) plus its constexpr dict; only FlyDSL refusals happen here,
before anything is traced. No FlyDSL import at module level (see geometry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sgl_k3_mono.k1.flydsl.geometry import BIT, BUFFER_BYTES, PHASES, check_shapes

GRID = 256
"""One workgroup per MI355X CU, all co-resident (the plan's grid must say the same)."""

_TENSORS = ("prefix_ptr", "contrib_ptr", "bank_ptr", "resid_ptr", "wproj_ptr", "wsn_ptr", "won_ptr",
            "wq_ptr", "wf_ptr", "wb_ptr", "fb_ptr", "cw_ptr", "alog_ptr", "dtb_ptr", "onw_ptr", "slots_ptr",
            "conv_ptr", "ssm_ptr", "vconv_ptr", "vssm_ptr", "out_ptr", "h_ptr", "mix_ptr", "proj_ptr", "opre_ptr",
            "cnt_ptr", "sync_ptr")
_SCALARS = ("nvb", "pad_slot", "vindex", "M", "err_addr", "deadline_ns", "rank", "layer", "stall_phase")
_STRIDES = ("s_pm", "s_cm", "s_bm", "s_bj", "s_rm", "s_wq", "s_wf", "s_wb", "s_fb", "s_cw", "s_cs", "s_cr",
            "s_ss", "s_sh", "s_sv", "s_vcr", "s_vct", "s_vcw", "s_vsr", "s_vst", "s_vsh", "s_vsv", "s_om")
_CONSTS = ("H", "HL", "D", "KW", "BN_EFF", "NV", "BV", "VERIFY", "HAS_LB", "LB", "HAS_CONTRIB", "WRITE_BANK",
           "WRITE_RESID", "ROUND_MIX")
# Not read: the Triton-only tile choices (BLOCK_H, NBP, BN, BK, NUM_STAGES, SEAM_SPLIT,
# num_warps): they schedule the same arithmetic; the FlyDSL phases have their own map.
_BUFFERED = ("prefix_ptr", "contrib_ptr", "bank_ptr", "wproj_ptr", "wsn_ptr", "won_ptr", "wq_ptr", "wf_ptr",
             "wb_ptr", "fb_ptr", "h_ptr")


@dataclass(frozen=True)
class FlyK1Call:
    args: tuple
    consts: dict

    def run(self) -> None:
        from sgl_k3_mono.k1.flydsl.kernel import k1_fly_launch
        from sgl_k3_mono.k2.flydsl.launch import caller_stream

        k1_fly_launch(*self.args, **self.consts, **caller_stream(self.args[0]))


def _check(a: dict, meta: dict, grid: int) -> None:
    import torch

    from sgl_k3_mono.k1.triton.kernel import PHASES as TRITON_PHASES

    if tuple(TRITON_PHASES) != PHASES:
        raise RuntimeError(f"K1 FlyDSL phase numbering {PHASES} differs from the Triton kernel's {TRITON_PHASES}")
    check_shapes(meta["H"], meta["D"], a["bank_ptr"].shape[1], meta["BN_EFF"], meta["NV"], meta["BV"], a["M"])
    big = [n for n in _BUFFERED if a[n].numel() * a[n].element_size() >= BUFFER_BYTES]
    if big:
        raise ValueError(f"K1 FlyDSL: {big} exceed {BUFFER_BYTES} bytes, past a buffer descriptor's offsets")
    if a["slots_ptr"].dtype not in (torch.int32, torch.int64):
        raise ValueError(f"K1 FlyDSL: slots must be int32 or int64, got {a['slots_ptr'].dtype}")
    if a["cw_ptr"].stride(0) != meta["KW"]:
        raise ValueError("K1 FlyDSL: conv weight rows must be packed (stride KW)")
    if grid < 1:
        raise ValueError("K1 FlyDSL: grid must be >= 1")


def fly_arguments(args: tuple, meta: dict, *, phases: Sequence[str] = PHASES, grid: int = GRID) -> FlyK1Call:
    from sgl_k3_mono.k1.triton.kernel import k1_kernel

    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        raise ValueError(f"K1 FlyDSL: unknown phases {bad or list(phases)}; expected some of {PHASES}")
    names = [n for n in k1_kernel.arg_names if n not in meta and n not in ("PHASE", "SEAM_STEP", "HIP")]
    if len(names) != len(args):
        raise ValueError(f"K1 FlyDSL: {len(args)} launch arguments for {len(names)} names")
    a = dict(zip(names, args))
    _check(a, meta, grid)
    call = tuple(a[n] for n in _TENSORS) + tuple(int(a[n]) for n in _SCALARS)
    consts = dict(**{n: int(a[n]) for n in _STRIDES}, **{n: meta[n] for n in _CONSTS},
                  NB=int(a["bank_ptr"].shape[1]), EPS=float(a["eps"]),
                  PHASE_MASK=sum(BIT[p] for p in set(phases)), GRID=grid)
    consts["LB"] = float(consts["LB"])
    return FlyK1Call(call, consts)


def run_fly(args: tuple, meta: dict, *, phases, grid: int = GRID) -> None:
    """`phases`: Triton PHASE numbers as run_k1 builds them: (-1,) persistent, else each its own launch."""
    if tuple(phases) == (-1,):
        fly_arguments(args, meta, phases=PHASES, grid=grid).run()
        return
    for p in phases:
        fly_arguments(args, meta, phases=(PHASES[int(p)],), grid=grid).run()
