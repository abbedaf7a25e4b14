"""Reference MLA decode for Kimi-K3's full-attention layers, at output level.

NoPE MLA (mla_use_nope: no rotary; the rope-width slice of q and the cached k_pe still
take part in the score), absorbed form, with K3's output gate applied in TP-local
space. Output: the TP-local [M, heads_l * v_head_dim] tensor before o_proj. Not bit
exact against SGLang's GPU attention kernels; it drives multi-step tests.

Per layer the latent cache is a list per request of [S, kv_lora + rope] bf16 rows
(replicated on every rank, as SGLang's MLA KV pool is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sgl_k3_mono.reference.ops import bf16, rmsnorm


@dataclass(frozen=True)
class MLAWeights:
    """One MLA layer's attention weights (unsharded, or one rank's after `shard`)."""

    qkv_a: torch.Tensor
    """[q_lora + kv_lora + rope, H] bf16: fused q_a_proj | kv_a_proj_with_mqa (replicated)."""
    q_a_norm: torch.Tensor
    """[q_lora] q_a_layernorm weight."""
    kv_a_norm: torch.Tensor
    """[kv_lora] kv_a_layernorm weight."""
    q_b: torch.Tensor
    """[heads * (nope + rope), q_lora] bf16."""
    kv_b: torch.Tensor
    """[heads * (nope + v), kv_lora] bf16 (w_kc | w_vc per head)."""
    g: torch.Tensor
    """[heads * v, H] bf16: the output-gate projection."""
    heads: int
    nope: int
    rope: int
    v: int
    eps: float
    """RMSNorm epsilon of the q/kv latent norms (rms_norm_eps)."""

    @property
    def q_lora(self) -> int:
        return self.q_a_norm.numel()

    @property
    def kv_lora(self) -> int:
        return self.kv_a_norm.numel()

    @classmethod
    def from_sglang(cls, attn: Any, eps: float) -> "MLAWeights":
        """From a TP-1 SGLang `KimiK3MLAAttention`."""
        return cls(attn.fused_qkv_a_proj_with_mqa.weight.detach(), attn.q_a_layernorm.weight.detach(),
                   attn.kv_a_layernorm.weight.detach(), attn.q_b_proj.weight.detach(),
                   attn.kv_b_proj.weight.detach(), attn.g_proj.weight.detach(), attn.num_local_heads,
                   attn.qk_nope_head_dim, attn.qk_rope_head_dim, attn.v_head_dim, eps)

    def shard(self, rank: int, tp: int) -> "MLAWeights":
        """Rank `rank`'s heads (q_b, kv_b, g are column parallel by head; qkv_a replicated)."""
        if self.heads % tp or not 0 <= rank < tp:
            raise ValueError(f"MLAWeights.shard: rank {rank} of tp={tp} does not split {self.heads} heads")
        hl = self.heads // tp

        def rows(t: torch.Tensor, per_head: int) -> torch.Tensor:
            return t[rank * hl * per_head : (rank + 1) * hl * per_head]

        return MLAWeights(self.qkv_a, self.q_a_norm, self.kv_a_norm, rows(self.q_b, self.nope + self.rope),
                          rows(self.kv_b, self.nope + self.v), rows(self.g, self.v), hl,
                          self.nope, self.rope, self.v, self.eps)


def latent_row(w: MLAWeights, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_a normed [M, q_lora], cache row [M, kv_lora + rope]) for normed input h, bf16 values."""
    x = bf16(h.float() @ w.qkv_a.float().t())
    q_a, kv_a, k_pe = x.split([w.q_lora, w.kv_lora, w.rope], -1)
    q = bf16(rmsnorm(q_a, w.q_a_norm, w.eps))
    kv = bf16(rmsnorm(kv_a, w.kv_a_norm, w.eps))
    return q, torch.cat([kv, k_pe], -1)


def absorbed_query(w: MLAWeights, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q in latent space [M, heads, kv_lora], q_pe [M, heads, rope], the value up
    projection [heads, v, kv_lora]) for normed input h: the absorbed form of MLA decode."""
    q_lat_in, _ = latent_row(w, h)
    m, hl = h.shape[0], w.heads
    q = bf16(q_lat_in @ w.q_b.float().t()).reshape(m, hl, w.nope + w.rope)
    q_nope, q_pe = q.split([w.nope, w.rope], -1)
    kvb = w.kv_b.float().reshape(hl, w.nope + w.v, w.kv_lora)
    w_kc, w_vc = kvb[:, : w.nope], kvb[:, w.nope :]
    return torch.einsum("mhn,hnl->mhl", q_nope, w_kc), q_pe, w_vc


def gated_output(w: MLAWeights, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """bf16(x) times the bf16 sigmoid gate of h: the output of one rank's MLA [M, heads * v]."""
    gate = bf16(h.float() @ w.g.float().t())
    return bf16(bf16(x) * bf16(torch.sigmoid(gate)))


def mla_decode(w: MLAWeights, h: torch.Tensor, caches: list[torch.Tensor]) -> torch.Tensor:
    """TP-local gated MLA output [M, heads * v] (fp32 holding bf16).

    `w` is one rank's shard; `caches[i]` is row i's latent cache [S_i, kv_lora + rope]
    that already holds this step's token (see `latent_row`).
    """
    q_lat, q_pe, w_vc = absorbed_query(w, h)
    m, hl = h.shape[0], w.heads
    scale = (w.nope + w.rope) ** -0.5
    outs = []
    for i in range(m):
        c = caches[i].float()
        kv, k_pe = c[:, : w.kv_lora], c[:, w.kv_lora :]
        s = (q_lat[i] @ kv.t() + q_pe[i] @ k_pe.t()) * scale  # [hl, S]
        lat = torch.softmax(s, -1) @ kv  # [hl, kv_lora]
        outs.append(torch.einsum("hl,hvl->hv", lat, w_vc))
    return gated_output(w, h, torch.stack(outs).reshape(m, hl * w.v))
