"""A whole Kimi-K3 decode step built from the launch references, TP emulated.

embed -> per layer: attention seam + (K1 | MLA) on every rank, then K2 (MoE layers) or
layer 0 as SGLang runs it (o_proj, all-reduce, FFN seam, dense MLP whose partials are
all-reduced and added at layer 1's seam) -> final attn-res read with model.norm -> logits.
Per-rank partials are summed in rank order (`moe.all_reduce`). Decode only: M requests,
one token each, request i's states at `slots[i]`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.k1 import K1Weights, KDAState, SeamInput, k1_reference
from sgl_k3_mono.reference.attn_res import SeamWeights, add_prefix, aggregate, attn_seam, ffn_seam, stream_value
from sgl_k3_mono.reference.mla import MLAWeights, latent_row, mla_decode
from sgl_k3_mono.reference.ops import bf16, situ


def _k2():
    """The K2 reference (another launch's oracle), imported when a step first needs it."""
    from sgl_k3_mono.k2.reference import K2Weights, k2_reference

    return K2Weights, k2_reference


def _all_reduce(partials: list[torch.Tensor]) -> torch.Tensor:
    """bf16(fp32 sum in rank order): SGLang's custom all-reduce."""
    acc = partials[0].float()
    for p in partials[1:]:
        acc = acc + p.float()
    return bf16(acc)


@dataclass(frozen=True)
class DenseLayer:
    """Layer 0's FFN side as SGLang runs it (not a K2 launch)."""

    o_proj: torch.Tensor
    """[H, P] bf16, row parallel (rank r reads columns r)."""
    ffn_seam: SeamWeights
    """mlp_res_proj, mlp_res_norm, post_attention_layernorm."""
    gate_up: torch.Tensor
    """[2 I, H] bf16: gate rows then up rows."""
    down: torch.Tensor
    """[H, I] bf16."""

    @classmethod
    def from_sglang(cls, layer: Any) -> "DenseLayer":
        """From SGLang's decoder layer 0 (TP 1)."""
        return cls(layer.self_attn.o_proj.weight.detach(),
                   SeamWeights(layer.mlp_res_proj.weight.detach(), layer.mlp_res_norm.weight.detach(),
                               layer.post_attention_layernorm.weight.detach()),
                   layer.mlp.gate_up_proj.weight.detach(), layer.mlp.down_proj.weight.detach())


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer: exactly one of k1 / mla, and exactly one of k2 / dense."""

    k1: K1Weights | None
    mla: MLAWeights | None
    attn_seam: SeamWeights
    """self_attention_res_proj / _norm and input_layernorm (also inside k1)."""
    k2: Any | None
    """`sgl_k3_mono.k2.reference.K2Weights` for MoE layers."""
    dense: DenseLayer | None


@dataclass(frozen=True)
class ModelWeights:
    """Every weight a decode step reads, unsharded."""

    dims: K3Dims
    embed: torch.Tensor
    """[V, H] bf16."""
    layers: tuple[LayerWeights, ...]
    final_seam: SeamWeights
    """output_attn_res_proj / _norm and model.norm."""
    lm_head: torch.Tensor
    """[V, H] bf16."""

    @classmethod
    def from_sglang(cls, model: Any, dims: K3Dims) -> "ModelWeights":
        """From a TP-1 SGLang `KimiK3LinearModel`-holding model (`.language_model` or the LM itself)."""
        lm = getattr(model, "language_model", model)
        K2Weights, _ = _k2()
        layers = []
        for i, layer in enumerate(lm.model.layers):
            seam = SeamWeights(layer.self_attention_res_proj.weight.detach(),
                               layer.self_attention_res_norm.weight.detach(), layer.input_layernorm.weight.detach())
            k1 = K1Weights.from_sglang(layer) if dims.is_kda(i) else None
            mla = None if dims.is_kda(i) else MLAWeights.from_sglang(layer.self_attn, dims.rms_eps)
            if dims.is_moe(i):
                k2, dense = K2Weights.from_sglang_layer(layer), None
            else:
                k2, dense = None, DenseLayer.from_sglang(layer)
            layers.append(LayerWeights(k1, mla, seam, k2, dense))
        m = lm.model
        return cls(dims, m.embed_tokens.weight.detach(), tuple(layers),
                   SeamWeights(m.output_attn_res_proj.weight.detach(), m.output_attn_res_norm.weight.detach(),
                               m.norm.weight.detach()), lm.lm_head.weight.detach())


@dataclass
class DecodeState:
    """Mutable per-request state a sequence of steps carries (updated in place by `decode_step`)."""

    kda: dict[int, list[KDAState]]
    """KDA layer -> one KDAState per rank (pools indexed by slot)."""
    mla: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)
    """MLA layer -> slot -> latent cache [S, kv_lora + rope] bf16 (replicated on every rank)."""

    @classmethod
    def fresh(cls, dims: K3Dims, tp: int, slots: int) -> "DecodeState":
        """Zero states (as after an empty prefill) for `slots` requests at TP `tp`."""
        d, hl = dims.kda_head_dim, dims.kda_heads // tp
        kda = {i: [KDAState(torch.zeros(slots, dims.conv_width - 1, 3 * hl * d, dtype=torch.bfloat16),
                            torch.zeros(slots, hl, d, d)) for _ in range(tp)] for i in dims.kda_layers}
        return cls(kda, {i: {} for i in dims.mla_layers})


def dense_partial(d: DenseLayer, h2: torch.Tensor, dims: K3Dims, tp: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s dense-MLP partial: bf16 gate_up, bf16 SiTU, bf16 down over its rows."""
    inter = d.gate_up.shape[0] // 2
    il = inter // tp
    rows = slice(rank * il, (rank + 1) * il)
    gu = bf16(h2.float() @ torch.cat([d.gate_up[:inter][rows], d.gate_up[inter:][rows]]).float().t())
    act = bf16(situ(gu[:, :il], gu[:, il:], dims.situ_beta, dims.situ_linear_beta))
    return bf16(act @ d.down[:, rows].float().t())


def _dense_ffn(d: DenseLayer, h2: torch.Tensor, dims: K3Dims, tp: int) -> torch.Tensor:
    """The dense MLP's reduced output: every rank's partial, rank-order sum."""
    return _all_reduce([dense_partial(d, h2, dims, tp, r) for r in range(tp)])


def dense_side(d: DenseLayer, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int, prefix: torch.Tensor | None,
               dims: K3Dims, *, tp: int, isa: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's FFN side from its TP-local attention outputs side by side ([M, A] bf16):
    o_proj partials and their all-reduce, the FFN seam, the dense MLP reduced. Returns (the
    stream after the seam, the MLP output still to be added at the next layer's seam)."""
    pl = attn_out.shape[1] // tp
    a = _all_reduce([bf16(attn_out[:, r * pl : (r + 1) * pl].float() @ d.o_proj[:, r * pl : (r + 1) * pl]
                          .float().t()) for r in range(tp)])
    fs = ffn_seam(bank, nvb, prefix, a, d.ffn_seam, dims.rms_eps, isa=isa)
    return fs.prefix, _dense_ffn(d, fs.normed, dims, tp)


def decode_step(w: ModelWeights, state: DecodeState, input_ids: torch.Tensor, slots: torch.Tensor, *,
                tp: int = 1, isa: str = "gfx950", trace: list | None = None,
                choose=None, aux: dict[int, Any] | None = None) -> torch.Tensor:
    """One decode step for M requests; returns logits [M, V] fp32 (bf16 values).

    `trace`, when a list, receives one dict per layer (attention output, the stream the
    layer leaves, the router logits and routed expert ids, or None): routing decisions are
    where emulated TP sizes legitimately diverge (a rounding difference can flip a top-k
    choice). `choose(layer, logits, ids) -> ids`, when given, may replace a MoE layer's
    top-k sets (see `reference.moe.route`). `aux`, when a dict, receives for each layer named
    by its keys the stream after that layer as the next read mixes it (SGLang's DSpark /
    DFlash capture, `attn_res.stream_value`), [M, H] bf16."""
    dims = w.dims
    if not 1 <= input_ids.numel() <= 8 or slots.shape != input_ids.shape:
        raise ValueError(f"decode_step: need 1..8 ids and one slot each, got {tuple(input_ids.shape)} / "
                         f"{tuple(slots.shape)}")
    if dims.kda_heads % tp or dims.mla_heads % tp:
        raise ValueError(f"decode_step: tp={tp} does not divide the heads")
    _, k2_reference = _k2()
    m, eps = input_ids.numel(), dims.rms_eps
    prefix, add = w.embed[input_ids].float(), None  # vocab-parallel embedding: one nonzero term, exact
    bank, nvb = torch.zeros(m, dims.bank_rows(), dims.hidden, dtype=torch.bfloat16), 0
    for i, lw in enumerate(w.layers):
        write = dims.is_block_write(i)
        if lw.k1 is not None:
            outs = []
            for r in range(tp):
                k1 = k1_reference(lw.k1, SeamInput(prefix, add, bank, nvb, write), state.kda[i][r], slots,
                                  tp=tp, rank=r, rms_eps=eps, isa=isa)
                state.kda[i][r] = k1.state
                outs.append(k1.out)
            sr = k1.seam
        else:
            sr = attn_seam(bank, nvb, prefix, add, lw.attn_seam, eps, write=write, isa=isa)
            caches = state.mla[i]
            _, row = latent_row(lw.mla, sr.normed)
            for j, s in enumerate(slots.tolist()):
                caches[s] = torch.cat([caches.get(s, row[:0]), row[j : j + 1]])
            rows = [caches[s] for s in slots.tolist()]
            outs = [mla_decode(lw.mla.shard(r, tp), sr.normed, rows) for r in range(tp)]
        attn_out = torch.cat(outs, -1).bfloat16()
        bank, nvb = sr.bank, sr.nvb
        if lw.k2 is not None:
            res = k2_reference(attn_out, lw.k2, tp=tp, bank=bank.bfloat16(), nvb=nvb,
                               prefix=None if sr.prefix is None else sr.prefix.bfloat16(), isa=isa,
                               choose=None if choose is None else functools.partial(choose, i))
            prefix, add = res.out.float(), None
            ids, logits = res.moe.topk_ids, res.moe.router_logits
        else:
            prefix, add = dense_side(lw.dense, attn_out, bank, nvb, sr.prefix, dims, tp=tp, isa=isa)
            ids = logits = None
        if trace is not None:
            trace.append(dict(layer=i, attn_out=attn_out, stream=prefix, expert_ids=ids, router_logits=logits))
        if aux is not None and i in aux:
            nxt = w.layers[i + 1].attn_seam if i + 1 < len(w.layers) else w.final_seam
            aux[i] = stream_value(bank, nvb, add_prefix(prefix, add), nxt.proj, nxt.score_norm, eps)
    prefix = add_prefix(prefix, add)
    fw = w.final_seam
    h = aggregate(bank, nvb, prefix, fw.proj, fw.score_norm, fw.out_norm, eps, isa=isa)
    vl = w.lm_head.shape[0] // tp
    return torch.cat([bf16(h @ w.lm_head[r * vl : (r + 1) * vl].float().t()) for r in range(tp)], -1)
