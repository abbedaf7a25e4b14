"""Random K2 weights built directly on a device, at any size: the real per-rank Kimi-K3
layer (896 experts) is ~2 GB of MXFP4 or ~7.4 GB of bf16 experts, too slow to make on
the CPU for every GPU test and benchmark run. Magnitudes follow the references'
`random()` constructors (normal / sqrt(fan_in), norms ~1, router bias ~0.01)."""

from __future__ import annotations

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.k2.reference import K2Weights
from sgl_k3_mono.reference.experts import DenseExperts, Mxfp4Experts
from sgl_k3_mono.reference.moe import MoeParams, MoeWeights


def random_k2_weights(d: K3Dims, *, fmt: str, device, seed: int = 0, attn_width: int | None = None) -> K2Weights:
    """Unsharded (TP-1) K2 weights of dims `d`, generated on `device`."""
    g = torch.Generator(device=device).manual_seed(seed)
    H, E, L, I = d.hidden, d.experts, d.latent, d.expert_inter
    S = d.expert_inter * d.shared_experts
    A = attn_width or d.kda_heads * d.kda_head_dim

    def lin(rows, cols):
        return (torch.randn(rows, cols, generator=g, device=device) / cols ** 0.5).bfloat16()

    def norm(n):
        return (1 + 0.1 * torch.randn(n, generator=g, device=device)).bfloat16()

    if fmt == "bf16":
        experts = DenseExperts(
            (torch.randn(E, 2 * I, L, generator=g, device=device) / L ** 0.5).bfloat16(),
            (torch.randn(E, L, I, generator=g, device=device) / I ** 0.5).bfloat16())
    elif fmt == "mxfp4":
        # e2m1 codes are ~N(0, 1.3) in magnitude; a scale of 2^-k puts rows at 1/sqrt(fan_in)
        def packed(rows, cols, fan_in):
            b = torch.randint(0, 256, (E, rows, cols // 2), generator=g, device=device, dtype=torch.uint8)
            s = 127 - round(0.5 * torch.log2(torch.tensor(float(fan_in))).item()) - 1
            sc = torch.randint(s - 1, s + 2, (E, rows, cols // 32), generator=g, device=device).to(torch.uint8)
            return b, sc
        w13, s13 = packed(2 * I, L, L)
        w2, s2 = packed(L, I, I)
        experts = Mxfp4Experts(w13, s13, w2, s2, I)
    else:
        raise ValueError(f"random_k2_weights: fmt {fmt!r}: bf16 or mxfp4")
    moe = MoeWeights(
        shared_gate_up=lin(2 * S, H), shared_down=lin(H, S), router=lin(E, H),
        router_bias=0.01 * torch.randn(E, generator=g, device=device), latent_down=lin(L, H),
        latent_norm=norm(L) if d.latent_norm else None, latent_up=lin(H, L), experts=experts,
        params=MoeParams.from_dims(d))
    return K2Weights(o_proj=lin(H, A), mlp_res_proj=(torch.randn(1, H, generator=g, device=device) / H ** 0.5).bfloat16(),
                     mlp_res_norm=norm(H), post_attention_layernorm=norm(H), moe=moe)


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
