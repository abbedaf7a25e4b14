"""The K2 oracle: one MoE layer from the TP-local attention output to the next residual stream.

Steps (SGLang 0.5.23 standard path, reference doc section 2.2 steps C-E), all TP ranks
emulated from UNSHARDED weights so a kernel at any TP is checked on one device:

    C  a_r = bf16(o_r @ o_proj_r^T)                o_r: rank r's columns of the attention output
    D  a   = bf16(sum_r a_r), fp32, rank order      attention-TP custom all-reduce
       p   = bf16(p + a)   (p = a after a block write restarted the stream)
       h2  = post_attention_layernorm(Agg(bank[:nvb] ++ p; mlp_res_proj, mlp_res_norm))
    E  x_L = KimiK3MoE(h2, prefix_sum=p)            see reference/moe.py

The o_proj output is bf16 on both ISAs (symmetric-memory buffer, bf16 GEMM) and the
all-reduce accumulates in fp32 over ranks 0..tp-1 and rounds once (SGLang's
`custom_all_reduce.cuh` `reduce_vec`). Decode and verify rows are the same math here:
rows never mix in K2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgl_k3_mono.reference.attn_res import add_prefix, aggregate
from sgl_k3_mono.reference.moe import (Exchange, MoeRankWeights, MoeResult, MoeWeights, all_reduce, check_isa,
                                       linear, moe_from_ranks)
from sgl_k3_mono.reference.ops import bf16

ISAS = ("gfx950", "sm_90")
MODES = ("decode", "verify")
MAX_ROWS = 8


def _check_vec(name: str, t: torch.Tensor, n: int) -> None:
    if not t.is_floating_point() or t.numel() != n:
        raise ValueError(f"K2Weights.{name}: expected {n} float elements, got {t.dtype} {tuple(t.shape)}")


@dataclass(frozen=True)
class K2Weights:
    """One MoE layer's K2 weights, UNSHARDED (a TP=1 SGLang build's tensors)."""

    o_proj: torch.Tensor
    """[H, A] bf16: the attention o_proj (KDA or MLA), A = attention heads * head width."""
    mlp_res_proj: torch.Tensor
    """[1, H] bf16: FFN-side attn-res score projection."""
    mlp_res_norm: torch.Tensor
    """[H]: FFN-side attn-res score RMSNorm weight."""
    post_attention_layernorm: torch.Tensor
    """[H]: output norm of the FFN-side aggregation."""
    moe: MoeWeights
    """The latent MoE (its params.eps is the layer's rms_norm_eps)."""

    def __post_init__(self):
        h = self.moe.router.shape[1]
        if self.o_proj.dtype != torch.bfloat16 or self.o_proj.dim() != 2 or self.o_proj.shape[0] != h:
            raise ValueError(f"K2Weights.o_proj: expected bf16 [{h}, A], got "
                             f"{self.o_proj.dtype} {tuple(self.o_proj.shape)}")
        _check_vec("mlp_res_proj", self.mlp_res_proj, h)
        _check_vec("mlp_res_norm", self.mlp_res_norm, h)
        _check_vec("post_attention_layernorm", self.post_attention_layernorm, h)

    @property
    def hidden(self) -> int:
        return self.o_proj.shape[0]

    @property
    def attn_width(self) -> int:
        return self.o_proj.shape[1]

    @classmethod
    def from_sglang_layer(cls, layer) -> "K2Weights":
        """From a TP=1 `KimiK3DecoderLayer` whose mlp is a KimiK3MoE (layers 1..92)."""
        if not getattr(layer, "_is_moe_layer", False):
            raise ValueError("K2Weights.from_sglang_layer: not a MoE layer (K2 covers MoE layers only)")
        if not hasattr(layer, "mlp_res_proj"):
            raise ValueError("K2Weights.from_sglang_layer: the layer has no attention-residual seam")
        return cls(layer.self_attn.o_proj.weight.data, layer.mlp_res_proj.weight.data,
                   layer.mlp_res_norm.weight.data, layer.post_attention_layernorm.weight.data,
                   MoeWeights.from_sglang(layer.mlp))

    @classmethod
    def random(cls, dims, *, seed: int, attn: str = "kda", expert_format: str = "bf16",
               experts=None) -> "K2Weights":
        """Realistic random weights for `dims` (a K3Dims). `experts` overrides the routed
        experts, e.g. a lazy `SeededExperts` at real size; otherwise all E are built."""
        widths = {"kda": dims.kda_heads * dims.kda_head_dim, "mla": dims.mla_heads * dims.mla_v_head_dim}
        if attn not in widths:
            raise ValueError(f"K2Weights.random: attn must be 'kda' or 'mla', got {attn!r}")
        g = torch.Generator().manual_seed(seed)
        h, a = dims.hidden, widths[attn]
        return cls(
            o_proj=(torch.randn(h, a, generator=g) / a ** 0.5).bfloat16(),
            mlp_res_proj=(torch.randn(1, h, generator=g) / h ** 0.5).bfloat16(),
            mlp_res_norm=(1 + 0.1 * torch.randn(h, generator=g)).bfloat16(),
            post_attention_layernorm=(1 + 0.1 * torch.randn(h, generator=g)).bfloat16(),
            moe=MoeWeights.random(dims, seed=seed + 7, experts=experts, expert_format=expert_format),
        )

    def shard(self, rank: int, tp: int) -> "K2RankWeights":
        """Rank `rank` of `tp`: o_proj is RowParallel (input columns), seam weights replicated."""
        if self.attn_width % tp:
            raise ValueError(f"K2Weights.shard: attention width {self.attn_width} does not split over tp={tp}")
        al = self.attn_width // tp
        return K2RankWeights(self.o_proj[:, rank * al:(rank + 1) * al], self.mlp_res_proj,
                             self.mlp_res_norm, self.post_attention_layernorm, self.moe.shard(rank, tp))


@dataclass(frozen=True)
class K2RankWeights:
    """The tensors one TP rank's K2 reads."""

    o_proj: torch.Tensor
    """[H, A/tp] bf16: this rank's o_proj columns."""
    mlp_res_proj: torch.Tensor
    """[1, H] (replicated)."""
    mlp_res_norm: torch.Tensor
    """[H] (replicated)."""
    post_attention_layernorm: torch.Tensor
    """[H] (replicated)."""
    moe: MoeRankWeights
    """This rank's MoE tensors."""


@dataclass(frozen=True)
class K2Result:
    """K2's output and the intermediates a test compares (bf16 values in fp32 unless stated)."""

    out: torch.Tensor
    """[M, H] bf16 tensor: the next layer's residual stream x_L."""
    attn_partials: torch.Tensor
    """[tp, M, H]: each rank's o_proj partial."""
    attn_reduced: torch.Tensor
    """[M, H]: the all-reduced attention output a."""
    prefix: torch.Tensor
    """[M, H]: the running residual after p <- p + a (what the MoE adds at the end)."""
    h2: torch.Tensor
    """[M, H]: the normed FFN input."""
    moe: MoeResult
    """Router logits, routing, partials, latent, shared (see MoeResult)."""

    @property
    def topk_ids(self) -> torch.Tensor:
        return self.moe.topk_ids

    @property
    def topk_weights(self) -> torch.Tensor:
        return self.moe.topk_weights


def _check_act(name: str, t: torch.Tensor, shape: tuple) -> None:
    if t.dtype != torch.bfloat16 or tuple(t.shape) != shape:
        raise ValueError(f"k2_reference: {name} must be bf16 {shape}, got {t.dtype} {tuple(t.shape)}")


def k2_reference(attn_out: torch.Tensor, weights: K2Weights, *, tp: int, bank: torch.Tensor, nvb: int,
                 prefix: torch.Tensor | None, isa: str, mode: str = "decode", choose=None) -> K2Result:
    """K2 for M = 1..8 rows at TP `tp` on `isa` ("gfx950" or "sm_90").

    attn_out [M, A] bf16: the attention output before o_proj, all ranks' TP-local
    outputs side by side (rank r's is columns [r*A/tp, (r+1)*A/tp)). bank [M, NB, H]
    bf16 with `nvb` valid rows at this FFN read; prefix [M, H] bf16 the running
    residual, or None when this layer's attention seam was a block write. `choose`:
    see `reference.moe.route`.
    """
    check_isa(isa, ISAS)
    if mode not in MODES:
        raise ValueError(f"k2_reference: unknown mode {mode!r}; expected one of {MODES}")
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"k2_reference: tp must be a positive int, got {tp!r}")
    if attn_out.dim() != 2 or not 1 <= attn_out.shape[0] <= MAX_ROWS:
        raise ValueError(f"k2_reference: attn_out must be [M, A] with M in 1..{MAX_ROWS}, "
                         f"got {tuple(attn_out.shape)}")
    m, h = attn_out.shape[0], weights.hidden
    _check_act("attn_out", attn_out, (m, weights.attn_width))
    if bank.dim() != 3:
        raise ValueError(f"k2_reference: bank must be [M, NB, H], got {tuple(bank.shape)}")
    _check_act("bank", bank, (m, bank.shape[1], h))
    if prefix is not None:
        _check_act("prefix", prefix, (m, h))
    ranks = [weights.shard(r, tp) for r in range(tp)]  # validates every width against tp
    al = weights.attn_width // tp
    return k2_from_ranks([attn_out[:, r * al:(r + 1) * al] for r in range(tp)], ranks, bank=bank, nvb=nvb,
                         prefix=prefix, isa=isa, choose=choose)


