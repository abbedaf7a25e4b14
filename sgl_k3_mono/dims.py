"""Every Kimi-K3 dimension a launch is shaped by, global and per TP rank.

Pure Python (no torch): `sgl-k3-mono check`, the refusals, the byte budget and the
references all size themselves from one `K3Dims`, read from the text config that
SGLang parses (`KimiLinearConfig`, or the `text_config` of `KimiK3Config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


def text_config_of(hf_config: Any) -> Any:
    """The KimiLinearConfig of a KimiK3Config (VL wrapper) or of a text-only config
    (objects or their config.json dicts)."""
    if isinstance(hf_config, Mapping):
        return hf_config.get("text_config") or hf_config
    return getattr(hf_config, "text_config", None) or hf_config


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(name, default)
    return getattr(cfg, name, default)


@dataclass(frozen=True)
class K3Dims:
    """One Kimi-K3 text model's dimensions at one TP size."""

    tp: int
    """Tensor-parallel size (attention TP equals TP: no DP attention, EP or CP)."""
    hidden: int
    """Residual width H (7168)."""
    layers: int
    """Decoder layers (93)."""
    kda_layers: tuple[int, ...]
    """0-based indices of the KDA layers (69 of them)."""
    mla_layers: tuple[int, ...]
    """0-based indices of the MLA (full attention) layers (24 of them)."""
    first_moe_layer: int
    """Layers before this one run the dense MLP (first_k_dense_replace: 1)."""
    moe_layer_freq: int
    """MoE on every moe_layer_freq-th layer from first_moe_layer on (1)."""
    kda_heads: int
    """KDA heads over all ranks (96)."""
    kda_head_dim: int
    """KDA head width for q, k and v (128)."""
    conv_width: int
    """Causal short-conv width (4)."""
    gate_lower_bound: float | None
    """KDA safe-gate lower bound (-5.0); None selects the unbounded gate."""
    full_rank_gate: bool
    """f and g gates are full rank (f_a -> f_b, full g projection)."""
    mla_heads: int
    """MLA heads over all ranks (96)."""
    mla_v_head_dim: int
    """MLA value head width (128): the TP-local MLA output is mla_heads/tp * this."""
    experts: int
    """Routed experts E (896)."""
    top_k: int
    """Experts per token (16)."""
    expert_inter: int
    """Routed expert intermediate width I over all ranks (3072)."""
    latent: int
    """Latent width L of the routed experts (3584); 0 when the MoE has no latent."""
    latent_norm: bool
    """RMSNorm on the reduced latent before the up projection."""
    shared_experts: int
    """Shared experts; shared intermediate = expert_inter * shared_experts."""
    dense_inter: int
    """Dense MLP width of the first layers (33792)."""
    attn_res_block: int | None
    """Attention-residual bank block size in layers (12); None: no bank."""
    vocab: int
    """Vocabulary (163840)."""
    rms_eps: float
    """Epsilon of every RMSNorm except the KDA output norm (1e-5)."""
    situ_beta: float | None
    """SiTU gate softcap beta (4.0); None: SiLU-and-mul."""
    situ_linear_beta: float | None
    """SiTU up-projection softcap beta (25.0)."""
    routed_scaling: float
    """Routed output scale (1.0 for Kimi-K3)."""
    router_activation: str
    """Router score function ("sigmoid")."""
    renormalize: bool
    """Top-k weights renormalised to sum 1."""
    expert_groups: int
    """Router expert groups (1: plain biased top-k)."""

    @classmethod
    def from_config(cls, hf_config: Any, tp: int = 1) -> "K3Dims":
        tc = text_config_of(hf_config)
        la = _get(tc, "linear_attn_config") or {}
        layers = int(_get(tc, "num_hidden_layers"))
        kda_1based = set(_get(la, "kda_layers") or ())
        kda = tuple(i for i in range(layers) if i + 1 in kda_1based)
        mla = tuple(i for i in range(layers) if i + 1 not in kda_1based)
        shared = int(_get(tc, "num_shared_experts", 0) or 0)
        heads = int(_get(tc, "num_attention_heads"))
        return cls(
            tp=int(tp),
            hidden=int(_get(tc, "hidden_size")),
            layers=layers,
            kda_layers=kda,
            mla_layers=mla,
            first_moe_layer=int(_get(tc, "first_k_dense_replace", 0) or 0),
            moe_layer_freq=int(_get(tc, "moe_layer_freq", 1) or 1),
            kda_heads=int(_get(la, "num_heads", 0) or 0),
            kda_head_dim=int(_get(la, "head_dim", 0) or 0),
            conv_width=int(_get(la, "short_conv_kernel_size", 0) or 0),
            gate_lower_bound=_get(la, "gate_lower_bound"),
            full_rank_gate=bool(_get(la, "use_full_rank_gate", False)),
            mla_heads=heads,
            mla_v_head_dim=int(_get(tc, "v_head_dim", 0) or 0),
            experts=int(_get(tc, "num_experts", 0) or 0),
            top_k=int(_get(tc, "num_experts_per_token", 0) or 0),
            expert_inter=int(_get(tc, "moe_intermediate_size", 0) or 0),
            latent=int(_get(tc, "routed_expert_hidden_size", 0) or 0),
            latent_norm=bool(_get(tc, "latent_moe_use_norm", False)),
            shared_experts=shared,
            dense_inter=int(_get(tc, "intermediate_size", 0) or 0),
            attn_res_block=_get(tc, "attn_res_block_size"),
            vocab=int(_get(tc, "vocab_size")),
            rms_eps=float(_get(tc, "rms_norm_eps", 1e-6)),
            situ_beta=_get(tc, "activation_situ_beta"),
            situ_linear_beta=_get(tc, "activation_situ_linear_beta"),
            routed_scaling=float(_get(tc, "routed_scaling_factor", 1.0) or 1.0),
            router_activation=str(_get(tc, "moe_router_activation_func", "sigmoid")),
            renormalize=bool(_get(tc, "moe_renormalize", True)),
            expert_groups=int(_get(tc, "num_expert_group", 1) or 1),
        )

    # ---- layer schedule -------------------------------------------------------
    def is_kda(self, layer: int) -> bool:
        return layer in self.kda_layers

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_moe_layer and layer % self.moe_layer_freq == 0

    def is_block_write(self, layer: int) -> bool:
        """The attention seam of this layer stores the prefix into the bank."""
        return bool(self.attn_res_block) and layer % self.attn_res_block == 0

    def bank_rows_at_attn(self, layer: int) -> int:
        """Valid bank rows at the attention read of `layer` (ceil(layer / block))."""
        return math.ceil(layer / self.attn_res_block) if self.attn_res_block else 0

    def bank_rows(self) -> int:
        """Bank rows allocated per forward (ceil(layers / block))."""
        return math.ceil(self.layers / self.attn_res_block) if self.attn_res_block else 0

    # ---- per-rank widths --------------------------------------------------------
    @property
    def kda_heads_local(self) -> int:
        return self.kda_heads // self.tp

    @property
    def kda_proj_local(self) -> int:
        """P_l = local heads * head_dim (1536 at TP 8): q, k, v, g, f and o widths."""
        return self.kda_heads_local * self.kda_head_dim

    @property
    def kda_f_rank(self) -> int:
        """f_a output width (replicated; head_dim for the full-rank gate)."""
        return self.kda_head_dim

    @property
    def mla_heads_local(self) -> int:
        return self.mla_heads // self.tp

    @property
    def mla_out_local(self) -> int:
        """TP-local MLA attention output width before o_proj (1536 at TP 8)."""
        return self.mla_heads_local * self.mla_v_head_dim

    @property
    def expert_inter_local(self) -> int:
        """Each rank's slice of every routed expert's intermediate (384 at TP 8)."""
        return self.expert_inter // self.tp

    @property
    def shared_inter_local(self) -> int:
        """Each rank's slice of the shared experts' intermediate (768 at TP 8)."""
        return self.expert_inter * self.shared_experts // self.tp

    @property
    def dense_inter_local(self) -> int:
        return self.dense_inter // self.tp

    @property
    def vocab_local(self) -> int:
        return self.vocab // self.tp
