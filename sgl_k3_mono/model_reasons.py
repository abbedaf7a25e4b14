"""Per-layer refusals after SGLang has loaded the model, before any collective.

`model_disable_reasons(model, hf_config, copies)` walks the decoder layers and checks
every tensor a launch reads where SGLang's standard path leaves it: the module is there,
its quantization is one the launch reads, its dtype and per-rank shape are what the
launch is built for. It returns one line per problem, naming the layer and the module
and what would be accepted, so a user sees everything at once.
"""

from __future__ import annotations

import os

from typing import Any, Optional

from sgl_k3_mono.dims import K3Dims

PLAIN = "UnquantizedLinearMethod"
"""SGLang's quant method of a bf16 linear layer: the only one the launches read."""
EXPERT_FORMATS = ("UnquantizedFusedMoEMethod", "Mxfp4MoEMethod")
"""Routed-expert quant methods K2 reads (bf16; MXFP4 in SGLang's loaded layout or AITER's
preshuffles, k2/expert_layout.py)."""


def language_model(model: Any) -> Any:
    """KimiK3LinearForCausalLM of a KimiK3ForConditionalGeneration, or the model itself."""
    return getattr(model, "language_model", model)


def tp_size() -> int:
    """The TP size SGLang sharded the weights over (attention TP is TP: no DP attention)."""
    from sglang.srt.runtime_context import get_parallel

    return get_parallel().tp_group.world_size


