"""K1's device code for sm_90 (Triton): one persistent kernel with a PHASE constexpr."""

from sgl_k3_mono.k1.triton.kernel import LAUNCH_ID, PHASES, k1_kernel

__all__ = ["LAUNCH_ID", "PHASES", "k1_kernel"]
