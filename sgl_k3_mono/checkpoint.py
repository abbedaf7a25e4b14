"""Write random-weight Kimi-K3 checkpoints that SGLang 0.5.23's own loader reads.

`sgl-k3-mono make-checkpoint --config k3-small --out DIR` writes `config.json` and
`model.safetensors` (or shards plus `model.safetensors.index.json`) under the raw
Hugging Face names that `KimiK3ForConditionalGeneration.load_weights` consumes:
per-projection KDA tensors that SGLang fuses on load (q/k/v/g -> fused_qkvg_proj,
q/k/v conv -> qkv_conv1d), MLA q_a / kv_a (fused_qkv_a_proj_with_mqa), MoE layers
under `block_sparse_moe.` (mapped to `mlp.`), per-expert w1/w2/w3 either bf16 or
compressed-tensors MXFP4 (`weight_packed` + `weight_scale`, both uint8), and the
vision tower under the names of SGLang's module tree.

The layout is planned from the config alone (`plan()`), so `--list` can describe
the real 1T-parameter model without allocating anything. Each tensor's values come
from a generator seeded by (seed, tensor name): a checkpoint is reproducible, and a
tensor's values do not depend on which other tensors are written or in what order.

Magnitudes are chosen so activations stay near RMS 1 through a layer (an RMS-1
input through an N(0, 1/fan_in) linear has RMS ~1), rather than the N(0, 0.02) of
training initialisers, whose products vanish: a kernel tested on vanishing
activations can hide rounding and overflow bugs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from sgl_k3_mono import configs

if TYPE_CHECKING:  # torch is imported lazily: planning and --list need none of it
    import torch

LM = "language_model."
LAYERS = "language_model.model.layers."

MXFP4_GROUP = 32
"""Values per E8M0 scale in compressed-tensors mxfp4-pack-quantized."""

# Size in bytes of each dtype the checkpoint uses (safetensors names).
DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1}

# The quantization_config Kimi-K3 ships (compressed-tensors, routed experts only);
# written into a checkpoint's config.json when MXFP4 experts are asked for on a
# config that has none.
K3_MXFP4_QUANTIZATION_CONFIG: dict[str, Any] = {
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": MXFP4_GROUP,
                "num_bits": 4,
                "observer": "minmax",
                "observer_kwargs": {},
                "scale_dtype": "torch.uint8",
                "strategy": "group",
                "symmetric": True,
                "type": "float",
                "zp_dtype": None,
            },
        }
    },
    "format": "mxfp4-pack-quantized",
    "global_compression_ratio": None,
    "ignore": [
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*",
        "re:.*vision_tower.*",
        "re:.*mm_projector.*",
    ],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}

# KimiK3VisionConfig's defaults in SGLang 0.5.23 (srt/configs/kimi_k3.py), which are
# also the released model's values; only the fields that shape parameters.
VISION_DEFAULTS: dict[str, Any] = {
    "patch_size": 14,
    "init_pos_emb_height": 64,
    "init_pos_emb_width": 64,
    "vt_num_hidden_layers": 27,
    "vt_hidden_size": 1024,
    "vt_intermediate_size": 4096,
    "merge_kernel_size": [2, 2],
    "mm_hidden_size": None,  # None: vt_hidden_size
    "qkv_hidden_size": 1536,
    "norm_type": "rmsnorm",
    "attn_bias": False,
    "patch_embed_proj_bias": False,
    "linear_bias": False,
}


# ---------------------------------------------------------------------------------
# The plan: every tensor's name, shape, dtype and how its values are drawn
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Init:
    """How a tensor's values are drawn.

    kind: "normal" (N(0, std^2)), "norm" (1 + N(0, std^2): a norm gain), "a_log"
    (log U(1, 16), the KDA decay init), "dt_bias" (inverse softplus of a log-uniform
    step in [1e-3, 1e-1]), "mxfp4_packed" / "mxfp4_scale" (the two halves of an
    N(0, std^2) weight of shape `logical` quantized to MXFP4).
    """

    kind: str
    std: float = 0.0
    logical: tuple[int, ...] = ()


@dataclass(frozen=True)
class TensorSpec:
    """One checkpoint tensor."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype name: BF16, F32 or U8
    init: Init

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def _linear(name: str, out_features: int, in_features: int) -> TensorSpec:
    """A bf16 linear weight [out, in] ~ N(0, 1/in): keeps an RMS-1 input at RMS ~1."""
    return TensorSpec(name, (out_features, in_features), "BF16", Init("normal", in_features**-0.5))


