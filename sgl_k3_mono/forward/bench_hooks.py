"""The step benchmark's common parts in bf16: MLA, layer 0's MLP and the logits as bf16
GEMMs (cuBLAS, fp32 accumulation), the way a served step runs them, instead of the
harness's reference math with fp32-widened weights.

Both the step with our launches and the standard step run these same hooks, so they
change only the shared (bare) part of the step. They are for timing only: no test
compares their numbers (the harness's HarnessHooks stay the tests' reference-exact
hooks). The fp32 flavour made layer 0 and MLA cuBLAS `sgemm` calls that a served step
does not make; at two rows they were most of the step's non-launch time."""

from __future__ import annotations

import torch

from sgl_k3_mono.forward.harness import HarnessHooks, HarnessState
from sgl_k3_mono.reference.attn_res import ffn_seam
from sgl_k3_mono.reference.mla import MLAWeights
from sgl_k3_mono.reference.ops import rmsnorm, situ
from sgl_k3_mono.reference.step import ModelWeights


class Bf16BenchHooks(HarnessHooks):
    """HarnessHooks at TP 1 with bf16 weights and bf16 products (timing only)."""

    def __init__(self, w: ModelWeights, state: HarnessState, slots: torch.Tensor, *, isa: str = "sm_90"):
        self.w, self.state, self.isa = w, state, isa
        self.rank, self.tp, self.group = 0, 1, None
        self.slots = slots.to(w.embed.device).long()
        self.mla_w = {i: w.layers[i].mla for i in w.dims.mla_layers}
        self.dense_w = {i: lw.dense for i, lw in enumerate(w.layers) if lw.dense is not None}
        self.lm_head = w.lm_head

    def mla(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        w: MLAWeights = self.mla_w[layer]
        cache = self.state.mla[layer]
        m, hl = h.shape[0], w.heads
        q_a, kv_a, k_pe = (h @ w.qkv_a.t()).split([w.q_lora, w.kv_lora, w.rope], -1)
        q = rmsnorm(q_a, w.q_a_norm, w.eps).to(h.dtype)
        row = torch.cat([rmsnorm(kv_a, w.kv_a_norm, w.eps).to(h.dtype), k_pe], -1)
        pos = self.state.lengths.index_select(0, self.slots)
        cache.index_put_((self.slots, pos), row.to(cache.dtype))
        rows = cache.index_select(0, self.slots)  # [M, T, C] bf16
        kv, kpe = rows[..., : w.kv_lora], rows[..., w.kv_lora:]
        q_nope, q_pe = (q @ w.q_b.t()).reshape(m, hl, w.nope + w.rope).split([w.nope, w.rope], -1)
        kvb = w.kv_b.reshape(hl, w.nope + w.v, w.kv_lora)
        q_lat = torch.einsum("mhn,hnl->mhl", q_nope, kvb[:, : w.nope])
        s = torch.einsum("mhl,mtl->mht", q_lat, kv) + torch.einsum("mhr,mtr->mht", q_pe, kpe)
        valid = torch.arange(cache.shape[1], device=h.device)[None, :] <= pos[:, None]
        s = s.float().mul_((w.nope + w.rope) ** -0.5).masked_fill_(~valid[:, None, :], float("-inf"))
        lat = torch.einsum("mht,mtl->mhl", torch.softmax(s, -1).to(h.dtype), kv)
        out = torch.einsum("mhl,hvl->mhv", lat, kvb[:, w.nope:]).reshape(m, hl * w.v)
        return out * torch.sigmoid(h @ w.g.t())

    def dense(self, layer, attn_out, bank, nvb, prefix):
        d, dims = self.dense_w[layer], self.w.dims
        fs = ffn_seam(bank, nvb, prefix, (attn_out @ d.o_proj.t()).float(), d.ffn_seam, dims.rms_eps, isa=self.isa)
        gu = fs.normed.to(torch.bfloat16) @ d.gate_up.t()
        i = gu.shape[-1] // 2
        act = situ(gu[:, :i], gu[:, i:], dims.situ_beta, dims.situ_linear_beta).to(torch.bfloat16)
        return fs.prefix.to(torch.bfloat16), act @ d.down.t()

    def final(self, hidden: torch.Tensor) -> torch.Tensor:
        self.state.lengths.index_add_(0, self.slots, torch.ones_like(self.slots))
        return hidden.to(torch.bfloat16) @ self.lm_head.t()

