"""K2, the layer launch: o_proj + attention all-reduce + FFN attn-res seam + latent MoE."""

from sgl_k3_mono.k2.reference import K2RankWeights, K2Result, K2Weights, k2_reference

__all__ = ["K2RankWeights", "K2Result", "K2Weights", "k2_reference"]
