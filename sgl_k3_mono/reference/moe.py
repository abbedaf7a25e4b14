"""Kimi-K3 latent MoE (`KimiK3MoE`) in plain torch, every TP rank emulated on one device.

Per rank r of tp, with h2 the normed FFN input [M, H] (bf16 values):

    front_r   = h2 @ [shared gate_up_r | router | latent down]^T     one GEMM (SGLang's _front_w)
    ids, w    = top_k(sigmoid(logits) + bias), w = sigmoid(logits)[ids] / (sum + 1e-20)
    shared_r  = bf16(bf16(SiTU(gate_up_r)) @ shared_down_r^T)          partial over S/tp
    latent_r  = bf16(sum_k w_k * bf16(W2_r SiTU(W13_r x)))             partial over I/tp, x = routed input
    latent, shared = bf16(sum over r in rank order, fp32)              ONE all-reduce of [latent | shared]
    out       = bf16(bf16(norm(latent)) @ up^T)                        replicated
    x_L       = bf16(bf16(out + shared) + prefix)                      `_add3`

Where SGLang 0.5.23's standard path rounds, per `isa`:
- "gfx950" (`_forward_fused`, `_front_fp32` False on HIP): the merged front GEMM stores
  bf16, so gate_up, router logits and routed input are all bf16-rounded. Top-k (AITER,
  fp32 bias) upcasts the bf16 logits to fp32. AITER drops routed_scaling_factor: != 1 is
  refused.
- "sm_90" (`_forward_fused`, `_front_fp32` True off HIP; `k3_ar_fusion` is off below SM100
  so the single-collective branch runs and alt_stream is unused there): the front is
  fp32, so gate_up (into the fp32-in/bf16-out SiTU kernel) and router logits stay fp32;
  routed input is rounded to bf16. The SM90 cutlass MXFP4 runner scales its bf16 output
  by routed_scaling_factor (one more rounding when != 1).
- "sglang_cpu" (only to compare with SGLang on the CPU: `_forward_unfused`, three
  separate bf16 GEMMs, MoEGate `F.linear` bf16 logits, the torch.compile'd
  `biased_grouped_topk_impl`, which ranks on the fp32 sigmoid of the bf16 logits but
  weights with the bf16-stored sigmoid, and `moe_forward_native`, which rounds each
  expert's gate_up to bf16 before SiTU). SGLang's CPU path drops routed_scaling_factor:
  != 1 is refused.

Every GEMM is bf16 x bf16 with an fp32 result (`linear`: accumulated exactly, rounded
once), then rounded to bf16 wherever SGLang stores bf16.
The GPU expert runners (AITER a16w4, cutlass) fuse SiTU into the first GEMM's epilogue,
so the reference does not round gate/up before SiTU there; it rounds the activation and
each expert's output to bf16 and sums the k weighted outputs in fp32 in top-k slot order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from sgl_k3_mono.reference.experts import DenseExperts, ExpertStore, Mxfp4Experts
from sgl_k3_mono.reference.ops import bf16, rmsnorm, situ

ISAS = ("gfx950", "sm_90", "sglang_cpu")
RENORM_EPS = 1e-20
"""Added to the top-k weight sum before dividing (SGLang's `_RENORMALIZE_SUM_EPSILON`)."""


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight^T as an fp32 GEMM with an ideal accumulator: float64 products and sums,
    rounded once to fp32. A kernel's fp32 accumulation order differs anyway; this keeps the
    oracle independent of M, of TP and of torch's CPU blocking (rows are bitwise independent)."""
    return (x.double() @ weight.double().t()).float()


def check_isa(isa: str, allowed=ISAS) -> None:
    if isa not in allowed:
        raise ValueError(f"unknown isa {isa!r}; expected one of {allowed}")


@dataclass(frozen=True)
class MoeParams:
    """The scalars of one K3 MoE block."""

    top_k: int
    """Experts per token (16)."""
    renormalize: bool
    """Top-k weights divided by their sum (+1e-20)."""
    routed_scaling: float
    """routed_scaling_factor (1.0 for K3)."""
    situ_beta: float
    """SiTU gate softcap (4.0)."""
    situ_linear_beta: float
    """SiTU up softcap (25.0)."""
    eps: float
    """Latent RMSNorm epsilon (rms_norm_eps)."""

    @classmethod
    def from_dims(cls, dims) -> "MoeParams":
        if dims.expert_groups != 1 or dims.router_activation != "sigmoid":
            raise ValueError(f"MoeParams: only 1 expert group with sigmoid scores is modelled, got "
                             f"{dims.expert_groups} groups, {dims.router_activation!r}")
        if dims.situ_beta is None or dims.situ_linear_beta is None:
            raise ValueError("MoeParams: the reference models SiTU experts only")
        return cls(dims.top_k, dims.renormalize, dims.routed_scaling, float(dims.situ_beta),
                   float(dims.situ_linear_beta), dims.rms_eps)


def _bf16_weight(name: str, t: torch.Tensor, shape: tuple) -> None:
    if t.dtype != torch.bfloat16:
        raise ValueError(f"MoeWeights.{name}: expected bf16, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"MoeWeights.{name}: expected shape {shape}, got {tuple(t.shape)}")


@dataclass(frozen=True)
class MoeWeights:
    """One MoE layer's weights, UNSHARDED (as a TP=1 SGLang build holds them)."""

    shared_gate_up: torch.Tensor
    """[2*S, H] bf16: shared gate rows [0, S), up rows [S, 2S) (S = I * n_shared)."""
    shared_down: torch.Tensor
    """[H, S] bf16."""
    router: torch.Tensor
    """[E, H] bf16 (`gate.weight`, replicated)."""
    router_bias: torch.Tensor
    """[E] fp32 `e_score_correction_bias`: added to the scores for ranking only."""
    latent_down: torch.Tensor
    """[L, H] bf16 `routed_expert_down_proj.weight` (replicated)."""
    latent_norm: torch.Tensor | None
    """[L] `routed_expert_norm.weight`; None when latent_moe_use_norm is false."""
    latent_up: torch.Tensor
    """[H, L] bf16 `routed_expert_up_proj.weight` (replicated)."""
    experts: ExpertStore
    """Routed experts (global intermediate)."""
    params: MoeParams
    """Scalars."""

    def __post_init__(self):
        e, h = self.router.shape
        lat, s = self.latent_down.shape[0], self.shared_down.shape[1]
        _bf16_weight("router", self.router, (e, h))
        _bf16_weight("shared_gate_up", self.shared_gate_up, (2 * s, h))
        _bf16_weight("shared_down", self.shared_down, (h, s))
        _bf16_weight("latent_down", self.latent_down, (lat, h))
        _bf16_weight("latent_up", self.latent_up, (h, lat))
        if self.router_bias.dtype != torch.float32 or tuple(self.router_bias.shape) != (e,):
            raise ValueError(f"MoeWeights.router_bias: expected fp32 [{e}], got "
                             f"{self.router_bias.dtype} {tuple(self.router_bias.shape)}")
        if self.latent_norm is not None and self.latent_norm.numel() != lat:
            raise ValueError(f"MoeWeights.latent_norm: expected {lat} elements")
        if (self.experts.num_experts, self.experts.latent) != (e, lat):
            raise ValueError(f"MoeWeights.experts: {self.experts.num_experts} experts of latent "
                             f"{self.experts.latent}, expected {e} / {lat}")
        if not 1 <= self.params.top_k <= e:
            raise ValueError(f"MoeWeights: top_k {self.params.top_k} outside 1..{e}")

    @property
    def shared_inter(self) -> int:
        return self.shared_down.shape[1]

    @classmethod
    def from_sglang(cls, moe) -> "MoeWeights":
        """From a TP=1 `KimiK3MoE`: `_front_w` when merged, else the separate modules."""
        if getattr(moe, "tp_size", 1) != 1:
            raise ValueError(f"MoeWeights.from_sglang: the module is one rank of tp={moe.tp_size}; "
                             "its tensors are shards, not the unsharded weights")
        if moe.shared_experts is None or not moe.use_latent_moe:
            raise ValueError("MoeWeights.from_sglang: only latent MoE with shared experts is modelled")
        if moe._front_w is not None:
            if len(moe._front_sizes) != 3:
                raise ValueError("MoeWeights.from_sglang: _front_w is the EP pair, not the 3-way front")
            gate_up, router, down = torch.split(moe._front_w, moe._front_sizes, dim=0)
        else:
            gate_up = moe.shared_experts.gate_up_proj.weight
            router, down = moe.gate.weight, moe.routed_expert_down_proj.weight
        ex = moe.experts
        if ex.w13_weight.dtype == torch.uint8:
            qm = ex.quant_method
            # Marlin, triton_kernels and the SM90/SM120 cutlass runners repack after loading
            # without an is_shuffled tag; AITER's preshuffle is tagged, its kind read from the
            # environment as SGLang read it at load (the store reads it in place).
            if getattr(qm, "_fi_kernel", None) or getattr(qm, "use_marlin", False) \
                    or getattr(qm, "use_triton_kernels", False):
                raise ValueError("MoeWeights.from_sglang: these MXFP4 experts were repacked for "
                                 f"{type(qm).__name__} ({getattr(qm, '_fi_kernel', None) or 'marlin/triton_kernels'}); "
                                 "only the plain loaded layout is decoded")
            layout = "plain"
            if getattr(ex.w13_weight, "is_shuffled", False) or getattr(ex.w2_weight, "is_shuffled", False):
                import os

                from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout

                layout = AiterLayout.from_env(ex.intermediate_size_per_partition, os.environ).kind
            store = Mxfp4Experts.from_sglang(ex.w13_weight.data, ex.w13_weight_scale.data, ex.w2_weight.data,
                                             ex.w2_weight_scale.data, ex.intermediate_size_per_partition, layout)
        else:
            store = DenseExperts(ex.w13_weight.data, ex.w2_weight.data)
        cfg, act = moe.topk.topk_config, moe.shared_experts.act_fn
        norm = moe.routed_expert_norm
        params = MoeParams(cfg.top_k, cfg.renormalize, float(moe.routed_scaling_factor or 1.0),
                           act.beta, act.linear_beta,
                           norm.variance_epsilon if norm is not None else 1e-5)
        return cls(gate_up.data, moe.shared_experts.down_proj.weight.data, router.data,
                   moe.gate.e_score_correction_bias.data, down.data,
                   None if norm is None else norm.weight.data,
                   moe.routed_expert_up_proj.weight.data, store, params)

    @classmethod
    def random(cls, dims, *, seed: int, experts: ExpertStore | None = None,
               expert_format: str = "bf16") -> "MoeWeights":
        """Realistic random weights (normal / sqrt(fan_in); norms ~1; bias ~0.01), never zeros."""
        from sgl_k3_mono.reference.experts import SeededExperts

        g = torch.Generator().manual_seed(seed)
        h, e, lat = dims.hidden, dims.experts, dims.latent
        s = dims.expert_inter * dims.shared_experts

        def lin(rows, cols):
            return (torch.randn(rows, cols, generator=g) / cols ** 0.5).bfloat16()

        if experts is None:
            experts = SeededExperts(e, dims.expert_inter, lat, seed + 1, expert_format).materialize()
        return cls(
            shared_gate_up=lin(2 * s, h), shared_down=lin(h, s), router=lin(e, h),
            router_bias=0.01 * torch.randn(e, generator=g), latent_down=lin(lat, h),
            latent_norm=(1 + 0.1 * torch.randn(lat, generator=g)).bfloat16() if dims.latent_norm else None,
            latent_up=lin(h, lat), experts=experts, params=MoeParams.from_dims(dims),
        )

    def shard(self, rank: int, tp: int) -> "MoeRankWeights":
        """What rank `rank` of `tp` holds, sliced as SGLang's loader slices each tensor."""
        if not 0 <= rank < tp:
            raise ValueError(f"MoeWeights.shard: rank {rank} outside 0..{tp - 1}")
        s = self.shared_inter
        if s % tp:
            raise ValueError(f"MoeWeights.shard: shared intermediate {s} does not split over tp={tp}")
        sl = s // tp
        # MergedColumnParallel: each rank keeps its slice of the gate half and of the up half.
        gate_up = torch.cat([self.shared_gate_up[rank * sl:(rank + 1) * sl],
                             self.shared_gate_up[s + rank * sl:s + (rank + 1) * sl]])
        return MoeRankWeights(
            rank=rank, tp=tp, shared_gate_up=gate_up, router=self.router, latent_down=self.latent_down,
            shared_down=self.shared_down[:, rank * sl:(rank + 1) * sl], router_bias=self.router_bias,
            latent_norm=self.latent_norm, latent_up=self.latent_up,
            experts=self.experts.shard(rank, tp), params=self.params,
        )


@dataclass(frozen=True)
class MoeRankWeights:
    """The tensors one TP rank's MoE reads (the plugin reads SGLang's views of these)."""

    rank: int
    """This rank."""
    tp: int
    """TP size."""
    shared_gate_up: torch.Tensor
    """[2*S_l, H] bf16: this rank's shared gate rows then its shared up rows."""
    router: torch.Tensor
    """[E, H] bf16 (replicated)."""
    latent_down: torch.Tensor
    """[L, H] bf16 (replicated)."""
    shared_down: torch.Tensor
    """[H, S_l] bf16: this rank's columns of the shared down projection."""
    router_bias: torch.Tensor
    """[E] fp32 (replicated)."""
    latent_norm: torch.Tensor | None
    """[L] (replicated) or None."""
    latent_up: torch.Tensor
    """[H, L] bf16 (replicated)."""
    experts: ExpertStore
    """This rank's expert slices (intermediate I/tp)."""
    params: MoeParams
    """Scalars."""

    @property
    def front(self) -> torch.Tensor:
        """[2*S_l + E + L, H] bf16: SGLang's merged `_front_w` (built on access: a copy)."""
        return torch.cat([self.shared_gate_up, self.router, self.latent_down])

    @property
    def front_sizes(self) -> tuple[int, int, int]:
        """(2*S_l, E, L): how the front output splits."""
        return self.shared_gate_up.shape[0], self.router.shape[0], self.latent_down.shape[0]


def route(logits: torch.Tensor, bias: torch.Tensor, top_k: int, *, renormalize: bool = True,
          bf16_rank: bool = False, bf16_weights: bool = False,
          choose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Biased sigmoid top-k with one expert group. Returns (weights fp32, ids int64) [M, k].

    `choose(logits, ids) -> ids`, when given, may replace the chosen sets (a test that
    follows another implementation's choice where the two disagree only inside their
    score error; it must return [M, k] int64). The weights are then those of its sets.

    The bias only ranks; the weights are the unbiased scores. ids come sorted by biased
    score (SGLang's order is unspecified; only the set matters). `bf16_rank` /
    `bf16_weights` round the sigmoid to bf16 before ranking / before weighting, as
    SGLang's torch top-k on bf16 logits does (eager: both; under torch.compile on the
    CPU, measured: only the weights, the ranking sees the fp32 sigmoid).
    """
    scores = torch.sigmoid(logits.float())
    rank_scores = bf16(scores) if bf16_rank else scores
    ids = torch.topk(rank_scores + bias.float(), top_k, dim=-1, sorted=True).indices
    if choose is not None:
        ids = choose(logits, ids)
    w = (bf16(scores) if bf16_weights else scores).gather(1, ids)
    if renormalize:
        w = w / (w.sum(-1, keepdim=True) + RENORM_EPS)
    return w, ids


def shared_partial(gate_up: torch.Tensor, down: torch.Tensor, p: MoeParams) -> torch.Tensor:
    """One rank's shared-expert partial [M, H]: bf16(bf16(SiTU(gate_up)) @ down^T)."""
    g, u = gate_up.float().chunk(2, dim=-1)
    act = bf16(situ(g, u, p.situ_beta, p.situ_linear_beta))
    return bf16(linear(act, down))


def routed_partials(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor,
                    stores: list[ExpertStore], p: MoeParams, *, isa: str) -> torch.Tensor:
    """Every rank's routed latent partial [tp, M, L] (bf16 values) for routed input x [M, L].

    Experts are visited once each, all ranks together, so lazily generated experts are
    built once; the k weighted outputs are then summed in top-k slot order.
    """
    m, k = ids.shape
    y = torch.zeros(len(stores), m, k, x.shape[1], device=x.device)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        xe = x[rows].float()
        for r, store in enumerate(stores):
            w13, w2 = store.weights(e)
            gu = linear(xe, w13)
            if isa == "sglang_cpu":
                gu = bf16(gu)
            g, u = gu.chunk(2, dim=-1)
            act = bf16(situ(g, u, p.situ_beta, p.situ_linear_beta))
            y[r, rows, slots] = bf16(linear(act, w2))
    acc = torch.zeros(len(stores), m, x.shape[1], device=x.device)
    for j in range(k):
        acc = acc + w[:, j].view(1, m, 1) * y[:, :, j]
    out = bf16(acc)
    if isa == "sm_90" and p.routed_scaling != 1.0:
        out = bf16(out * p.routed_scaling)
    return out


def all_reduce(partials: torch.Tensor) -> torch.Tensor:
    """bf16(sum over dim 0 in rank order, fp32): SGLang's custom all-reduce (fp32 accumulate)."""
    acc = partials[0].float()
    for r in range(1, partials.shape[0]):
        acc = acc + partials[r].float()
    return bf16(acc)


@dataclass(frozen=True)
class MoeResult:
    """Everything a test may compare, bf16 values held in fp32 unless stated."""

    out: torch.Tensor
    """[M, H]: the next residual stream x_L (`_add3`), bf16 values."""
    router_logits: torch.Tensor
    """[M, E] the logits top-k read (bf16-rounded on gfx950 / sglang_cpu, fp32 on sm_90)."""
    topk_ids: torch.Tensor
    """[M, k] int64, sorted by biased score."""
    topk_weights: torch.Tensor
    """[M, k] fp32."""
    routed_input: torch.Tensor
    """[M, L] the experts' input (front's latent down slice), bf16 values."""
    shared_partials: torch.Tensor
    """[tp, M, H] each rank's shared partial."""
    latent_partials: torch.Tensor
    """[tp, M, L] each rank's routed latent partial."""
    shared: torch.Tensor
    """[M, H] reduced shared output."""
    latent: torch.Tensor
    """[M, L] reduced latent, before the norm."""
    latent_normed: torch.Tensor
    """[M, L] after routed_expert_norm (== latent when there is no norm)."""
    routed_out: torch.Tensor
    """[M, H] up projection of the normed latent."""


Exchange = Callable[[torch.Tensor], torch.Tensor]
"""Local partials [ranks held here, M, X] -> every rank's partials [tp, M, X] in rank order:
the identity where every rank is emulated here, an all-gather across processes otherwise
(`k2.reference.all_gather_exchange`). The all-reduce then sums them as SGLang's does."""


def _every_rank_here(parts: torch.Tensor) -> torch.Tensor:
    return parts


def moe_reference(h2: torch.Tensor, prefix: torch.Tensor | None, w: MoeWeights, *, tp: int,
                  isa: str, choose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
                  ) -> MoeResult:
    """KimiK3MoE.forward(h2, prefix_sum=prefix) of a TP-`tp` SGLang, every rank emulated
    (`choose`: see `route`)."""
    return moe_from_ranks(h2, prefix, [w.shard(r, tp) for r in range(tp)], isa=isa, choose=choose)


def moe_from_ranks(h2: torch.Tensor, prefix: torch.Tensor | None, ranks: list[MoeRankWeights], *, isa: str,
                   choose: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   exchange: Exchange = _every_rank_here) -> MoeResult:
    """moe_reference over the ranks held here (`ranks`, in rank order; their replicated
    tensors are read from the first), the partials of all ranks formed by `exchange`: with
    every rank here and the identity, moe_reference itself; with one rank a process and an
    all-gather, the same arithmetic across processes (each holds only its own shard)."""
    check_isa(isa)
    w = ranks[0]
    p = w.params
    if p.routed_scaling != 1.0 and isa != "sm_90":
        raise ValueError(f"moe_reference: routed_scaling_factor {p.routed_scaling} != 1.0 is dropped "
                         f"by SGLang's {isa} path (AITER / CPU native); refusing to model that")
    h = w.router.shape[1]
    if h2.dim() != 2 or h2.shape[1] != h:
        raise ValueError(f"moe_reference: h2 must be [M, {h}], got {tuple(h2.shape)}")
    if prefix is not None and tuple(prefix.shape) != tuple(h2.shape):
        raise ValueError(f"moe_reference: prefix {tuple(prefix.shape)} must match h2 {tuple(h2.shape)}")
    x = bf16(h2.float())
    # The front is one GEMM per rank, but its rows are independent: the router and latent
    # down rows are replicated, so every rank computes the same logits and routed input.
    gate_ups = [linear(x, rw.shared_gate_up) for rw in ranks]
    logits = linear(x, w.router)
    routed_in = bf16(linear(x, w.latent_down))
    if isa != "sm_90":  # bf16 front output (HIP) or three bf16 GEMMs (CPU)
        gate_ups, logits = [bf16(gu) for gu in gate_ups], bf16(logits)
    wts, ids = route(logits, w.router_bias, p.top_k, renormalize=p.renormalize,
                     bf16_weights=isa == "sglang_cpu", choose=choose)
    shared_parts = exchange(torch.stack([shared_partial(gu, rw.shared_down, p) for gu, rw in zip(gate_ups, ranks)]))
    latent_parts = exchange(routed_partials(routed_in, ids, wts, [rw.experts for rw in ranks], p, isa=isa))
    latent, shared = all_reduce(latent_parts), all_reduce(shared_parts)
    normed = latent if w.latent_norm is None else bf16(rmsnorm(latent, w.latent_norm, p.eps))
    out = bf16(linear(normed, w.latent_up))
    x_out = bf16(out + shared)
    if prefix is not None:
        x_out = bf16(x_out + prefix.float())
    return MoeResult(x_out, logits, ids, wts, routed_in, shared_parts, latent_parts, shared, latent,
                     normed, out)


__all__ = ["ISAS", "linear", "MoeParams", "MoeWeights", "MoeRankWeights", "MoeResult", "route", "shared_partial",
           "routed_partials", "all_reduce", "Exchange", "moe_reference", "moe_from_ranks"]
