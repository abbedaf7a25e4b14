"""What a step needs from its surroundings, as one interface with two providers:
SGLang's loaded model and ForwardBatch (sglang_hooks.py, the served path) and a model
harness with no SGLang at all (harness.py, the GPU tests and the step benchmark)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol

import torch


@dataclass(frozen=True)
class KdaState:
    """One KDA layer's state tensors for this step (SGLang's own pools, viewed)."""

    slots: torch.Tensor
    """Integer [M] (decode: one slot a row, < 0 or pad_slot: padded row) or [1] (verify)."""
    conv_pool: torch.Tensor
    """[slots, K-1, 3P_l] bf16."""
    ssm_pool: torch.Tensor
    """[slots, h_l, V, K] fp32."""
    verify_conv: Optional[torch.Tensor] = None
    """[rows, T, K-1, 3P_l] bf16: intermediate_conv_window (verify)."""
    verify_ssm: Optional[torch.Tensor] = None
    """[rows, T, h_l, V, K] fp32: intermediate_ssm (verify)."""
    verify_index: int = 0
    """The request's scratch row (verify)."""
    pad_slot: Optional[int] = None
    """A slot index that also marks a padded row, besides < 0."""


class StepHooks(Protocol):
    """The pieces of a step that are not K1 or K2."""

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[M, H] bf16: the token embedding (TP-complete)."""

    def kda_state(self, layer: int) -> KdaState:
        """The state pools (and verify scratch) K1 reads and writes at `layer`."""

    def mla(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """[M, A_l] bf16: the TP-local gated MLA output before o_proj, for normed input h
        [M, H] bf16; writes this step's KV cache rows (every row, padded ones included)."""

    def dense(self, layer: int, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
              prefix: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer 0's FFN side as SGLang runs it: o_proj, its all-reduce, the FFN seam
        (p = prefix + a, or a after a block write), the dense MLP and its all-reduce.
        Returns (p, the reduced MLP output still to be added at layer 1's seam)."""

    def final(self, hidden: torch.Tensor) -> Any:
        """What the model's forward returns, from the final normed hidden [M, H] bf16."""
