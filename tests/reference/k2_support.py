"""Helpers shared by the K2 / MoE / MXFP4 reference tests (tests/reference has no conftest of
its own: import this module by name, tests/ is on sys.path via tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.reference.experts import DenseExperts
from sgl_k3_mono.reference.moe import MoeWeights

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def dims_of(name: str, tp: int = 1) -> K3Dims:
    cfg = json.loads((CONFIGS / name / "config.json").read_text())
    return K3Dims.from_config(cfg.get("text_config", cfg), tp=tp)


def rows(m: int, width: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(m, width, generator=torch.Generator().manual_seed(seed))).bfloat16()


def copy_moe_into_sglang(moe, w: MoeWeights) -> None:
    """Overwrite a TP=1 KimiK3MoE's (dummy) dense parameters with `w`, and its experts too
    when `w` has DenseExperts (MXFP4 experts go through SGLang's loader instead)."""
    with torch.no_grad():
        moe.shared_experts.gate_up_proj.weight.copy_(w.shared_gate_up)
        moe.shared_experts.down_proj.weight.copy_(w.shared_down)
        moe.gate.weight.copy_(w.router)
        moe.gate.e_score_correction_bias.copy_(w.router_bias)
        moe.routed_expert_down_proj.weight.copy_(w.latent_down)
        moe.routed_expert_norm.weight.copy_(w.latent_norm)
        moe.routed_expert_up_proj.weight.copy_(w.latent_up)
        if isinstance(w.experts, DenseExperts):
            moe.experts.w13_weight.copy_(w.experts.w13)
            moe.experts.w2_weight.copy_(w.experts.w2)


def same_sets(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row: do two [M, k] id tensors hold the same set?"""
    return (a.sort(-1).values.long() == b.sort(-1).values.long()).all(-1)


def topk_margin(choice: torch.Tensor, k: int) -> torch.Tensor:
    """Per row: gap between the k-th and (k+1)-th biased score (how far from a tie)."""
    top = torch.topk(choice.float(), k + 1, dim=-1).values
    return top[:, k - 1] - top[:, k]


@contextlib.contextmanager
def torch_twin_upcast():
    """Mxfp4MoEMethod's CPU post-load calls triton_kernels' Triton `upcast_from_mxfp`, which
    needs a GPU driver; swap in triton_kernels' own torch twin (same signature)."""
    import triton_kernels.numerics_details.mxfp as tkm

    real = tkm.upcast_from_mxfp
    tkm.upcast_from_mxfp = tkm.upcast_from_mxfp_torch
    try:
        yield
    finally:
        tkm.upcast_from_mxfp = real
