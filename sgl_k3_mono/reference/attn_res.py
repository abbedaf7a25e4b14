"""The attention-residual ("attn-res") seam: the bank aggregation both launches begin with.

Math of one aggregation point (per row, rows never mix):

    rows  = bank[:, 0..nvb-1] ++ prefix                      (bf16 values)
    cw    = fp32(score_norm.w) * fp32(proj.w)                 [H]
    s_j   = (v_j . cw) / sqrt(mean(v_j^2) + eps)              fp32, == proj(score_norm(v_j)) unrounded
    a     = softmax_j(s_j)                                    max subtracted first
    mix   = sum_j a_j * v_j                                   fp32
    out   = out_norm(mix)                                     -> bf16 (ISA-dependent rounding, see `aggregate`)

Both norms of a K3 aggregation point are built with `rms_norm_eps` (score norm
`*_res_norm`, out norm `input_layernorm` / `post_attention_layernorm` / `model.norm`),
so one `eps` serves both unless `out_eps` is given.

Bank life cycle (SGLang's `AttnResidual` + `AttnBankState`): the attention read of a
block-write layer (layer % block == 0) first aggregates over the `nvb` rows already
banked plus the prefix, THEN stores that prefix as bank row `nvb` and the running
residual restarts empty: the FFN read of that layer takes the attention output alone as
its prefix (with nvb+1 rows now valid). `attn_seam` / `ffn_seam` below encode exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgl_k3_mono.reference.ops import bf16, rmsnorm

ISAS = ("gfx950", "sm_90")


def _check_isa(isa: str) -> None:
    if isa not in ISAS:
        raise ValueError(f"attn_res: unknown isa {isa!r}; expected one of {ISAS}")


def add_prefix(prefix: torch.Tensor, contribution: torch.Tensor | None) -> torch.Tensor:
    """p <- bf16(fp32(p) + fp32(c)): the delayed plain add folded into a seam.

    `contribution` None means no pending add (the previous FFN wrote the stream).
    Returned in `prefix`'s dtype (bf16, or fp32 holding a bf16-representable value).
    """
    if contribution is None:
        return prefix
    if prefix.shape != contribution.shape:
        raise ValueError(
            f"add_prefix: prefix {tuple(prefix.shape)} and contribution "
            f"{tuple(contribution.shape)} differ in shape"
        )
    return bf16(prefix.float() + contribution.float()).to(prefix.dtype)


def score_weight(proj_weight: torch.Tensor, score_norm_weight: torch.Tensor) -> torch.Tensor:
    """cw = fp32(norm.w) * fp32(proj.w), [H] fp32 (SGLang caches exactly this product)."""
    return score_norm_weight.float().reshape(-1) * proj_weight.float().reshape(-1)


def aggregate(
    bank: torch.Tensor,
    nvb: int,
    prefix: torch.Tensor,
    proj_weight: torch.Tensor,
    score_norm_weight: torch.Tensor,
    out_norm_weight: torch.Tensor,
    eps: float,
    *,
    isa: str,
    out_eps: float | None = None,
) -> torch.Tensor:
    """out_norm(softmax-weighted mix of bank rows 0..nvb-1 and the prefix), [M, H].

    bank [M, NB, H] (bf16, or fp32 holding bf16 values), prefix [M, H] (already updated),
    weights as SGLang holds them (proj [1, H] or [H]). Returns fp32 holding the
    bf16-rounded normalised output.

    Where each ISA's standard path rounds (SGLang 0.5.23, `srt/layers/attn_residual.py`):
    - "gfx950": `_aggregate` -> `_aggregate_hip` (one Triton kernel, taken for every
      nvb <= 8 at H=7168): the mix stays fp32 into the output RMSNorm, one bf16 rounding
      at the end.
    - "sm_90": `_use_fast` is false below SM100 and `_use_hip_fused` false off ROCm, so
      `_aggregate_fused` runs: `_mix_fused` (score kernel + combine kernel, fp32 cw,
      global-max softmax) stores the mix as bf16, then `out_norm` (SGLang's RMSNorm CUDA
      kernel: fp32 math on the bf16 mix, one rounding) -> bf16. Two roundings.
    - nvb == 0 (layer 0's attention read): both ISAs return out_norm(prefix).
    """
    _check_isa(isa)
    if bank.dim() != 3 or prefix.dim() != 2:
        raise ValueError(
            f"aggregate: bank must be [M, NB, H] and prefix [M, H]; got "
            f"{tuple(bank.shape)} and {tuple(prefix.shape)}"
        )
    m, nb, h = bank.shape
    if tuple(prefix.shape) != (m, h):
        raise ValueError(f"aggregate: prefix {tuple(prefix.shape)} does not match bank {tuple(bank.shape)}")
    if not 0 <= nvb <= nb:
        raise ValueError(f"aggregate: nvb={nvb} outside 0..{nb} (bank rows)")
    for name, w in (("proj_weight", proj_weight), ("score_norm_weight", score_norm_weight),
                    ("out_norm_weight", out_norm_weight)):
        if w.numel() != h:
            raise ValueError(f"aggregate: {name} has {w.numel()} elements, expected H={h}")
    out_eps = eps if out_eps is None else out_eps
    if nvb == 0:
        return bf16(rmsnorm(prefix.float(), out_norm_weight, out_eps))

    mix = _mixture(bank, nvb, prefix, proj_weight, score_norm_weight, eps)
    if isa == "sm_90":
        mix = bf16(mix)
    return bf16(rmsnorm(mix, out_norm_weight, out_eps))


def _mixture(bank: torch.Tensor, nvb: int, prefix: torch.Tensor, proj_weight: torch.Tensor,
             score_norm_weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The fp32 softmax-weighted mix of bank rows 0..nvb-1 (nvb >= 1) and the prefix, [M, H]."""
    rows = torch.cat([bank[:, :nvb].float(), prefix.float().unsqueeze(1)], dim=1)  # [M, R, H]
    cw = score_weight(proj_weight, score_norm_weight)
    scores = (rows * cw).sum(-1) / torch.sqrt(rows.pow(2).mean(-1) + eps)  # [M, R]
    alpha = torch.softmax(scores, dim=-1)
    return (alpha.unsqueeze(-1) * rows).sum(1)


def stream_value(
    bank: torch.Tensor,
    nvb: int,
    prefix: torch.Tensor,
    proj_weight: torch.Tensor,
    score_norm_weight: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """The stream's value as its next read would mix it, before that read's output norm:
    what SGLang captures after a layer for a DSpark / DFlash draft (`aggregate_stream`),
    [M, H] bf16.

    The read's weights are the next layer's attention-side score weights (the model's
    output-side ones after the last layer) and `nvb` its valid bank rows. One rounding
    on both ISAs: sm_90's `_mix_fused` stores the fp32 mix as bf16, and gfx950's fused
    HIP read without an output norm rounds its fp32 mix once. nvb == 0: the prefix
    itself, as SGLang returns it.
    """
    if bank.dim() != 3 or tuple(prefix.shape) != (bank.shape[0], bank.shape[2]):
        raise ValueError(f"stream_value: bank must be [M, NB, H] and prefix [M, H]; got {tuple(bank.shape)} "
                         f"and {tuple(prefix.shape)}")
    if not 0 <= nvb <= bank.shape[1]:
        raise ValueError(f"stream_value: nvb={nvb} outside 0..{bank.shape[1]} (bank rows)")
    if nvb == 0:
        return prefix.to(torch.bfloat16)
    return _mixture(bank, nvb, prefix, proj_weight, score_norm_weight, eps).to(torch.bfloat16)


@dataclass(frozen=True)
class SeamWeights:
    """The three weights of one aggregation point, as SGLang holds them."""

    proj: torch.Tensor
    """`*_res_proj.weight` [1, H] bf16 (the score projection)."""
    score_norm: torch.Tensor
    """`*_res_norm.weight` [H] bf16."""
    out_norm: torch.Tensor
    """The read's output norm weight [H] bf16 (input_layernorm, post_attention_layernorm or model.norm)."""


@dataclass(frozen=True)
class SeamResult:
    """What an aggregation point leaves behind."""

    normed: torch.Tensor
    """[M, H] fp32 holding bf16: the normed input of the attention / FFN."""
    prefix: torch.Tensor | None
    """The running residual after the read; None after a block write (it restarted empty)."""
    bank: torch.Tensor
    """[M, NB, H] bank after the read (a new tensor when a row was written)."""
    nvb: int
    """Valid bank rows after the read."""


def attn_seam(
    bank: torch.Tensor,
    nvb: int,
    prefix: torch.Tensor,
    contribution: torch.Tensor | None,
    w: SeamWeights,
    eps: float,
    *,
    write: bool,
    isa: str,
) -> SeamResult:
    """The attention-side read of one layer: pending add, aggregate, optional block write.

    `prefix` is the running residual (the embedding at layer 0); `contribution` the
    pending plain add (None if the previous FFN wrote the stream, or at layer 0).
    """
    p = add_prefix(prefix, contribution)
    normed = aggregate(bank, nvb, p, w.proj, w.score_norm, w.out_norm, eps, isa=isa)
    if not write:
        return SeamResult(normed, p, bank, nvb)
    if nvb >= bank.shape[1]:
        raise ValueError(f"attn_seam: block write at nvb={nvb} but the bank has {bank.shape[1]} rows")
    new_bank = bank.clone()
    new_bank[:, nvb] = p.to(bank.dtype)
    return SeamResult(normed, None, new_bank, nvb + 1)


def ffn_seam(
    bank: torch.Tensor,
    nvb: int,
    prefix: torch.Tensor | None,
    attn_out: torch.Tensor,
    w: SeamWeights,
    eps: float,
    *,
    isa: str,
) -> SeamResult:
    """The FFN-side read: p <- p + a (or p = a after a block write restarted it), aggregate.

    `attn_out` is the TP-reduced attention output, bf16 values.
    """
    p = bf16(attn_out.float()).to(attn_out.dtype) if prefix is None else add_prefix(prefix, attn_out)
    normed = aggregate(bank, nvb, p, w.proj, w.score_norm, w.out_norm, eps, isa=isa)
    return SeamResult(normed, p, bank, nvb)
