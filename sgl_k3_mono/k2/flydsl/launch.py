"""The FlyDSL K2 launch, driven by the shared host side.

`fly_arguments` takes exactly what `K2Launch.launch_args` packs for the Triton kernel
(the positional tuple, named by the Triton kernel's own signature, and the constexpr
dict), so there is one argument builder for both device codes; only the selection and
the FlyDSL-specific refusals (shapes its tiles need, what a buffer descriptor can
address, MXFP4 experts) happen here, before anything is traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sgl_k3_mono.k2.flydsl.geometry import BIT, PHASES

FLY_PHASES = PHASES
"""K2 phases written in FlyDSL: all of k2/triton/kernel.py's."""
GRID = 256
"""One workgroup per MI355X CU (isa.PROFILES["gfx950"].resident_blocks)."""
BUFFER_BYTES = 1 << 31
"""A buffer descriptor's byte offsets are 32-bit (signed offsets in the index math)."""

# what the FlyDSL kernel takes, by the Triton kernel's parameter names, in its order
_TENSORS = ("attn_ptr", "bank_ptr", "prefix_ptr", "wo_ptr", "proj_ptr", "rnorm_ptr", "onorm_ptr",
            "wgu_ptr", "wr_ptr", "wdn_ptr", "bias_ptr", "w13_ptr", "sc13_ptr", "w2_ptr", "sc2_ptr",
            "wsd_ptr", "lnorm_ptr", "wup_ptr", "part1_ptr", "p_ptr", "h2_ptr", "gu_ptr", "logit_ptr", "xin_ptr",
            "ids_ptr", "wts_ptr", "owner_ptr", "act_ptr", "y_ptr", "part2_ptr", "out_ptr",
            "peer1_ptr", "peer2_ptr", "flag_ptr", "red_ptr", "sync_ptr")
_SCALARS = ("M", "nvb", "has_prefix", "err_addr", "deadline_ns", "rank", "layer", "stall_phase")
_STRIDES = {"s_wo": "s_wo", "s_wgu": "s_wgu", "s_wr": "s_wr", "s_wdn": "s_wdn", "s13_e": "s13_e", "s13_n": "s13_n",
            "ssc13_e": "ssc13_e", "ssc13_n": "ssc13_n", "s2_e": "s2_e", "s2_n": "s2_n", "ssc2_e": "ssc2_e",
            "ssc2_n": "ssc2_n", "s_wsd": "s_wsd", "s_wup": "s_wup", "slot1": "SLOT1", "slot2": "SLOT2"}
"""Row strides and slot sizes: fixed by the model's weights and the plan, so compiled in
as constants (kernel name -> launch_args name); the scalar registers stay for the frame."""
_BUFFERED = ("attn_ptr", "bank_ptr", "prefix_ptr", "wo_ptr", "proj_ptr", "rnorm_ptr", "onorm_ptr", "wgu_ptr",
             "wr_ptr", "wdn_ptr", "bias_ptr", "w13_ptr", "sc13_ptr", "w2_ptr", "sc2_ptr", "wsd_ptr", "lnorm_ptr",
             "wup_ptr", "part1_ptr", "h2_ptr", "gu_ptr", "logit_ptr", "xin_ptr", "act_ptr", "part2_ptr", "red_ptr")
"""Tensors read through buffer descriptors: each must fit 2 GiB of byte offsets."""


@dataclass(frozen=True)
class FlyK2Call:
    """The FlyDSL launch's arguments for one layer, in k2_fly_launch's order."""

    args: tuple
    consts: dict

    def run(self) -> None:
        from sgl_k3_mono.k2.flydsl.kernel import k2_fly_launch

        k2_fly_launch(*self.args, **self.consts, **caller_stream(self.args[0]))

    def compile(self) -> None:
        """Compile this launch into FlyDSL's cache without running it (its JIT function's
        compile-only entry, flydsl 0.5.0: a later call traces again and finds the binary):
        the TP warm-up's first pass, so no rank's first launch waits on a peer still
        compiling."""
        from sgl_k3_mono.k2.flydsl.kernel import k2_fly_launch

        k2_fly_launch._compile_only(*self.args, **self.consts, **caller_stream(self.args[0]))


def caller_stream(t) -> dict:
    """The caller's current stream for a GPU launch (FlyDSL's default is the null stream,
    which a CUDA/HIP graph capture does not record); nothing for the CPU placeholders of
    the compile check. Shared by K1's FlyDSL launch."""
    import torch

    if not t.is_cuda:
        return {}
    import flydsl.expr as fx

    return {"stream": fx.Stream(torch.cuda.current_stream(t.device))}


def missing_phases() -> tuple[str, ...]:
    from sgl_k3_mono.k2.triton.frame import PHASES as TRITON_PHASES

    return tuple(p for p in TRITON_PHASES if p not in FLY_PHASES)


