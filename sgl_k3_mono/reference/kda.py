"""One-token Kimi Delta Attention (KDA) math, in the layouts SGLang 0.5.23 keeps.

Every function works on a leading batch of independent (row, head) problems and
returns fp32. Rounding to bf16 is the caller's choice (`ops.bf16`), except where the
standard path rounds inside the op itself (the conv output), which is done here.

State layouts (SGLang `KimiLinearStateShape`, `MambaPool`):
- conv state: [slots, K-1, C] bf16 with C = 3*P_l channels in q|k|v order; window row
  0 is the oldest input, row K-2 the newest. The kernels see it transposed
  ([slots, C, K-1]); that is a view, not another layout.
- recurrent state: [slots, h, V, K] fp32, K contiguous: `state[slot, head, v, k]`.
"""

from __future__ import annotations

import torch

from sgl_k3_mono.reference.ops import bf16

L2_EPS = 1e-6
"""Epsilon of the in-kernel q/k L2 norm (x / sqrt(sum x^2 + eps))."""
O_NORM_EPS = 1e-5
"""Epsilon of the gated output RMSNorm (FusedRMSNormGated's default; K3 does not pass one)."""
SOFTPLUS_THRESHOLD = 20.0
"""Above this the unbounded gate's softplus is the identity."""


def conv_update(window: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv of width K for one new input, then SiLU.

    window [N, K-1, C] (bf16 values, oldest first), x [N, C] (bf16 values),
    weight [C, K] fp32 (tap K-1 multiplies the new input). Returns
    (y [N, C] fp32 holding bf16, new window [N, K-1, C] in window's dtype).
    The taps are summed oldest first in fp32, as both SGLang kernels do.
    """
    kw = weight.shape[1]
    if window.shape[-2] != kw - 1:
        raise ValueError(f"conv_update: window has {window.shape[-2]} rows, expected K-1={kw - 1}")
    w = weight.float()
    taps = torch.cat([window.float(), x.float().unsqueeze(-2)], dim=-2)  # [N, K, C]
    acc = taps[..., 0, :] * w[:, 0]
    for j in range(1, kw):
        acc = acc + taps[..., j, :] * w[:, j]
    y = bf16(acc / (1.0 + torch.exp(-acc)))
    return y, taps[..., 1:, :].to(window.dtype)


def log_decay(f: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float | None) -> torch.Tensor:
    """Per-K log decay g, [N, h, K] fp32; the state decays by exp(g).

    f [N, h, K] is the f_b output (bf16 values), a_log [h] fp32, dt_bias [h, K] fp32.
    Safe gate (K3, lower_bound=-5): g = lb * sigmoid(exp(A_log) * (f + dt_bias)), so
    the per-token decay never goes below exp(lb). Unbounded: g = -exp(A_log)*softplus(f + dt_bias).
    """
    x = f.float() + dt_bias.float()
    a = torch.exp(a_log.float()).unsqueeze(-1)
    if lower_bound is not None:
        return lower_bound * torch.sigmoid(a * x)
    softplus = torch.where(x <= SOFTPLUS_THRESHOLD, torch.log1p(torch.exp(x)), x)
    return -a * softplus


def l2norm(x: torch.Tensor, eps: float = L2_EPS) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim, fp32."""
    x = x.float()
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def delta_rule_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One gated delta-rule step on S[v, k] (K contiguous), fp32.

    state [N, h, V, K]; q, k [N, h, K] (normalised, q already scaled); v [N, h, V];
    decay [N, h, K] = exp(g); beta [N, h]. Returns (o [N, h, V] unrounded, new state):
        S <- S * decay[k];  v' = beta (v - S k);  S <- S + v' k^T;  o = S q
    """
    s = state.float() * decay.unsqueeze(-2)
    hk = (s * k.unsqueeze(-2)).sum(-1)
    v_new = beta.unsqueeze(-1) * (v.float() - hk)
    s = s + v_new.unsqueeze(-1) * k.unsqueeze(-2)
    o = (s * q.unsqueeze(-2)).sum(-1)
    return o, s


def gated_rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor,
    gate: torch.Tensor,
    eps: float = O_NORM_EPS,
    activation: str = "sigmoid",
) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w * act(gate) over the last dim (one head), fp32.

    K3's o_norm is FusedRMSNormGated(activation="sigmoid"); "silu" is the gate of
    fla's `rms_norm_ref` (norm before gate), kept for comparing against it.
    """
    x = x.float()
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    g = gate.float()
    if activation == "sigmoid":
        return y * torch.sigmoid(g)
    if activation in ("silu", "swish"):
        return y * g * torch.sigmoid(g)
    raise ValueError(f"gated_rmsnorm: unknown activation {activation!r}")
