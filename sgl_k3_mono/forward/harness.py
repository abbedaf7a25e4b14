"""A model harness with no SGLang: random Kimi-K3-shaped weights, the step's hooks in
plain torch on the device, and the reference decode step on the same weights.

The launch-level step (K1/K2 launches + these hooks) and `reference.step.decode_step`
read the same weights, so many decode steps can be compared on a GPU machine that has
torch and Triton but no SGLang. The hooks are fixed-shape (the MLA cache is a
[slots, max_len, C] buffer with a lengths tensor), so a whole step can be captured in a
CUDA graph and replayed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.forward.hooks import KdaState
from sgl_k3_mono.forward.layers import LayerRun, StepModel
from sgl_k3_mono.k1.host import K1Views
from sgl_k3_mono.k1.weights import K1Weights
from sgl_k3_mono.reference.attn_res import SeamWeights, ffn_seam
from sgl_k3_mono.reference.mla import MLAWeights, absorbed_query, gated_output, latent_row
from sgl_k3_mono.reference.ops import bf16
from sgl_k3_mono.reference.step import DenseLayer, LayerWeights, ModelWeights, dense_partial


@dataclass(frozen=True)
class HarnessShape:
    """A Kimi-K3-shaped model to build at random."""

    name: str
    dims: K3Dims
    """The model as one TP rank sees it (a TP-1 model of per-rank widths)."""
    mla: tuple[int, int, int, int, int]
    """q_lora, kv_lora, qk_nope, qk_rope, v_head_dim."""
    expert_format: str = "bf16"
    """"bf16" or "mxfp4" routed experts."""


def shape(name: str, *, experts: int = 128, layers: int = 4, vocab: int = 8192,
          expert_format: str = "bf16", tp: int = 1) -> HarnessShape:
    """"tiny": configs/k3-tiny; "tiny8": the same with 8 KDA and 8 MLA heads and twice the
    expert intermediate (the step at TP 8: a head a rank, 32 of I a rank). "real": one
    TP-8 rank's real widths (H 7168, 12 KDA and 12 MLA heads, latent 3584, expert
    intermediate 384, shared 768, dense 4224) with `layers` layers in the tiny schedule
    (KDA, then MLA last; block writes every 2 layers), `experts` routed experts and a
    `vocab`-token vocabulary (both reduced: they set weight bytes, not widths); with `tp`,
    the model whose TP-`tp` ranks have those widths (`bench step --tp`). "full": those
    widths in Kimi-K3's own schedule, all of its layers (93: layer 0 dense, MLA at 3, 7,
    .., 91 and 92, attn-res blocks of 12); `layers` is not read."""
    from sgl_k3_mono.configs import load_config

    if name in ("tiny", "tiny8"):
        tc = load_config("k3-tiny")["text_config"]
        d = K3Dims.from_config(load_config("k3-tiny"))
        if name == "tiny8":  # a head a rank at TP 8 (issue 7's step), and I / 8 a multiple of K2's 32
            d = dataclasses.replace(d, kda_heads=8, mla_heads=8, expert_inter=2 * d.expert_inter)
    elif name == "real":
        from sgl_k3_mono.k2.synthetic import rank_dims

        if tp not in (1, 2, 4, 8):
            raise ValueError(f"harness shape 'real': tp {tp} does not divide Kimi-K3's 8-way rank widths")
        base = rank_dims(8 // tp)
        tc = load_config("kimi-k3")["text_config"]
        d = dataclasses.replace(base, layers=layers, kda_layers=tuple(range(layers - 1)),
                                mla_layers=(layers - 1,), attn_res_block=2, experts=experts, vocab=vocab,
                                dense_inter=base.dense_inter // 8 * tp)
    elif name == "full":
        from sgl_k3_mono.k2.synthetic import rank_dims

        if tp != 1:
            raise ValueError("harness shape 'full': one TP-8 rank's widths at TP 1 only")
        base = rank_dims(8)
        tc = load_config("kimi-k3")["text_config"]
        d = dataclasses.replace(base, experts=experts, vocab=vocab, dense_inter=base.dense_inter // 8)
    else:
        raise ValueError(f"harness shape {name!r}: 'tiny', 'tiny8', 'real' or 'full'")
    mla = tuple(int(tc[k]) for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                     "v_head_dim"))
    return HarnessShape(name, d, mla, expert_format)


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, device=g.device)


def _lin(g, rows, cols):
    return (_randn(g, rows, cols) / cols ** 0.5).bfloat16()


def _near_one(g, n):
    return (1 + 0.1 * _randn(g, n)).bfloat16()


def _seam(g, h) -> SeamWeights:
    return SeamWeights((_randn(g, 1, h) * 0.05).bfloat16(), _near_one(g, h), _near_one(g, h))


def random_weights(s: HarnessShape, *, seed: int = 0, device="cpu", share_experts: bool = False) -> ModelWeights:
    """Unsharded random weights on `device` (the CPU's numbers for a seed are not another
    device's), in the reference step's form. `share_experts`: every MoE layer holds the first
    one's routed expert store (same tensors), its other weights its own: how the full model
    fits one GPU (a TP-8 rank's 896 bf16 experts are 7.4 GB a layer). A layer still reads its
    experts from HBM: its own router picks them, and between two MoE layers far more bytes
    than L2 holds pass through it."""
    from sgl_k3_mono.k2.synthetic import random_k2_weights

    d = s.dims
    g = torch.Generator(device=device).manual_seed(seed)
    h = d.hidden
    shared = None
    q_lora, kv_lora, nope, rope, v = s.mla
    layers = []
    for i in range(d.layers):
        seam = _seam(g, h)
        k1 = mla = None
        if d.is_kda(i):
            k1 = dataclasses.replace(K1Weights.random(h, d.kda_heads, d.kda_head_dim, d.conv_width,
                                                      lower_bound=d.gate_lower_bound, seed=seed + 100 + i,
                                                      device=device), seam=seam)
            attn_width = d.kda_heads * d.kda_head_dim
        else:
            mla = MLAWeights(_lin(g, q_lora + kv_lora + rope, h), _near_one(g, q_lora), _near_one(g, kv_lora),
                             _lin(g, d.mla_heads * (nope + rope), q_lora), _lin(g, d.mla_heads * (nope + v), kv_lora),
                             _lin(g, d.mla_heads * v, h), d.mla_heads, nope, rope, v, d.rms_eps)
            attn_width = d.mla_heads * v
        k2 = dense = None
        if d.is_moe(i):
            k2 = random_k2_weights(d, fmt=s.expert_format, device=device, seed=seed + 1000 + i,
                                   attn_width=attn_width, experts=shared)
            if share_experts:
                shared = k2.moe.experts
        else:
            dense = DenseLayer(_lin(g, h, attn_width), _seam(g, h), _lin(g, 2 * d.dense_inter, h),
                               _lin(g, h, d.dense_inter))
        layers.append(LayerWeights(k1, mla, seam, k2, dense))
    return ModelWeights(d, _lin(g, d.vocab, h) * 8, tuple(layers), _seam(g, h), _lin(g, d.vocab, h))


def to_device(obj: Any, device) -> Any:
    """A copy of a (nested, frozen) dataclass with every tensor on `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return type(obj)(**{f.name: to_device(getattr(obj, f.name), device) for f in dataclasses.fields(obj)
                            if f.init})
    if isinstance(obj, tuple):
        return tuple(to_device(x, device) for x in obj)
    return obj


def step_model(w: ModelWeights, *, isa: str = "sm_90", rank: int = 0, tp: int = 1) -> StepModel:
    """The launch step's view of `w` (weights already on the device), as rank `rank` of TP `tp`."""
    d = w.dims
    runs = []
    for i, lw in enumerate(w.layers):
        k1 = K1Views.from_local(lw.k1.shard(rank, tp)) if lw.k1 is not None else None
        k2 = lw.k2.shard(rank, tp) if lw.k2 is not None else None
        runs.append(LayerRun(index=i, attention="kda" if k1 is not None else "mla", k1=k1, k2=k2,
                             attn_seam=lw.attn_seam, write=d.is_block_write(i), nvb=d.bank_rows_at_attn(i)))
    return StepModel(tuple(runs), w.final_seam, d.rms_eps, isa, d.hidden, d.bank_rows())


@dataclass
class HarnessState:
    """The device state a sequence of steps carries (SGLang's pools, stood in for)."""

    kda: dict[int, KdaState]
    """KDA layer -> its pools ([slots, K-1, 3P] bf16, [slots, h, V, K] fp32) and the step's slots."""
    mla: dict[int, torch.Tensor]
    """MLA layer -> latent cache [slots, max_len, kv_lora + rope] bf16."""
    lengths: torch.Tensor
    """int64 [slots]: tokens already cached per slot (shared by the MLA layers)."""

    @classmethod
    def fresh(cls, w: ModelWeights, slots: torch.Tensor, n_slots: int, max_len: int, device, *,
              tp: int = 1) -> "HarnessState":
        d = w.dims
        hl = d.kda_heads // tp
        p = hl * d.kda_head_dim
        kda = {i: KdaState(slots=slots.to(device),
                           conv_pool=torch.zeros(n_slots, d.conv_width - 1, 3 * p, dtype=torch.bfloat16, device=device),
                           ssm_pool=torch.zeros(n_slots, hl, d.kda_head_dim, d.kda_head_dim, device=device))
               for i in d.kda_layers}
        mla = {}
        for i in d.mla_layers:
            m = w.layers[i].mla
            mla[i] = torch.zeros(n_slots, max_len, m.kv_lora + m.rope, dtype=torch.bfloat16, device=device)
        return cls(kda, mla, torch.zeros(n_slots, dtype=torch.int64, device=device))


class HarnessHooks:
    """StepHooks in plain torch on the device: fixed shapes, no host reads (capturable).

    At TP > 1 (`group`: the torch.distributed group of the `tp` ranks) each rank runs its
    heads of MLA and its rows of layer 0's MLP; the reduces gather every rank's partial
    and sum them in rank order in fp32 (as the reference and SGLang's custom all-reduce
    do, so all ranks hold the same bits), and the vocab-parallel logits are gathered."""

    def __init__(self, w: ModelWeights, state: HarnessState, slots: torch.Tensor, *, isa: str = "sm_90",
                 rank: int = 0, tp: int = 1, group=None):
        self.w, self.state, self.isa = w, state, isa
        self.rank, self.tp, self.group = rank, tp, group
        self.slots = slots.to(w.embed.device).long()
        # The reference math multiplies in fp32 (`w.float()`): the weights are widened once
        # here, not on every step (the same values, so the same products; a per-step widening
        # copy of every projection cost the bench step ~0.7 ms at real width)
        self.mla_w = {i: _widened(w.layers[i].mla.shard(rank, tp)) for i in w.dims.mla_layers}
        self.dense_w = {}
        for i, lw in enumerate(w.layers):
            if lw.dense is not None:  # o_proj is row parallel: this rank's columns, contiguous
                pl = lw.dense.o_proj.shape[1] // tp
                d = _widened(lw.dense)
                self.dense_w[i] = dataclasses.replace(d, o_proj=d.o_proj[:, rank * pl : (rank + 1) * pl].contiguous())
        vl = w.lm_head.shape[0] // tp
        self.lm_head = w.lm_head[rank * vl : (rank + 1) * vl].float()

    def _gather(self, part: torch.Tensor) -> torch.Tensor:
        """Every rank's `part`, stacked in rank order [tp, ...]."""
        import torch.distributed as dist

        parts = part.new_empty((self.tp, *part.shape))
        dist.all_gather_into_tensor(parts, part.contiguous(), group=self.group)
        return parts

    def _reduce(self, part: torch.Tensor) -> torch.Tensor:
        """bf16(fp32 rank-order sum of every rank's bf16 partial)."""
        if self.tp == 1:
            return part
        parts = self._gather(part)
        acc = parts[0].float()
        for r in range(1, self.tp):
            acc = acc + parts[r].float()
        return acc.to(part.dtype)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.w.embed.index_select(0, input_ids)

    def kda_state(self, layer: int) -> KdaState:
        return self.state.kda[layer]

    def mla(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        w = self.mla_w[layer]
        cache = self.state.mla[layer]
        _, row = latent_row(w, h)
        pos = self.state.lengths.index_select(0, self.slots)
        cache.index_put_((self.slots, pos), row.to(cache.dtype))
        rows = cache.index_select(0, self.slots).float()  # [M, T, C]
        valid = torch.arange(cache.shape[1], device=h.device)[None, :] <= pos[:, None]
        return mla_masked(w, h, rows, valid).to(torch.bfloat16)

    def dense(self, layer, attn_out, bank, nvb, prefix):
        d, dims = self.dense_w[layer], self.w.dims
        a = self._reduce(bf16(attn_out.float() @ d.o_proj.t()).to(torch.bfloat16)).float()
        fs = ffn_seam(bank, nvb, prefix, a, d.ffn_seam, dims.rms_eps, isa=self.isa)
        add = self._reduce(dense_partial(d, fs.normed, dims, self.tp, self.rank).to(torch.bfloat16))
        return fs.prefix.to(torch.bfloat16), add

    def final(self, hidden: torch.Tensor) -> torch.Tensor:
        self.state.lengths.index_add_(0, self.slots, torch.ones_like(self.slots))
        local = bf16(hidden.float() @ self.lm_head.t())
        if self.tp == 1:
            return local
        return self._gather(local).permute(1, 0, 2).reshape(local.shape[0], -1)


def _widened(obj):
    """A weight dataclass with its bf16 tensors as fp32 (exact), other fields as they are."""
    return dataclasses.replace(obj, **{f.name: getattr(obj, f.name).float() for f in dataclasses.fields(obj)
                                       if isinstance(getattr(obj, f.name), torch.Tensor)
                                       and getattr(obj, f.name).dtype == torch.bfloat16})


def mla_masked(w: MLAWeights, h: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """`reference.mla.mla_decode` over a fixed-length cache with a validity mask
    (rows [M, T, C] fp32; valid [M, T]): the same math, batched."""
    q_lat, q_pe, w_vc = absorbed_query(w, h)
    m, hl = h.shape[0], w.heads
    kv, k_pe = rows[..., : w.kv_lora], rows[..., w.kv_lora :]
    s = (torch.einsum("mhl,mtl->mht", q_lat, kv) + torch.einsum("mhr,mtr->mht", q_pe, k_pe)) * (w.nope + w.rope) ** -0.5
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    lat = torch.einsum("mht,mtl->mhl", torch.softmax(s, -1), kv)
    return gated_output(w, h, torch.einsum("mhl,hvl->mhv", lat, w_vc).reshape(m, hl * w.v))
