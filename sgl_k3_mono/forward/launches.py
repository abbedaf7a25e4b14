"""The two launches as a step calls them, with the implementation switch.

K1 already has `run_k1(..., impl=...)`; K2's host side has only the Triton launch, so
its reference is wired here (sgl_k3_mono/k2/ is left as it is): the K2 oracle reads
unsharded weights and emulates TP, so it can stand in for one rank only at TP 1, and
says so otherwise (fail closed: never a silent substitute).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch

from sgl_k3_mono.k1.host import K1IO, K1Views, run_k1
from sgl_k3_mono.k2.reference import K2RankWeights, K2Weights, k2_reference
from sgl_k3_mono.forward.plan import StepBuffers, StepPlan
from sgl_k3_mono.reference.moe import MoeWeights


def device_impl() -> str:
    """The device code this process's launches run (sgl_k3_mono.kernels decides: FlyDSL on
    gfx950 unless SGL_K3_MONO_GFX950_IMPL=triton, Triton on sm_90); K2Launch.build asks
    the same question, so K1 and K2 of one step never disagree."""
    from sgl_k3_mono.kernels import choose

    return choose("gfx950" if torch.version.hip is not None else "sm_90").impl


def k1(plan: StepPlan, bufs: StepBuffers, views: K1Views, io: K1IO, *, layer: int, deadline_s: float) -> None:
    """K1 for one KDA layer (outputs written in place)."""
    if plan.impl == "reference":
        run_k1(plan.k1, views, io, impl="reference")
    else:
        run_k1(plan.k1, views, io, impl=device_impl(), scratch=bufs.k1_scratch,
               phased=plan.impl == "triton-phased", layer=layer, deadline_s=deadline_s)


def _unsharded(w: K2RankWeights) -> K2Weights:
    """A TP-1 rank's K2 tensors as the oracle's unsharded weights (the same tensors)."""
    m = w.moe
    if m.tp != 1:
        raise ValueError(f"K2 impl 'reference': the oracle emulates TP from unsharded weights; this rank holds "
                         f"1/{m.tp} of them (run the reference at TP 1, or the Triton launch)")
    moe = MoeWeights(shared_gate_up=m.shared_gate_up, shared_down=m.shared_down, router=m.router,
                     router_bias=m.router_bias, latent_down=m.latent_down, latent_norm=m.latent_norm,
                     latent_up=m.latent_up, experts=m.experts, params=m.params)
    return K2Weights(w.o_proj, w.mlp_res_proj, w.mlp_res_norm, w.post_attention_layernorm, moe)


def k2(plan: StepPlan, bufs: StepBuffers, w: K2RankWeights, attn_out: torch.Tensor, nvb: int,
       prefix: Optional[torch.Tensor], out: torch.Tensor, *, layer: int) -> torch.Tensor:
    """K2 for one MoE layer: `out` receives the next residual stream."""
    if plan.impl == "reference":
        res = k2_reference(attn_out, _unsharded(w), tp=1, bank=bufs.bank, nvb=nvb, prefix=prefix,
                           isa=plan.k2.isa, mode=plan.mode)
        out.copy_(res.out)
        return out
    launch = bufs.k2_for(attn_out.shape[1])
    return launch(w, attn_out, bufs.bank, nvb, prefix, out, layer=layer,
                  phase="all" if plan.impl == "triton-phased" else None)


@contextlib.contextmanager
def _k2_replaced(make: Callable[[Callable], Callable]):
    """Within the block, `k2` is `make(the k2 before it)`; restored after."""
    global k2
    inner = k2
    k2 = make(inner)
    try:
        yield
    finally:
        k2 = inner


def k2_compile_only():
    """Within the block, a step's K2 calls compile their launch (Triton's or FlyDSL's cache)
    and run nothing (`out` is left as it was): `warm`'s first pass at TP > 1, so no rank's
    first K2 waits on a peer that is still compiling."""
    def make(_inner):
        def compile_only(plan, bufs, w, attn_out, nvb, prefix, out, *, layer):
            bufs.k2_for(attn_out.shape[1]).compile(w, attn_out, bufs.bank, nvb, prefix, out, layer=layer)
            return out
        return compile_only

    return _k2_replaced(make)


def after_k2(hook: Callable[[int, StepBuffers, torch.Tensor], None]):
    """Within the block, `hook(layer, bufs, out)` runs after every K2 launch of a step (eager
    only: a test or benchmark reading what the launch left in its scratch)."""
    def make(inner):
        def recorded(plan, bufs, w, attn_out, nvb, prefix, out, *, layer):
            res = inner(plan, bufs, w, attn_out, nvb, prefix, out, layer=layer)
            hook(layer, bufs, out)
            return res
        return recorded

    return _k2_replaced(make)
