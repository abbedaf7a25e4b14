"""K2's weights as views of what SGLang holds on this rank."""

from __future__ import annotations

from typing import Any

from sgl_k3_mono.k2.reference import K2RankWeights
from sgl_k3_mono.reference.moe import MoeRankWeights, MoeWeights


def rank_weights_from_sglang(layer: Any, *, rank: int, tp: int) -> K2RankWeights:
    """This rank's K2 tensors of a loaded `KimiK3DecoderLayer` (a MoE layer), as views.

    SGLang's loader already sharded every tensor for this rank, so the MoE's tensors are
    read as they are (the merged `_front_w` split into its three row blocks, experts as
    FusedMoE holds them); nothing is copied.
    """
    mw = MoeWeights.from_sglang(layer.mlp)
    moe = MoeRankWeights(rank=rank, tp=tp, shared_gate_up=mw.shared_gate_up, router=mw.router,
                         latent_down=mw.latent_down, shared_down=mw.shared_down, router_bias=mw.router_bias,
                         latent_norm=mw.latent_norm, latent_up=mw.latent_up, experts=mw.experts, params=mw.params)
    return K2RankWeights(o_proj=layer.self_attn.o_proj.weight.data, mlp_res_proj=layer.mlp_res_proj.weight.data,
                         mlp_res_norm=layer.mlp_res_norm.weight.data,
                         post_attention_layernorm=layer.post_attention_layernorm.weight.data, moe=moe)