class _Reasons:
    """Collects one line per problem, each prefixed with the layer it is in."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, where: str, text: str) -> None:
        self.lines.append(f"{where}: {text}")

    def module(self, where: str, parent: Any, path: str) -> Optional[Any]:
        obj = parent
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                self.add(where, f"{path} is missing (the launch reads it)")
                return None
        return obj

    def tensor(self, where: str, name: str, t: Any, shape: tuple, dtype: str) -> None:
        import torch

        if not isinstance(t, torch.Tensor):
            self.add(where, f"{name} is missing (the launch reads a {dtype} {list(shape)} tensor)")
            return
        got_dtype = str(t.dtype).replace("torch.", "")
        if got_dtype != dtype or tuple(t.shape) != tuple(shape):
            self.add(where, f"{name} is {got_dtype} {list(t.shape)}; the launch reads {dtype} {list(shape)}")

    def linear(self, where: str, parent: Any, path: str, shape: tuple) -> None:
        mod = self.module(where, parent, path)
        if mod is None:
            return
        method = type(getattr(mod, "quant_method", None)).__name__
        if method != PLAIN:
            self.add(where, f"{path} is quantized ({method}); the launch reads bf16 weights "
                     f"({PLAIN})")
            return
        self.tensor(where, f"{path}.weight", getattr(mod, "weight", None), shape, "bfloat16")

    def norm(self, where: str, parent: Any, path: str, width: int) -> None:
        mod = self.module(where, parent, path)
        if mod is not None:
            self.tensor(where, f"{path}.weight", getattr(mod, "weight", None), (width,), "bfloat16")


def _kda(r: _Reasons, where: str, attn: Any, d: K3Dims) -> None:
    """What K1 reads of a KimiK3DeltaAttention."""
    H, P, h, f = d.hidden, d.kda_proj_local, d.kda_heads_local, d.kda_f_rank
    r.linear(where, attn, "fused_qkvg_proj", (4 * P, H))
    merged = getattr(attn, "_qkvgbfa_layer", None)
    bfa = getattr(attn, "_bfa_w", None)
    if merged is not None:
        rows = 4 * P + f + h
        r.tensor(where, "_qkvgbfa_layer.weight", merged.weight, (rows + (-rows) % 8, H), "bfloat16")
    elif bfa is not None:
        rows = f + h
        r.tensor(where, "_bfa_w", bfa, (rows + (-rows) % 8, H), "bfloat16")
    else:
        r.linear(where, attn, "f_a_proj", (f, H))
        r.linear(where, attn, "b_proj", (h, H))
    r.linear(where, attn, "f_b_proj", (P, f))
    conv = r.module(where, attn, "qkv_conv1d")
    if conv is not None:
        r.tensor(where, "qkv_conv1d.weight", conv.weight, (3 * P, 1, d.conv_width), "float32")
    a_log = getattr(attn, "A_log", None)
    r.tensor(where, "A_log", None if a_log is None else a_log.reshape(-1), (h,), "float32")
    r.tensor(where, "dt_bias", getattr(attn, "dt_bias", None), (P,), "float32")
    r.norm(where, attn, "o_norm", d.kda_head_dim)
    r.linear(where, attn, "o_proj", (H, P))
    inner = r.module(where, attn, "attn")
    if inner is not None and getattr(inner, "lower_bound", None) != d.gate_lower_bound:
        r.add(where, f"attn.lower_bound is {getattr(inner, 'lower_bound', None)!r}; K1 applies the "
              f"safe gate with the config's {d.gate_lower_bound!r}")


def _mla(r: _Reasons, where: str, attn: Any, d: K3Dims) -> None:
    """What K2 reads of a KimiK3MLAAttention: its o_proj (SGLang runs the rest)."""
    if getattr(attn, "g_proj", None) is None:
        r.add(where, "g_proj (the MLA output gate) is missing; K2 expects the gated output")
    r.linear(where, attn, "o_proj", (d.hidden, d.mla_out_local))


def _aiter_disagrees(kind: str) -> Optional[str]:
    """Whether the installed AITER's shuffle is the layout K2 reads (mxfp4_aiter's statement
    of it): its own functions run on a probe, whatever its version. Tagged tensors mean
    SGLang ran AITER in this process, so an AITER that will not import is a refusal too."""
    from sgl_k3_mono.reference.mxfp4_aiter import disagreement_with_aiter

    try:
        return disagreement_with_aiter(kind)
    except ImportError as e:
        return f"aiter does not import here ({e}), so its {kind} shuffle cannot be checked against the layout K2 reads"
    except Exception as e:  # an AITER whose shuffle takes other arguments is another layout too
        return f"AITER's {kind} shuffle failed on a probe ({type(e).__name__}: {e})"


def _aiter_experts(r: _Reasons, where: str, experts: Any, d: K3Dims) -> None:
    """AITER's preshuffled MXFP4 experts (SGLang's default on gfx950), which K2 reads in
    place (k2/expert_layout.py): the shuffle SGLang picked from the environment at load (the
    same variables, the same precedence), I_pad from the tensor, the 2-D scales it holds."""
    from sgl_k3_mono.k2.expert_layout import check_dims, code_of
    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout, scale_cols, scale_rows

    E, L, I = d.experts, d.latent, d.expert_inter_local
    w13 = getattr(experts, "w13_weight", None)
    kind = AiterLayout.from_env(I, os.environ).kind
    ip = w13.shape[1] // 2 if getattr(w13, "ndim", 0) == 3 else I
    try:
        what = AiterLayout(kind, I, ip).describe()
    except ValueError:
        r.add(where, f"experts hold AITER's {kind} MXFP4 preshuffle at expert width {ip} for {I}: no layout "
              "SGLang 0.5.23 builds")
        return
    why = check_dims(code_of(kind), inter_up=ip, latent=L)
    if why:
        r.add(where, f"experts hold {what}; K2 reads it in place only with " + "; ".join(why))
        return
    before = len(r.lines)
    r.tensor(where, "experts.w13_weight", w13, (E, 2 * ip, L // 2), "uint8")
    r.tensor(where, "experts.w13_weight_scale", getattr(experts, "w13_weight_scale", None),
             (scale_rows(kind, E * 2 * ip), scale_cols(kind, L // 32)), "uint8")
    r.tensor(where, "experts.w2_weight", getattr(experts, "w2_weight", None), (E, L, ip // 2), "uint8")
    r.tensor(where, "experts.w2_weight_scale", getattr(experts, "w2_weight_scale", None),
             (scale_rows(kind, E * L), scale_cols(kind, ip // 32)), "uint8")
    if len(r.lines) > before:
        return
    why = _aiter_disagrees(kind)
    if why:
        r.add(where, f"experts hold {what}, but {why}")
        return
    from sgl_k3_mono.reference.experts import Mxfp4Experts
    from sgl_k3_mono.reference.mxfp4 import nan_scale_count

    store = Mxfp4Experts.from_sglang(w13, experts.w13_weight_scale, experts.w2_weight, experts.w2_weight_scale,
                                     I, kind)
    for name, s in zip(("w13_weight_scale", "w2_weight_scale"), store.real_scales()):
        n = nan_scale_count(s)
        if n:
            r.add(where, f"experts.{name} holds {n} NaN scales (E8M0 255) where the weights use them ({what}); "
                  "K2's MXFP4 decode does not carry NaN scales, so the weights are refused rather than served "
                  "as finite numbers")


def _aiter_shuffles_bf16(experts: Any) -> Optional[str]:
    """Why SGLang preshuffled these bf16 experts (None: it did not). Its unquantized MoE
    shuffles w13 / w2 into AITER's 16 x 16 tiles after loading when SGLANG_USE_AITER is on
    (HIP), the MoE runner is auto or aiter and AITER's CK MoE takes the layer, and copies the
    result into the same Parameters, so no tag shows it afterwards: SGLang's own condition
    is asked again here. On gfx950 Kimi-K3's SiTU (gemm1_alpha / clamp) keeps the CK MoE
    off and the experts plain; elsewhere K2 would read tiles as rows."""
    try:
        from sglang.srt.layers.quantization import unquant
    except ImportError:
        return None
    if not getattr(unquant, "_use_aiter", False) or getattr(experts, "_skip_aiter_moe_shuffle", False):
        return None
    backend = unquant.get_moe_runner_backend()
    qm = getattr(experts, "quant_method", None)
    if not (backend.is_auto() or backend.is_aiter()) or not hasattr(qm, "_aiter_ck_moe_supported"):
        return None
    if not qm._aiter_ck_moe_supported(experts):
        return None
    return ("bf16 experts hold AITER's 16x16 preshuffle (SGLANG_USE_AITER=1 and AITER's CK MoE takes this "
            "layer, so SGLang shuffled w13 / w2 after loading); K2 reads bf16 experts in SGLang's loaded "
            "[E, 2I, L] / [E, L, I] rows")


REPACKING_RUNNERS = ("use_marlin", "_fi_kernel", "use_triton_kernels", "use_deep_gemm", "use_mega_moe",
                     "use_flashinfer_trtllm_moe", "use_flashinfer_cutlass")
"""The quant methods' own flags (Mxfp4MoEMethod, UnquantizedFusedMoEMethod) for runners that
repack the experts after loading; config_reasons refuses their --moe-runner-backend values
first, this is the loaded model's word on it."""


