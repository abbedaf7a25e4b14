"""Elementwise pieces shared by the K1 and K2 references.

Every function takes and returns torch tensors; `bf16` marks the places where SGLang's
standard path stores a bf16 tensor, so a reference rounds exactly there and nowhere else.
"""

from __future__ import annotations

import torch


def bf16(x: torch.Tensor) -> torch.Tensor:
    """Round to bf16 and come back to fp32: a stored bf16 intermediate."""
    return x.to(torch.bfloat16).to(torch.float32)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32: x * rsqrt(mean(x^2) + eps) * w (w read as stored, then fp32)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def situ(gate: torch.Tensor, up: torch.Tensor, beta: float, linear_beta: float) -> torch.Tensor:
    """Kimi-K3's SiTU GLU: beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta), fp32."""
    g, u = gate.float(), up.float()
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * (linear_beta * torch.tanh(u / linear_beta))


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    g = gate.float()
    return g * torch.sigmoid(g) * up.float()
