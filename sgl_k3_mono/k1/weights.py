"""K1's weights: unsharded (`K1Weights`) and one TP rank's shard (`K1LocalWeights`).

The local form is exactly what SGLang 0.5.23 holds on a rank after loading a K3 KDA
layer: `fused_qkvg_proj` rows [q_l | k_l | v_l | g_l], the merged `_bfa_w` rows
[f_a | b_l | zero pad to a multiple of 8], `f_b_proj` [P_l, D], the conv weight
[3 P_l, K] fp32 (channels q_l | k_l | v_l), `A_log` narrowed to this rank's heads,
`dt_bias` [P_l], `o_norm` [D] bf16, plus the attention-side seam weights (replicated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sgl_k3_mono.reference.attn_res import SeamWeights


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class K1LocalWeights:
    """One rank's K1 weights, in SGLang's local layout."""

    qkvg: torch.Tensor
    """[4 P_l, H] bf16: the fused_qkvg_proj weight, rows q_l | k_l | v_l | g_l."""
    bfa: torch.Tensor
    """[D + h_l + pad, H] bf16: `_bfa_w`, rows f_a (replicated) | b_l | zeros."""
    f_b: torch.Tensor
    """[P_l, D] bf16: f_b_proj weight (this rank's output rows)."""
    conv: torch.Tensor
    """[3 P_l, K] fp32: qkv_conv1d weight, channels q_l | k_l | v_l; tap K-1 is the newest input."""
    a_log: torch.Tensor
    """[h_l] fp32: this rank's heads of A_log."""
    dt_bias: torch.Tensor
    """[P_l] fp32."""
    o_norm: torch.Tensor
    """[D] bf16: the gated output RMSNorm weight."""
    seam: SeamWeights
    """Attention-side attn-res weights (self_attention_res_proj/norm, input_layernorm)."""
    heads: int
    """Local heads h_l."""
    head_dim: int
    """D (q, k and v head width)."""
    lower_bound: float | None
    """Safe-gate lower bound (-5.0 for K3); None: unbounded gate."""

    @property
    def proj(self) -> int:
        """P_l = h_l * D."""
        return self.heads * self.head_dim

    @property
    def conv_width(self) -> int:
        return self.conv.shape[1]

    @classmethod
    def from_sglang(cls, layer: Any) -> "K1LocalWeights":
        """What a SGLang `KimiK3DecoderLayer` with a KDA `self_attn` holds on its rank.

        Takes the merged `_bfa_w` when SGLang built it, else b_proj / f_a_proj.
        """
        attn = layer.self_attn
        _need(hasattr(attn, "fused_qkvg_proj"), "K1LocalWeights.from_sglang: not a full-rank-gate KDA layer")
        d, h = attn.head_dim, attn.local_num_heads
        if getattr(attn, "_bfa_w", None) is not None:
            bfa = attn._bfa_w
        else:
            bfa = torch.cat([attn.f_a_proj.weight, attn.b_proj.weight], 0)
        bfa = torch.cat([bfa[: d + h], bfa.new_zeros((-(d + h)) % 8, bfa.shape[1])], 0)
        return cls(
            qkvg=attn.fused_qkvg_proj.weight.detach(),
            bfa=bfa.detach(),
            f_b=attn.f_b_proj.weight.detach(),
            conv=attn.qkv_conv1d.weight.detach().reshape(3 * h * d, -1),
            a_log=attn.A_log.detach().reshape(-1),
            dt_bias=attn.dt_bias.detach(),
            o_norm=attn.o_norm.weight.detach(),
            seam=SeamWeights(
                proj=layer.self_attention_res_proj.weight.detach(),
                score_norm=layer.self_attention_res_norm.weight.detach(),
                out_norm=layer.input_layernorm.weight.detach(),
            ),
            heads=h,
            head_dim=d,
            lower_bound=attn.attn.lower_bound,
        )


@dataclass(frozen=True)
class K1Weights:
    """One KDA layer's K1 weights over all ranks (as at TP 1 / in the checkpoint)."""

    q: torch.Tensor
    """[P, H] bf16."""
    k: torch.Tensor
    """[P, H] bf16."""
    v: torch.Tensor
    """[P, H] bf16."""
    g: torch.Tensor
    """[P, H] bf16: the full-rank output-gate projection."""
    f_a: torch.Tensor
    """[D, H] bf16: replicated on every rank."""
    b: torch.Tensor
    """[heads, H] bf16: beta projection."""
    f_b: torch.Tensor
    """[P, D] bf16."""
    conv: torch.Tensor
    """[3 P, K] fp32, channels q | k | v."""
    a_log: torch.Tensor
    """[heads] fp32."""
    dt_bias: torch.Tensor
    """[P] fp32."""
    o_norm: torch.Tensor
    """[D] bf16."""
    seam: SeamWeights
    """Attention-side attn-res weights (replicated)."""
    heads: int
    head_dim: int
    lower_bound: float | None

    @property
    def proj(self) -> int:
        return self.heads * self.head_dim

    @classmethod
    def from_local(cls, lw: K1LocalWeights) -> "K1Weights":
        """The unsharded weights of a TP-1 shard (SGLang built at TP 1, e.g. on the CPU)."""
        p, d, h = lw.proj, lw.head_dim, lw.heads
        q, k, v, g = lw.qkvg.split(p, 0)
        return cls(q, k, v, g, lw.bfa[:d], lw.bfa[d : d + h], lw.f_b, lw.conv, lw.a_log,
                   lw.dt_bias, lw.o_norm, lw.seam, h, d, lw.lower_bound)

    @classmethod
    def from_sglang(cls, layer: Any) -> "K1Weights":
        """From a SGLang KDA decoder layer built at attention TP 1."""
        tp = getattr(layer.self_attn, "attn_tp_size", 1)
        _need(tp == 1, f"K1Weights.from_sglang: the layer is sharded over {tp} ranks; use K1LocalWeights")
        return cls.from_local(K1LocalWeights.from_sglang(layer))

    def shard(self, rank: int, tp: int) -> K1LocalWeights:
        """Rank `rank`'s weights at TP `tp`, sliced as SGLang's loader shards them."""
        _need(isinstance(tp, int) and tp >= 1, f"K1Weights.shard: tp must be a positive int, got {tp!r}")
        _need(self.heads % tp == 0, f"K1Weights.shard: tp={tp} does not divide {self.heads} KDA heads")
        _need(0 <= rank < tp, f"K1Weights.shard: rank {rank} outside 0..{tp - 1}")
        hl, d = self.heads // tp, self.head_dim
        pl = hl * d
        rows = slice(rank * pl, (rank + 1) * pl)
        heads = slice(rank * hl, (rank + 1) * hl)
        bfa = torch.cat([self.f_a, self.b[heads]], 0)
        bfa = torch.cat([bfa, bfa.new_zeros((-bfa.shape[0]) % 8, bfa.shape[1])], 0)
        conv = self.conv.split(self.proj, 0)
        return K1LocalWeights(
            qkvg=torch.cat([self.q[rows], self.k[rows], self.v[rows], self.g[rows]], 0),
            bfa=bfa,
            f_b=self.f_b[rows],
            conv=torch.cat([c[rows] for c in conv], 0),
            a_log=self.a_log[heads],
            dt_bias=self.dt_bias[rows],
            o_norm=self.o_norm,
            seam=self.seam,
            heads=hl,
            head_dim=d,
            lower_bound=self.lower_bound,
        )

    @classmethod
    def random(cls, hidden: int, heads: int, head_dim: int, conv_width: int = 4, *,
               lower_bound: float | None = -5.0, seed: int = 0, device="cpu") -> "K1Weights":
        """Random weights of realistic scale (normal / sqrt(fan_in)), for tests and benches,
        generated on `device` (a seed gives other numbers on another device)."""
        gen = torch.Generator(device=device).manual_seed(seed)
        p = heads * head_dim

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, device=device)

        def lin(o: int, i: int) -> torch.Tensor:
            return (randn(o, i) / i ** 0.5).bfloat16()

        def near_one(n: int) -> torch.Tensor:
            return (1 + 0.1 * randn(n)).bfloat16()

        return cls(
            q=lin(p, hidden), k=lin(p, hidden), v=lin(p, hidden), g=lin(p, hidden),
            f_a=lin(head_dim, hidden), b=lin(heads, hidden), f_b=lin(p, head_dim),
            conv=randn(3 * p, conv_width) / conv_width ** 0.5,
            a_log=torch.log(torch.empty(heads, device=device).uniform_(1, 16, generator=gen)),
            dt_bias=0.5 * randn(p),
            o_norm=near_one(head_dim),
            seam=SeamWeights(
                proj=(randn(1, hidden) * 0.05).bfloat16(),
                score_norm=near_one(hidden),
                out_norm=near_one(hidden),
            ),
            heads=heads, head_dim=head_dim, lower_bound=lower_bound,
        )
