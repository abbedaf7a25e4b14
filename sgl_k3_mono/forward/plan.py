"""One served width's plan and the buffers it owns.

A `StepPlan` is everything a step of one ShapeKey is specialised on (the K1 and K2
plans and the implementation that runs them); `StepBuffers` are the tensors a step of
that width writes besides SGLang's own (the residual stream, the attn-res bank, K1's
output and scratch, K2's launch with its scratch and peer buffers). Both are made once
at build; a served step allocates nothing of its own beyond what torch ops inside the
SGLang-side pieces (MLA, layer 0, logits) allocate, as SGLang's own forward does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from sgl_k3_mono.k1.host import K1Plan, K1Scratch
from sgl_k3_mono.k2.host import K2Launch, K2Peers, K2Plan

IMPLS = ("triton", "triton-phased", "reference")
"""How the launches run: "triton" the persistent launches (the served path);
"triton-phased" every phase as its own launch (Triton's CPU interpreter); "reference"
the launches' plain-torch oracles written into the same tensors (CPU tests)."""

MODES = {"decode": "decode", "target_verify": "verify"}
"""SGLang's ShapeKey.forward_mode -> the launches' mode."""


@dataclass(frozen=True)
class StepPlan:
    """One served width: what its K1 and K2 launches are built for."""

    rows: int
    """M: rows of the step (batch_size x tokens_per_request)."""
    mode: str
    """"decode" (M requests, one token each) or "verify" (one request, M tokens)."""
    batch_size: int
    """Requests in the step (1 in verify)."""
    k1: Optional[K1Plan]
    """The KDA layers' launch; None when the model has no KDA layer."""
    k2: K2Plan
    """The MoE layers' launch (after a KDA layer, or any layer when the widths agree)."""
    k2_mla: Optional[K2Plan] = None
    """The MoE launch after an MLA layer when its TP-local width differs from KDA's (the
    tiny test models; Kimi-K3's are both 12 x 128 a rank at TP 8); None: `k2` serves both."""
    impl: str = "triton"
    """One of IMPLS."""

    def __post_init__(self):
        if self.impl not in IMPLS:
            raise ValueError(f"StepPlan: impl {self.impl!r}; expected one of {IMPLS}")
        if self.mode not in MODES.values():
            raise ValueError(f"StepPlan: mode {self.mode!r}; expected one of {sorted(MODES.values())}")
        if self.mode == "verify" and self.batch_size != 1:
            raise ValueError(f"StepPlan: a verify step of {self.batch_size} requests; K1's verify mode serves "
                             "one request (M tokens)")
        if self.k2.rows != self.rows or (self.k1 is not None and (self.k1.rows, self.k1.mode) != (self.rows, self.mode)):
            raise ValueError("StepPlan: the K1/K2 plans are not built for this width and mode")

    def k2_for(self, attn_width: int) -> K2Plan:
        """The K2 plan whose o_proj reads `attn_width` columns."""
        for p in (self.k2, self.k2_mla):
            if p is not None and p.attn_width == attn_width:
                return p
        raise ValueError(f"StepPlan: no K2 plan reads an attention output of {attn_width} columns")


@dataclass
class StepBuffers:
    """The tensors one width's steps write besides SGLang's (allocated once, reused)."""

    stream: torch.Tensor
    """[2, M, H] bf16: the residual stream, ping-pong (K2 reads one, writes the other)."""
    resid: torch.Tensor
    """[M, H] bf16: the prefix after layer 1's pending add (K1 writes it there)."""
    bank: torch.Tensor
    """[M, NB, H] bf16: the attn-res bank (K1 writes row nvb on block-write layers)."""
    k1_out: Optional[torch.Tensor]
    """[M, P_l] bf16: K1's TP-local attention output."""
    k1_scratch: Optional[K1Scratch]
    """K1's per-plan scratch and error record."""
    k2: K2Launch
    """K2's launch: its scratch, error record and (TP > 1) peer buffers."""
    k2_mla: Optional[K2Launch] = None
    """plan.k2_mla's launch: the same scratch, sync words, error record and peers as `k2`
    (only the o_proj width differs), so the launches' epochs advance as one."""

    def k2_for(self, attn_width: int) -> K2Launch:
        if self.k2.plan.attn_width == attn_width:
            return self.k2
        if self.k2_mla is not None and self.k2_mla.plan.attn_width == attn_width:
            return self.k2_mla
        raise ValueError(f"StepBuffers: no K2 launch reads an attention output of {attn_width} columns")

    @classmethod
    def allocate(cls, plan: StepPlan, device, *, deadline_s: float, rank: int = 0,
                 peers: Optional[K2Peers] = None) -> "StepBuffers":
        m, h, nb = plan.rows, plan.k2.hidden, plan.k2.bank_rows
        bf = dict(dtype=torch.bfloat16, device=device)
        k1_out = k1_scratch = None
        if plan.k1 is not None:
            k1_out = torch.zeros(m, plan.k1.proj, **bf)
            k1_scratch = K1Scratch.allocate(plan.k1, device)
        k2 = K2Launch.build(plan.k2, device, deadline_s=deadline_s, rank=rank, peers=peers)
        k2_mla = None if plan.k2_mla is None else dataclasses.replace(k2, plan=plan.k2_mla)
        return cls(stream=torch.zeros(2, m, h, **bf), resid=torch.zeros(m, h, **bf),
                   bank=torch.zeros(m, nb, h, **bf), k1_out=k1_out, k1_scratch=k1_scratch, k2=k2, k2_mla=k2_mla)

    def nbytes(self) -> int:
        """Device bytes these buffers hold (K2's peer buffers included)."""
        own = [self.stream, self.resid, self.bank] + ([self.k1_out] if self.k1_out is not None else [])
        total = sum(t.numel() * t.element_size() for t in own)
        total += self.k1_scratch.bytes if self.k1_scratch is not None else 0
        total += self.k2.scratch.nbytes()
        peers = self.k2.peers
        if peers is not None:
            total += sum(t.numel() * t.element_size() for t in (peers.part1, peers.part2, peers.flags))
        if self.k2.red is not None:
            total += self.k2.red.numel() * self.k2.red.element_size()
        return total