def _gain(name: str, width: int, dtype: str = "BF16") -> TensorSpec:
    """An RMSNorm gain: ones with a little noise, so a wrong gain index shows."""
    return TensorSpec(name, (width,), dtype, Init("norm", 0.05))


def _expert_weight(prefix: str, out_features: int, in_features: int, mxfp4: bool) -> list[TensorSpec]:
    """One routed-expert projection, bf16 or as compressed-tensors stores MXFP4.

    MXFP4: `weight_packed` [out, in/2] holds two E2M1 codes per byte (even input
    column in the low nibble), `weight_scale` [out, in/32] one E8M0 exponent per 32
    input columns, both uint8.
    """
    if not mxfp4:
        return [_linear(prefix + ".weight", out_features, in_features)]
    if in_features % MXFP4_GROUP:
        raise ValueError(f"{prefix}: MXFP4 needs the input width {in_features} to be a multiple of 32")
    logical = (out_features, in_features)
    std = in_features**-0.5
    return [
        TensorSpec(prefix + ".weight_packed", (out_features, in_features // 2), "U8",
                   Init("mxfp4_packed", std, logical)),
        TensorSpec(prefix + ".weight_scale", (out_features, in_features // MXFP4_GROUP), "U8",
                   Init("mxfp4_scale", std, logical)),
    ]


@dataclass(frozen=True)
class TextShape:
    """The text-model facts that decide which tensors exist and their shapes."""

    hidden: int
    vocab: int
    layers: int
    kda_layers: frozenset[int]  # 0-based
    kda_heads: int
    kda_head_dim: int
    conv: int
    full_rank_gate: bool
    mla_heads: int
    q_lora: int
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int
    mla_output_gate: bool
    experts: int
    expert_inter: int
    latent: int  # 0: experts run at hidden width (no latent projections)
    latent_norm: bool
    shared_experts: int
    dense_inter: int
    first_moe: int
    moe_freq: int
    attn_res: bool
    tie_embeddings: bool

    @classmethod
    def from_text_config(cls, tc: Mapping[str, Any]) -> "TextShape":
        la = tc.get("linear_attn_config") or {}
        layers = int(tc["num_hidden_layers"])
        kda_1based = set(la.get("kda_layers") or ())
        return cls(
            hidden=int(tc["hidden_size"]),
            vocab=int(tc["vocab_size"]),
            layers=layers,
            kda_layers=frozenset(i for i in range(layers) if i + 1 in kda_1based),
            kda_heads=int(la.get("num_heads") or 0),
            kda_head_dim=int(la.get("head_dim") or 0),
            conv=int(la.get("short_conv_kernel_size") or 0),
            full_rank_gate=bool(la.get("use_full_rank_gate", False)),
            mla_heads=int(tc["num_attention_heads"]),
            q_lora=int(tc.get("q_lora_rank") or 0),
            kv_lora=int(tc["kv_lora_rank"]),
            qk_nope=int(tc["qk_nope_head_dim"]),
            qk_rope=int(tc["qk_rope_head_dim"]),
            v_head=int(tc["v_head_dim"]),
            mla_output_gate=bool(tc.get("mla_use_output_gate", False)),
            experts=int(tc.get("num_experts") or 0),
            expert_inter=int(tc.get("moe_intermediate_size") or 0),
            latent=int(tc.get("routed_expert_hidden_size") or 0),
            latent_norm=bool(tc.get("latent_moe_use_norm", False)),
            shared_experts=int(tc.get("num_shared_experts") or 0),
            dense_inter=int(tc["intermediate_size"]),
            first_moe=int(tc.get("first_k_dense_replace") or 0),
            moe_freq=int(tc.get("moe_layer_freq") or 1),
            attn_res=tc.get("attn_res_block_size") is not None,
            tie_embeddings=bool(tc.get("tie_word_embeddings", False)),
        )

    def is_moe(self, layer: int) -> bool:
        return self.experts > 0 and layer >= self.first_moe and layer % self.moe_freq == 0


def _global_tensors(s: TextShape) -> list[TensorSpec]:
    out = [
        TensorSpec(LM + "model.embed_tokens.weight", (s.vocab, s.hidden), "BF16", Init("normal", 1.0)),
        _gain(LM + "model.norm.weight", s.hidden),
    ]
    if not s.tie_embeddings:
        out.append(_linear(LM + "lm_head.weight", s.vocab, s.hidden))
    if s.attn_res:
        out += [_gain(LM + "model.output_attn_res_norm.weight", s.hidden),
                _linear(LM + "model.output_attn_res_proj.weight", 1, s.hidden)]
    return out


def _layer_common(s: TextShape, p: str) -> list[TensorSpec]:
    out = [_gain(p + "input_layernorm.weight", s.hidden), _gain(p + "post_attention_layernorm.weight", s.hidden)]
    if s.attn_res:
        out += [
            _gain(p + "self_attention_res_norm.weight", s.hidden),
            _gain(p + "mlp_res_norm.weight", s.hidden),
            _linear(p + "self_attention_res_proj.weight", 1, s.hidden),
            _linear(p + "mlp_res_proj.weight", 1, s.hidden),
        ]
    return out


def _kda_tensors(s: TextShape, a: str) -> list[TensorSpec]:
    """A KDA layer's tensors. The small ones are F32 in the released checkpoint."""
    if not s.full_rank_gate:
        raise NotImplementedError("only the full-rank KDA gate (use_full_rank_gate: true) is planned")
    heads, hd, H = s.kda_heads, s.kda_head_dim, s.hidden
    P = heads * hd
    out = [_linear(a + f"{n}.weight", P, H) for n in ("q_proj", "k_proj", "v_proj", "g_proj")]
    out += [
        _linear(a + "b_proj.weight", heads, H),
        _linear(a + "f_a_proj.weight", hd, H),
        _linear(a + "f_b_proj.weight", P, hd),
    ]
    # Depthwise causal conv: fan-in is the kernel width.
    out += [TensorSpec(a + f"{n}.weight", (P, 1, s.conv), "F32", Init("normal", s.conv**-0.5))
            for n in ("q_conv1d", "k_conv1d", "v_conv1d")]
    # K3 stores A_log as [head_dim] and SGLang uses the first num_heads entries.
    out.append(TensorSpec(a + "A_log", (max(hd, heads),), "F32", Init("a_log")))
    out.append(TensorSpec(a + "dt_bias", (P,), "F32", Init("dt_bias")))
    out.append(_gain(a + "o_norm.weight", hd, "F32"))
    out.append(_linear(a + "o_proj.weight", H, P))
    return out


def _mla_tensors(s: TextShape, a: str) -> list[TensorSpec]:
    if not s.q_lora:
        raise NotImplementedError("only MLA with a q LoRA (q_lora_rank set) is planned")
    H, h = s.hidden, s.mla_heads
    out = [
        _linear(a + "q_a_proj.weight", s.q_lora, H),
        _gain(a + "q_a_layernorm.weight", s.q_lora),
        _linear(a + "q_b_proj.weight", h * (s.qk_nope + s.qk_rope), s.q_lora),
        _linear(a + "kv_a_proj_with_mqa.weight", s.kv_lora + s.qk_rope, H),
        _gain(a + "kv_a_layernorm.weight", s.kv_lora),
        _linear(a + "kv_b_proj.weight", h * (s.qk_nope + s.v_head), s.kv_lora),
        _linear(a + "o_proj.weight", H, h * s.v_head),
    ]
    if s.mla_output_gate:
        out.append(_linear(a + "g_proj.weight", h * s.v_head, H))
    return out


def _dense_mlp_tensors(s: TextShape, m: str) -> list[TensorSpec]:
    return [_linear(m + "gate_proj.weight", s.dense_inter, s.hidden),
            _linear(m + "up_proj.weight", s.dense_inter, s.hidden),
            _linear(m + "down_proj.weight", s.hidden, s.dense_inter)]


def _moe_tensors(s: TextShape, m: str, mxfp4: bool) -> list[TensorSpec]:
    H, I = s.hidden, s.expert_inter
    L = s.latent or H
    out = [
        _linear(m + "gate.weight", s.experts, H),
        # Small, so no expert is pinned in or out of the top-k by its bias alone.
        TensorSpec(m + "gate.e_score_correction_bias", (s.experts,), "F32", Init("normal", 0.01)),
    ]
    for e in range(s.experts):
        x = f"{m}experts.{e}."
        out += _expert_weight(x + "w1", I, L, mxfp4)
        out += _expert_weight(x + "w2", L, I, mxfp4)
        out += _expert_weight(x + "w3", I, L, mxfp4)
    if s.shared_experts:
        S = I * s.shared_experts
        out += [_linear(m + "shared_experts.gate_proj.weight", S, H),
                _linear(m + "shared_experts.up_proj.weight", S, H),
                _linear(m + "shared_experts.down_proj.weight", H, S)]
    if s.latent:
        out.append(_linear(m + "routed_expert_down_proj.weight", L, H))
        if s.latent_norm:
            out.append(_gain(m + "routed_expert_norm.weight", L))
        out.append(_linear(m + "routed_expert_up_proj.weight", H, L))
    return out


def text_tensors(text_config: Mapping[str, Any], *, mxfp4: bool) -> list[TensorSpec]:
    """Every language-model tensor of a Kimi-K3 text config, in layer order."""
    s = TextShape.from_text_config(text_config)
    out = _global_tensors(s)
    for i in range(s.layers):
        p = f"{LAYERS}{i}."
        out += _layer_common(s, p)
        out += _kda_tensors(s, p + "self_attn.") if i in s.kda_layers else _mla_tensors(s, p + "self_attn.")
        if s.is_moe(i):
            out += _moe_tensors(s, p + "block_sparse_moe.", mxfp4)
        else:
            out += _dense_mlp_tensors(s, p + "mlp.")
    return out


def vision_tensors(vision_config: Mapping[str, Any] | None, text_hidden: int) -> list[TensorSpec]:
    """The MoonViT tower and patch-merger projector, named as SGLang's modules are
    (KimiK3ForConditionalGeneration.load_weights looks them up in named_parameters)."""
    v = {**VISION_DEFAULTS, **(vision_config or {})}
    d, ps = int(v["vt_hidden_size"]), int(v["patch_size"])
    qkv = int(v["qkv_hidden_size"] or d)
    mlp_dim = int(v["vt_intermediate_size"])
    with_norm_bias = v["norm_type"] == "layernorm"  # nn.LayerNorm has a bias, nn.RMSNorm none
    t = "vision_tower."

    def lin(name: str, o: int, i: int, bias: bool) -> list[TensorSpec]:
        out = [_linear(name + ".weight", o, i)]
        if bias:
            out.append(TensorSpec(name + ".bias", (o,), "BF16", Init("normal", 0.02)))
        return out

    def norm(name: str, width: int) -> list[TensorSpec]:
        out = [_gain(name + ".weight", width)]
        if with_norm_bias:
            out.append(TensorSpec(name + ".bias", (width,), "BF16", Init("normal", 0.02)))
        return out

    out = [TensorSpec(t + "patch_embed.proj.weight", (d, 3, ps, ps), "BF16", Init("normal", (3 * ps * ps) ** -0.5))]
    if v["patch_embed_proj_bias"]:
        out.append(TensorSpec(t + "patch_embed.proj.bias", (d,), "BF16", Init("normal", 0.02)))
    out.append(TensorSpec(t + "patch_embed.pos_emb.weight",
                          (int(v["init_pos_emb_height"]), int(v["init_pos_emb_width"]), d), "BF16",
                          Init("normal", 0.02)))
    for b in range(int(v["vt_num_hidden_layers"])):
        x = f"{t}encoder.blocks.{b}."
        out += norm(x + "norm0", d) + norm(x + "norm1", d)
        out += lin(x + "mlp.fc0", mlp_dim, d, v["linear_bias"]) + lin(x + "mlp.fc1", d, mlp_dim, v["linear_bias"])
        out += lin(x + "wqkv", 3 * qkv, d, v["attn_bias"]) + lin(x + "wo", d, qkv, v["attn_bias"])
    out += norm(t + "encoder.final_layernorm", d)
    mh, mw = v["merge_kernel_size"]
    merged = int(v["mm_hidden_size"] or d) * int(mh) * int(mw)
    out += [_linear("mm_projector.proj.0.weight", merged, merged),
            _linear("mm_projector.proj.2.weight", text_hidden, merged),
            _gain("mm_projector.post_norm.weight", text_hidden)]
    return out


def resolve_experts(config: Mapping[str, Any], experts: str) -> str:
    """"auto" follows the config: MXFP4 iff it carries a quantization_config."""
    if experts not in ("auto", "bf16", "mxfp4"):
        raise ValueError(f"experts must be auto, bf16 or mxfp4, not {experts!r}")
    if experts != "auto":
        return experts
    tc = configs.text_config_of(dict(config))
    return "mxfp4" if (tc.get("quantization_config") or config.get("quantization_config")) else "bf16"


def plan(config: Mapping[str, Any], experts: str = "auto") -> list[TensorSpec]:
    """Every tensor of a Kimi-K3 checkpoint for a config dict (KimiK3Config form)."""
    if "text_config" not in config:
        # A bare KimiLinearConfig loads as KimiK3LinearForCausalLM, under other names.
        raise NotImplementedError("only KimiK3ForConditionalGeneration configs (with a text_config) are planned")
    tc = configs.text_config_of(dict(config))
    mxfp4 = resolve_experts(config, experts) == "mxfp4"
    specs = text_tensors(tc, mxfp4=mxfp4)
    specs += vision_tensors(config.get("vision_config"), int(tc["hidden_size"]))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise AssertionError("planned tensor names are not unique")
    return specs


def checkpoint_config(config: Mapping[str, Any], experts: str) -> dict[str, Any]:
    """The config.json to write beside the tensors: its quantization_config says
    exactly what the experts are, because SGLang picks the expert method from it."""
    out = json.loads(json.dumps(config))
    tc = configs.text_config_of(out)
    out.pop("quantization_config", None)  # KimiK3Config copies it up from text_config
    if resolve_experts(config, experts) == "mxfp4":
        tc.setdefault("quantization_config", json.loads(json.dumps(K3_MXFP4_QUANTIZATION_CONFIG)))
    else:
        tc.pop("quantization_config", None)
    return out


# ---------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _generator(seed: int, name: str) -> "torch.Generator":
    import torch

    digest = hashlib.sha256(f"{seed}\0{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def quantize_mxfp4(w: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """OCP MXFP4 of a [out, in] weight: (packed uint8 [out, in/2], scale uint8 [out, in/32]).

    Per 32 input columns the shared exponent is floor(log2(amax)) - 2 (E2M1's largest
    value 6 = 1.5 * 2^2), each value is rounded to the nearest E2M1 code, the code of
    the even column goes in the low nibble.
    """
    import torch

    out_f, in_f = w.shape
    g = w.float().reshape(out_f, in_f // MXFP4_GROUP, MXFP4_GROUP)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(2.0**-126)
    exp = (torch.floor(torch.log2(amax)) - 2).clamp(-127, 127)
    scaled = g / torch.exp2(exp)
    # Nearest E2M1 magnitude, ties to even: steps of 0.5 below 2, 1 below 4, 2 up to 6.
    # Then value -> 3-bit code (0, .5, 1, 1.5 -> 0..3; 2, 3 -> 4, 5; 4, 6 -> 6, 7).
    # Elementwise arithmetic: torch.bucketize is far slower on CPU.
    a = scaled.abs()
    v = torch.where(a < 2, torch.round(a * 2) / 2, torch.where(a < 4, torch.round(a), torch.round(a / 2) * 2))
    v = v.clamp_max(6.0)
    code = torch.where(v < 2, v * 2, torch.where(v < 4, v + 2, v / 2 + 4)).to(torch.uint8)
    code |= (scaled < 0).to(torch.uint8) << 3
    code = code.reshape(out_f, in_f)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    scale = (exp + 127).to(torch.uint8).reshape(out_f, in_f // MXFP4_GROUP)
    return packed.contiguous(), scale.contiguous()


def dequantize_mxfp4(packed: "torch.Tensor", scale: "torch.Tensor") -> "torch.Tensor":
    """The float32 [out, in] weight an MXFP4 pair stands for."""
    import torch

    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
    mags = torch.tensor(_E2M1_MAGNITUDES)[codes & 7]
    vals = torch.where(codes >= 8, -mags, mags)
    mult = torch.exp2(scale.float() - 127).repeat_interleave(MXFP4_GROUP, dim=1)
    return vals * mult


class TensorMaker:
    """Draws each planned tensor's values; MXFP4 halves share one quantization."""

    def __init__(self, seed: int):
        self.seed = seed
        self._pending: dict[str, tuple["torch.Tensor", "torch.Tensor"]] = {}

    def make(self, spec: TensorSpec) -> "torch.Tensor":
        import torch

        dtype = {"BF16": torch.bfloat16, "F32": torch.float32, "U8": torch.uint8}[spec.dtype]
        kind = spec.init.kind
        if kind in ("mxfp4_packed", "mxfp4_scale"):
            return self._mxfp4_half(spec)
        g = _generator(self.seed, spec.name)
        if kind == "normal":
            x = torch.randn(spec.shape, generator=g) * spec.init.std
        elif kind == "norm":
            x = 1.0 + torch.randn(spec.shape, generator=g) * spec.init.std
        elif kind == "a_log":
            x = torch.log(torch.empty(spec.shape).uniform_(1.0, 16.0, generator=g))
        elif kind == "dt_bias":
            u = torch.rand(spec.shape, generator=g)
            dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            x = dt + torch.log(-torch.expm1(-dt))  # softplus(x) == dt
        else:
            raise ValueError(f"{spec.name}: unknown init {kind!r}")
        return x.to(dtype)

    def _mxfp4_half(self, spec: TensorSpec) -> "torch.Tensor":
        """Quantize the expert weight once; the first half asked for keeps the pair
        until the second is asked for (they are adjacent in plan order)."""
        import torch

        base = spec.name.rsplit(".", 1)[0]  # ...experts.E.w1
        pair = self._pending.pop(base, None)
        if pair is None:
            g = _generator(self.seed, base + ".weight")
            logical = torch.randn(spec.init.logical, generator=g) * spec.init.std
            pair = quantize_mxfp4(logical.to(torch.bfloat16))
            self._pending[base] = pair
        return pair[0] if spec.init.kind == "mxfp4_packed" else pair[1]


def make_tensors(specs: Iterable[TensorSpec], seed: int) -> Iterator[tuple[TensorSpec, "torch.Tensor"]]:
    maker = TensorMaker(seed)
    for spec in specs:
        t = maker.make(spec)
        if tuple(t.shape) != spec.shape:
            raise AssertionError(f"{spec.name}: drew {tuple(t.shape)}, planned {spec.shape}")
        yield spec, t


# ---------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------


def _shard_groups(specs: list[TensorSpec], shards: int) -> list[list[TensorSpec]]:
    """Split in plan order into `shards` groups of about equal bytes."""
    target = sum(s.nbytes for s in specs) / shards
    groups: list[list[TensorSpec]] = [[]]
    filled = 0
    for s in specs:
        if groups[-1] and filled >= target * len(groups) and len(groups) < shards:
            groups.append([])
        groups[-1].append(s)
        filled += s.nbytes
    return groups + [[] for _ in range(shards - len(groups))]


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Draw on one intra-op thread. The tensors are many and small, so a thread pool
    only adds wake-ups; on a busy shared machine they cost >10x the arithmetic."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def write_checkpoint(
    config_name_or_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    experts: str = "auto",
    shards: int = 1,
) -> Path:
    """Write config.json and the safetensors file(s) for a config; returns out_dir.

    shards: 1 writes model.safetensors; more write model-0000i-of-0000n.safetensors
    and model.safetensors.index.json, split by bytes.
    """
    from safetensors.torch import save_file

    if shards < 1:
        raise ValueError("shards must be at least 1")
    config = configs.load_config(str(config_name_or_dir))
    specs = plan(config, experts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "config.json", "w") as f:
        json.dump(checkpoint_config(config, experts), f, indent=1)
        f.write("\n")
    groups = _shard_groups(specs, shards) if shards > 1 else [specs]
    weight_map: dict[str, str] = {}
    maker = TensorMaker(seed)
    with _one_thread():
        for i, group in enumerate(groups):
            fname = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            tensors = {s.name: maker.make(s) for s in group}
            save_file(tensors, str(out / fname), metadata={"format": "pt"})
            weight_map.update({n: fname for n in tensors})
            del tensors
    if shards > 1:
        index = {"metadata": {"total_size": sum(s.nbytes for s in specs)}, "weight_map": weight_map}
        with open(out / "model.safetensors.index.json", "w") as f:
            json.dump(index, f, indent=1, sort_keys=True)
            f.write("\n")
    return out


def read_checkpoint(path: str | os.PathLike) -> dict[str, "torch.Tensor"]:
    """Every tensor of a checkpoint folder written by write_checkpoint (any sharding)."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    out: dict[str, "torch.Tensor"] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


# ---------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


def list_plan(specs: list[TensorSpec], stream=None) -> None:
    """Print one line per tensor and the totals, allocating nothing."""
    stream = stream or sys.stdout
    width = max((len(s.name) for s in specs), default=0)
    for s in specs:
        print(f"{s.name:<{width}}  {str(list(s.shape)):<22} {s.dtype:<5} {s.nbytes:>14,}", file=stream)
    total = sum(s.nbytes for s in specs)
    by_dtype: dict[str, int] = {}
    for s in specs:
        by_dtype[s.dtype] = by_dtype.get(s.dtype, 0) + s.nbytes
    parts = ", ".join(f"{d} {_human(b)}" for d, b in sorted(by_dtype.items()))
    print(f"total: {len(specs):,} tensors, {total:,} bytes ({_human(total)}; {parts})", file=stream)


def main(argv: list[str] | None = None) -> int:
    """`sgl-k3-mono make-checkpoint`: write (or --list) a random-weight checkpoint."""
    ap = argparse.ArgumentParser(
        prog="sgl-k3-mono make-checkpoint",
        description="Write a random-weight Kimi-K3 checkpoint under the names SGLang 0.5.23 loads.",
    )
    ap.add_argument("--config", required=True,
                    help=f"configuration name ({', '.join(configs.available())}) or a folder with config.json")
    ap.add_argument("--out", help="output folder (required unless --list)")
    ap.add_argument("--seed", type=int, default=0, help="seed of every tensor's values (default 0)")
    ap.add_argument("--experts", choices=("auto", "bf16", "mxfp4"), default="auto",
                    help="routed expert format; auto follows the config's quantization_config")
    ap.add_argument("--shards", type=int, default=1, help="number of safetensors files (default 1)")
    ap.add_argument("--list", action="store_true",
                    help="print every tensor's name, shape, dtype and bytes, and the totals; write nothing")
    args = ap.parse_args(argv)
    try:
        config = configs.load_config(args.config)
        if args.list:
            list_plan(plan(config, args.experts))
            return 0
        if not args.out:
            ap.error("--out is required unless --list")
        out = write_checkpoint(args.config, args.out, seed=args.seed, experts=args.experts, shards=args.shards)
    except (FileNotFoundError, ValueError, NotImplementedError) as e:
        print(f"make-checkpoint: {e}", file=sys.stderr)
        return 2
    specs = plan(config, args.experts)
    print(f"wrote {out}: {len(specs)} tensors, {_human(sum(s.nbytes for s in specs))}, "
          f"experts {resolve_experts(config, args.experts)}, seed {args.seed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