def _repacked_for(experts: Any) -> Optional[str]:
    qm = getattr(experts, "quant_method", None)
    return next((f"{n}={getattr(qm, n)!r}" for n in REPACKING_RUNNERS if getattr(qm, n, None)), None)


def _experts(r: _Reasons, where: str, experts: Any, d: K3Dims) -> None:
    method = type(getattr(experts, "quant_method", None)).__name__
    E, L, I = d.experts, d.latent, d.expert_inter_local
    repacked = _repacked_for(experts) if method in EXPERT_FORMATS else None
    if repacked:
        r.add(where, f"routed experts were repacked for another MoE runner ({method}.{repacked}); K2 reads them "
              "as SGLang's auto / triton / aiter runners leave them")
        return
    if method == "UnquantizedFusedMoEMethod":
        why = _aiter_shuffles_bf16(experts)
        if why:
            r.add(where, why)
            return
        r.tensor(where, "experts.w13_weight", getattr(experts, "w13_weight", None), (E, 2 * I, L), "bfloat16")
        r.tensor(where, "experts.w2_weight", getattr(experts, "w2_weight", None), (E, L, I), "bfloat16")
    elif method == "Mxfp4MoEMethod":
        w13 = getattr(experts, "w13_weight", None)
        if experts_shuffled(experts):
            _aiter_experts(r, where, experts, d)
            return
        if mxfp4_upcast(experts):  # K2 reads them as it reads bf16 experts
            r.tensor(where, "experts.w13_weight", w13, (E, 2 * I, L), "bfloat16")
            r.tensor(where, "experts.w2_weight", getattr(experts, "w2_weight", None), (E, L, I), "bfloat16")
            return
        r.tensor(where, "experts.w13_weight", w13, (E, 2 * I, L // 2), "uint8")
        r.tensor(where, "experts.w13_weight_scale", getattr(experts, "w13_weight_scale", None),
                 (E, 2 * I, L // 32), "uint8")
        r.tensor(where, "experts.w2_weight", getattr(experts, "w2_weight", None), (E, L, I // 2), "uint8")
        r.tensor(where, "experts.w2_weight_scale", getattr(experts, "w2_weight_scale", None),
                 (E, L, I // 32), "uint8")
        _nan_scales(r, where, experts)
    else:
        r.add(where, f"routed experts use {method}; K2 reads {list(EXPERT_FORMATS)}")


def mxfp4_upcast(experts: Any) -> bool:
    """SGLang dequantized these MXFP4 experts to bf16 after loading: Mxfp4MoEMethod's
    post-load does that wherever no runner-specific branch takes the layer, which with the
    auto / triton runners is CUDA (sm_90: the default) and HIP without SGLANG_USE_AITER. It
    replaces w13 / w2 by bf16 [E, 2I, L] / [E, L, I] and deletes the scales; a bf16 w13 that
    still has its scales is no state SGLang leaves, and is checked as MXFP4 (and refused)."""
    w13 = getattr(experts, "w13_weight", None)
    return str(getattr(w13, "dtype", "")) == "torch.bfloat16" and getattr(experts, "w13_weight_scale", None) is None


def experts_shuffled(experts: Any) -> bool:
    """SGLang tagged the FusedMoE's MXFP4 tensors as AITER-preshuffled (on the Parameters:
    their .data is a fresh tensor without the tag)."""
    return any(getattr(getattr(experts, n, None), "is_shuffled", False) for n in ("w13_weight", "w2_weight"))


def _nan_scales(r: _Reasons, where: str, experts: Any) -> None:
    """K2 decodes MXFP4 without the NaN-scale select (matmul.dot_mxfp4_scaled, fast_math),
    so a NaN scale would come out finite where SGLang's output is NaN: refuse it instead."""
    import torch

    from sgl_k3_mono.reference.mxfp4 import nan_scale_count

    for name in ("w13_weight_scale", "w2_weight_scale"):
        t = getattr(experts, name, None)
        if isinstance(t, torch.Tensor) and t.dtype == torch.uint8:
            n = nan_scale_count(t)
            if n:
                r.add(where, f"experts.{name} holds {n} NaN scales (E8M0 255); K2's MXFP4 decode does not "
                      "carry NaN scales, so the weights are refused rather than served as finite numbers")


def _moe(r: _Reasons, where: str, mlp: Any, d: K3Dims) -> None:
    """What K2 reads of a KimiK3MoE."""
    H, L, S = d.hidden, d.latent, d.shared_inter_local
    gate = r.module(where, mlp, "gate")
    if gate is not None:
        r.tensor(where, "gate.weight", getattr(gate, "weight", None), (d.experts, H), "bfloat16")
        r.tensor(where, "gate.e_score_correction_bias", getattr(gate, "e_score_correction_bias", None),
                 (d.experts,), "float32")
    r.linear(where, mlp, "shared_experts.gate_up_proj", (2 * S, H))
    r.linear(where, mlp, "shared_experts.down_proj", (H, S))
    r.linear(where, mlp, "routed_expert_down_proj", (L, H))
    r.linear(where, mlp, "routed_expert_up_proj", (H, L))
    r.norm(where, mlp, "routed_expert_norm", L)
    experts = r.module(where, mlp, "experts")
    if experts is not None:
        _experts(r, where, experts, d)


def _seam(r: _Reasons, where: str, layer: Any, d: K3Dims, side: str) -> None:
    """The attn-res seam a launch begins with: its score projection and two norms."""
    res, out = ("self_attention_res", "input_layernorm") if side == "attn" else ("mlp_res", "post_attention_layernorm")
    r.norm(where, layer, f"{res}_norm", d.hidden)
    r.linear(where, layer, f"{res}_proj", (1, d.hidden))
    r.norm(where, layer, out, d.hidden)


def model_disable_reasons(model: Any, hf_config: Any, copies: dict, *, tp: Optional[int] = None) -> list[str]:
    """Every reason the loaded model's layers cannot run the launches."""
    d = K3Dims.from_config(hf_config, tp=tp or tp_size())
    r = _Reasons()
    layers = getattr(getattr(language_model(model), "model", None), "layers", None)
    if layers is None:
        return [f"{type(model).__name__} has no language_model.model.layers: not a Kimi-K3 model SGLang built"]
    if len(layers) != d.layers:
        r.add("model", f"{len(layers)} decoder layers are built, the config has {d.layers} "
              "(pipeline stages are not served)")
    for i, layer in enumerate(layers):
        where = f"layer {i}"
        attn = getattr(layer, "self_attn", None)
        kind = type(attn).__name__
        if d.is_kda(i):
            if kind != "KimiK3DeltaAttention":
                r.add(where, f"self_attn is {kind}; the config makes it a KDA layer for K1")
            else:
                _seam(r, where, layer, d, "attn")
                _kda(r, where, attn, d)
        elif kind != "KimiK3MLAAttention":
            r.add(where, f"self_attn is {kind}; the config makes it an MLA layer")
        if not d.is_moe(i):
            continue
        if kind == "KimiK3MLAAttention":
            _mla(r, where, attn, d)
        mlp = getattr(layer, "mlp", None)
        if type(mlp).__name__ != "KimiK3MoE":
            r.add(where, f"mlp is {type(mlp).__name__}; K2 runs a KimiK3MoE layer")
            continue
        _seam(r, where, layer, d, "ffn")
        _moe(r, where, mlp, d)
    return r.lines