def k2_from_ranks(attn_cols: list[torch.Tensor], ranks: list[K2RankWeights], *, bank: torch.Tensor, nvb: int,
                  prefix: torch.Tensor | None, isa: str, choose=None,
                  exchange: Exchange = lambda parts: parts) -> K2Result:
    """k2_reference over the ranks held here (`ranks` in rank order, `attn_cols` each one's
    TP-local attention output; the replicated tensors read from the first), every rank's
    partials formed by `exchange` (see `reference.moe.Exchange`): the identity with every
    rank here; `all_gather_exchange(group)` with one rank a process, where a rank holds only
    its own shard (a real TP-8 layer's experts do not fit one GPU eight times)."""
    w = ranks[0]
    partials = exchange(torch.stack([bf16(linear(o.float(), rw.o_proj)) for o, rw in zip(attn_cols, ranks)]))
    a = all_reduce(partials)
    p = a if prefix is None else add_prefix(prefix.float(), a)
    h2 = aggregate(bank, nvb, p, w.mlp_res_proj, w.mlp_res_norm, w.post_attention_layernorm, w.moe.params.eps,
                   isa=isa)
    moe = moe_from_ranks(h2, p, [rw.moe for rw in ranks], isa=isa, choose=choose, exchange=exchange)
    return K2Result(moe.out.bfloat16(), partials, a, p, bf16(h2.float()), moe)


def all_gather_exchange(group=None) -> Exchange:
    """An Exchange for one rank a process: this rank's partials [1, M, X] gathered from every
    rank of `group` (torch.distributed; NCCL on GPUs, gloo on CPUs) into [tp, M, X], rank
    order, the values exact (bf16 partials held in fp32)."""
    import torch.distributed as dist

    def gather(parts: torch.Tensor) -> torch.Tensor:
        if parts.shape[0] != 1:
            raise ValueError(f"all_gather_exchange: one rank's partials a process, got {parts.shape[0]}")
        out = [torch.empty_like(parts[0]) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, parts[0].contiguous(), group=group)
        return torch.stack(out)

    return gather