def check_plan(plan) -> None:
    """What the FlyDSL K2 refuses, decided from the plan alone (K2Launch.build calls it, so
    a bare build refuses at startup; tensor sizes and strides are checked at the call)."""
    if not plan.mxfp4:
        raise NotImplementedError("K2 FlyDSL reads MXFP4 routed experts only (bf16 experts: the Triton K2, "
                                  "SGL_K3_MONO_GFX950_IMPL=triton)")
    from sgl_k3_mono.k2.flydsl.geometry import check_shapes

    check_shapes(plan.hidden, plan.attn_width, plan.shared2, plan.experts, plan.latent, plan.inter, plan.rows,
                 plan.top_k, plan.bank_rows)
    # the experts are read through buffer descriptors (32-bit offsets): one rank's MXFP4
    # w13 / w2 must stay under 2 GiB, which Kimi-K3 meets at TP 8 only (w13 1.23 GB)
    w13 = plan.experts * 2 * plan.inter_up * plan.latent // 2
    w2 = plan.experts * plan.latent * plan.inter // 2
    big = [f"{n} {b / 2**30:.2f} GiB" for n, b in (("w13", w13), ("w2", w2)) if b >= BUFFER_BYTES]
    if big:
        raise ValueError(f"K2 FlyDSL: this rank's routed experts ({', '.join(big)}) exceed a buffer descriptor's "
                         "2 GiB of offsets (Kimi-K3 fits at TP 8); SGL_K3_MONO_GFX950_IMPL=triton serves this TP")


def _check(a: dict, meta: dict) -> None:
    from sgl_k3_mono.k2.flydsl.geometry import check_shapes
    from sgl_k3_mono.k2.triton.frame import PHASES as TRITON_PHASES

    if tuple(TRITON_PHASES) != PHASES:  # the stall switch and the error record name phases by number
        raise RuntimeError(f"K2 FlyDSL phase numbering {PHASES} differs from the Triton kernel's {TRITON_PHASES}")
    if not meta["MXFP4"]:
        raise NotImplementedError("K2 FlyDSL reads MXFP4 routed experts only (bf16 experts: the Triton K2)")
    check_shapes(meta["H"], meta["A"], meta["S2"], meta["E"], meta["L"], meta["I"], a["M"], meta["TOPK"],
                 a["NB"])
    if a["NB"] > 15:
        raise ValueError(f"K2 FlyDSL: bank of {a['NB']} rows (at most 15)")
    big = [n for n in _BUFFERED if a[n].numel() * a[n].element_size() >= BUFFER_BYTES]
    if big:
        raise ValueError(f"K2 FlyDSL: {big} exceed {BUFFER_BYTES} bytes, past a buffer descriptor's offsets")
    odd = [n for n in ("ssc13_e", "ssc13_n", "ssc2_e", "ssc2_n") if a[n] % 4]
    if odd and not meta["XL"]:  # the plain layout's lane groups read their 4 scales as one aligned dword
        raise ValueError(f"K2 FlyDSL: MXFP4 scale strides {[(n, a[n]) for n in odd]} must be multiples of 4")


def fly_arguments(args: tuple, meta: dict, *, phases: Sequence[str] = ("o_proj",), grid: int = GRID) -> FlyK2Call:
    """Map K2Launch.launch_args' output onto the FlyDSL launch running `phases` (no copy,
    no new tensor: every tensor is one launch_args packed)."""
    from sgl_k3_mono.k2.triton.kernel import k2_kernel

    bad = [p for p in phases if p not in FLY_PHASES]
    if bad or not phases:
        raise NotImplementedError(f"K2 on FlyDSL: phases {bad or list(phases)} are not written in FlyDSL")
    a = dict(zip(k2_kernel.arg_names, args))
    if len(a) != len(args):
        raise ValueError(f"K2 FlyDSL: {len(args)} launch arguments for {len(k2_kernel.arg_names)} names")
    _check(a, meta)
    call = tuple(a[n] for n in _TENSORS) + tuple(a[n] for n in _SCALARS)
    consts = dict(H=meta["H"], A=meta["A"], S2=meta["S2"], E=meta["E"], L=meta["L"], I=meta["I"],
                  I_UP=meta["I_UP"], TOPK=meta["TOPK"], NB=a["NB"], TP=meta["TP"], EPS=float(meta["EPS"]),
                  BETA=float(meta["BETA"]), LBETA=float(meta["LBETA"]), FRONT_BF16=bool(meta["FRONT_BF16"]),
                  MIX_BF16=bool(meta["MIX_BF16"]), PHASE_MASK=sum(BIT[p] for p in set(phases)), XL=int(meta["XL"]),
                  GRID=grid,
                  **{k: int(a[n]) for k, n in _STRIDES.items()})
    return FlyK2Call(call, consts)


def persistent_phases(tp: int) -> tuple[str, ...]:
    """The persistent launch's phases: all of them, reduce only at TP > 1 (as Triton's)."""
    return tuple(p for p in PHASES if tp > 1 or p != "reduce")


def compile_fly(args: tuple, meta: dict, *, grid: int = GRID) -> None:
    """K2Launch.compile on FlyDSL: the persistent launch compiled, not run."""
    fly_arguments(args, meta, phases=persistent_phases(meta["TP"]), grid=grid).compile()


def run_fly(args: tuple, meta: dict, *, phase=None, grid: int = GRID) -> None:
    """K2Launch.__call__ on FlyDSL: persistent (phase None), every phase as its own
    launch in order ("all"), or one phase (a name or its number)."""
    if phase is None:
        fly_arguments(args, meta, phases=persistent_phases(meta["TP"]), grid=grid).run()
    elif phase == "all":
        for name in PHASES:
            fly_arguments(args, meta, phases=(name,), grid=grid).run()
    else:
        name = phase if isinstance(phase, str) else PHASES[int(phase)]
        fly_arguments(args, meta, phases=(name,), grid=grid).run()
