"""K1: the KDA attention front launch (attn-res seam through the gated output norm)."""

from sgl_k3_mono.k1.reference import K1Output, KDAState, SeamInput, VerifyBuffers, k1_reference
from sgl_k3_mono.k1.weights import K1LocalWeights, K1Weights

__all__ = ["K1LocalWeights", "K1Output", "K1Weights", "KDAState", "SeamInput", "VerifyBuffers", "k1_reference"]
