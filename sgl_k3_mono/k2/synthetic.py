"""Random K2 weights built directly on a device, at any size: the real per-rank Kimi-K3
layer (896 experts) is ~2 GB of MXFP4 or ~7.4 GB of bf16 experts, too slow to make on
the CPU for every GPU test and benchmark run. Magnitudes follow the references'
`random()` constructors (normal / sqrt(fan_in), norms ~1, router bias ~0.01)."""

from __future__ import annotations

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.k2.reference import K2RankWeights, K2Weights
from sgl_k3_mono.reference.experts import DenseExperts, Mxfp4Experts
from sgl_k3_mono.reference.moe import MoeParams, MoeRankWeights, MoeWeights


def _experts(g, d: K3Dims, fmt: str, device, *, inter: int, fan_in: int):
    """Routed experts [E, 2 x inter, L] / [E, L, inter]; w2's rows scaled to the whole
    layer's fan-in (`fan_in`: the unsharded intermediate), so a rank's slice has the
    magnitudes of the layer's."""
    E, L = d.experts, d.latent
    if fmt == "bf16":
        return DenseExperts(
            (torch.randn(E, 2 * inter, L, generator=g, device=device) / L ** 0.5).bfloat16(),
            (torch.randn(E, L, inter, generator=g, device=device) / fan_in ** 0.5).bfloat16())
    if fmt == "mxfp4":
        # e2m1 codes are ~N(0, 1.3) in magnitude; a scale of 2^-k puts rows at 1/sqrt(fan_in)
        def packed(rows, cols, fan):
            b = torch.randint(0, 256, (E, rows, cols // 2), generator=g, device=device, dtype=torch.uint8)
            s = 127 - round(0.5 * torch.log2(torch.tensor(float(fan))).item()) - 1
            sc = torch.randint(s - 1, s + 2, (E, rows, cols // 32), generator=g, device=device).to(torch.uint8)
            return b, sc
        w13, s13 = packed(2 * inter, L, L)
        w2, s2 = packed(L, inter, fan_in)
        return Mxfp4Experts(w13, s13, w2, s2, inter)
    raise ValueError(f"random_k2_weights: fmt {fmt!r}: bf16 or mxfp4")


def random_k2_weights(d: K3Dims, *, fmt: str, device, seed: int = 0, attn_width: int | None = None,
                      experts=None) -> K2Weights:
    """Unsharded (TP-1) K2 weights of dims `d`, generated on `device`; `experts`: a routed
    expert store to hold instead of generating one (the generator then skips its draws, so
    the other tensors' numbers differ from a generated store's layer)."""
    g = torch.Generator(device=device).manual_seed(seed)
    H, E, L, I = d.hidden, d.experts, d.latent, d.expert_inter
    S = d.expert_inter * d.shared_experts
    A = attn_width or d.kda_heads * d.kda_head_dim

    def lin(rows, cols):
        return (torch.randn(rows, cols, generator=g, device=device) / cols ** 0.5).bfloat16()

    def norm(n):
        return (1 + 0.1 * torch.randn(n, generator=g, device=device)).bfloat16()

    if experts is None:
        experts = _experts(g, d, fmt, device, inter=I, fan_in=I)
    moe = MoeWeights(
        shared_gate_up=lin(2 * S, H), shared_down=lin(H, S), router=lin(E, H),
        router_bias=0.01 * torch.randn(E, generator=g, device=device), latent_down=lin(L, H),
        latent_norm=norm(L) if d.latent_norm else None, latent_up=lin(H, L), experts=experts,
        params=MoeParams.from_dims(d))
    return K2Weights(o_proj=lin(H, A), mlp_res_proj=(torch.randn(1, H, generator=g, device=device) / H ** 0.5).bfloat16(),
                     mlp_res_norm=norm(H), post_attention_layernorm=norm(H), moe=moe)


def random_k2_rank_weights(d: K3Dims, *, fmt: str, device, rank: int, tp: int, seed: int = 0,
                           attn_width: int | None = None) -> K2RankWeights:
    """Rank `rank` of a TP-`tp` K2 layer of dims `d` (the layer's whole widths), generated on
    `device` without the other ranks' shards (a real layer's bf16 experts are 59 GB; each
    rank of a TP-8 run builds its own 7.4 GB). The replicated tensors come from a generator
    seeded `seed`, the same on every rank; this rank's shards (o_proj columns, the shared
    gate / up rows and down columns, the experts' intermediate slice) from one seeded by
    (`seed`, `rank`), scaled to the whole layer's fan-ins. The layer the ranks hold together
    is a random layer like `random_k2_weights`' (not the same numbers); the reference of a
    run is the ranks' own (`k2.reference.k2_from_ranks` with `all_gather_exchange`)."""
    H, E, L, I = d.hidden, d.experts, d.latent, d.expert_inter
    S = d.expert_inter * d.shared_experts
    A = attn_width or d.kda_heads * d.kda_head_dim
    if not 0 <= rank < tp or A % tp or S % tp or I % tp:
        raise ValueError(f"random_k2_rank_weights: rank {rank} of TP {tp} cannot split A {A}, S {S}, I {I}")
    al, sl, il = A // tp, S // tp, I // tp
    g = torch.Generator(device=device).manual_seed(seed)
    own = torch.Generator(device=device).manual_seed(seed * 1009 + 1 + rank)

    def lin(gen, rows, cols, fan_in=None):
        return (torch.randn(rows, cols, generator=gen, device=device) / (fan_in or cols) ** 0.5).bfloat16()

    def norm(n):
        return (1 + 0.1 * torch.randn(n, generator=g, device=device)).bfloat16()

    moe = MoeRankWeights(
        rank=rank, tp=tp, shared_gate_up=lin(own, 2 * sl, H), router=lin(g, E, H), latent_down=lin(g, L, H),
        shared_down=lin(own, H, sl, S), router_bias=0.01 * torch.randn(E, generator=g, device=device),
        latent_norm=norm(L) if d.latent_norm else None, latent_up=lin(g, H, L),
        experts=_experts(own, d, fmt, device, inter=il, fan_in=I), params=MoeParams.from_dims(d))
    return K2RankWeights(o_proj=lin(own, H, al, A), mlp_res_proj=lin(g, 1, H), mlp_res_norm=norm(H),
                         post_attention_layernorm=norm(H), moe=moe)


def rank_dims(tp: int = 8) -> K3Dims:
    """One TP-`tp` rank of Kimi-K3 as a TP-1 model: KDA and MLA heads and the expert and
    shared intermediates split `tp` ways (at TP 8: o_proj input 1536 = 12 heads x 128,
    expert intermediate 384, shared 768); router, latent and up are replicated anyway."""
    import dataclasses

    from sgl_k3_mono.configs import load_config

    full = K3Dims.from_config(load_config("kimi-k3"), tp=1)
    return dataclasses.replace(full, kda_heads=full.kda_heads // tp, mla_heads=full.mla_heads // tp,
                               expert_inter=full.expert_inter // tp)


def tp8_rank_dims() -> K3Dims:
    """rank_dims(8): the shapes the one-GPU tests and benchmarks run."""
    return rank_dims(8)
