"""Refusals SGLang's Requirements cannot state, checked before the model loads.

`config_disable_reasons(cfg, hf_config)` is the spec's hook: `cfg` is SGLang's
resolving view of the server arguments, `hf_config` the parsed HF config. Every reason
is one line that names the setting and what would be accepted. SGLang prints them all
at once and refuses to start.
"""

from __future__ import annotations

from typing import Any, Optional

from sgl_k3_mono.dims import K3Dims, text_config_of
from sgl_k3_mono.isa import PROFILES, target_isa
from sgl_k3_mono.kernels import IMPL_ENV, choose, selection_reasons

KIMI_K3_TEXT = {
    # field: (value the launches are built for, what it is)
    "hidden_size": (7168, "the residual width"),
    "num_hidden_layers": (93, "the decoder layers"),
    "num_attention_heads": (96, "the MLA heads"),
    "v_head_dim": (128, "the MLA value head width"),
    "num_experts": (896, "the routed experts"),
    "num_experts_per_token": (16, "the experts per token"),
    "moe_intermediate_size": (3072, "the routed expert width"),
    "routed_expert_hidden_size": (3584, "the latent width of the routed experts"),
    "latent_moe_use_norm": (True, "the latent RMSNorm"),
    "num_shared_experts": (2, "the shared experts"),
    "first_k_dense_replace": (1, "the dense layers before the MoE layers"),
    "moe_layer_freq": (1, "the MoE layer frequency"),
    "attn_res_block_size": (12, "the attention-residual block"),
    "hidden_act": ("situ", "the expert activation"),
    "activation_situ_beta": (4.0, "the SiTU gate softcap"),
    "activation_situ_linear_beta": (25.0, "the SiTU up softcap"),
    "moe_router_activation_func": ("sigmoid", "the router score function"),
    "moe_renormalize": (True, "the top-k renormalisation"),
    "num_expert_group": (1, "the router expert groups"),
    "topk_group": (1, "the router top-k groups"),
    "routed_scaling_factor": (1.0, "the routed output scale (AITER's MXFP4 path drops it)"),
    "mla_use_output_gate": (True, "the MLA output gate"),
}
KIMI_K3_KDA = {
    "num_heads": (96, "the KDA heads"),
    "head_dim": (128, "the KDA head width"),
    "short_conv_kernel_size": (4, "the KDA short-conv width"),
    "use_full_rank_gate": (True, "the full-rank KDA gates"),
    "gate_lower_bound": (-5.0, "the KDA safe-gate lower bound"),
}
SPEC_ALGORITHMS = frozenset({"DSPARK", "EAGLE", "NEXTN", "FROZEN_KV_MTP", "STANDALONE"})
"""Speculative algorithms whose target verify is one chain of draft tokens a request;
the verify launch runs the KDA recurrence token after token, which a tree does not fit."""
MAX_TOKENS = 8
"""The widest step the launches take (rows = requests x tokens a request)."""
MOE_RUNNERS = {"sm_90": ("auto", "triton"), "gfx950": ("auto", "triton", "aiter")}
"""--moe-runner-backend values under which SGLang 0.5.23 leaves the routed experts where K2
reads them: their loaded layout (auto off AITER, triton; MXFP4 ones dequantized to bf16 by
Mxfp4MoEMethod's post-load there), or on gfx950 AITER's MXFP4 preshuffles (auto with
SGLANG_USE_AITER, aiter; k2/expert_layout.py). The others repack the
experts for their own kernels after loading (marlin, flashinfer_*, triton_kernel,
deep_gemm, cutlass, ...) or are not read here."""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _structure_reasons(hf_config: Any) -> list[str]:
    tc = text_config_of(hf_config)
    out = []
    for field, (want, what) in KIMI_K3_TEXT.items():
        got = _get(tc, field)
        if got != want:
            out.append(f"config {field} = {got!r} ({what}): the launches are built for Kimi-K3's {want!r}")
    la = _get(tc, "linear_attn_config") or {}
    for field, (want, what) in KIMI_K3_KDA.items():
        got = _get(la, field)
        if got != want:
            out.append(f"config linear_attn_config.{field} = {got!r} ({what}): "
                       f"the launches are built for Kimi-K3's {want!r}")
    if not la:
        out.append("config linear_attn_config is missing: the model has no KDA layers for K1")
    return out


def _quantization_reasons(cfg: Any, hf_config: Any) -> list[str]:
    """Dense weights must be bf16 and the experts bf16 or MXFP4 (compressed-tensors)."""
    qc = _get(text_config_of(hf_config), "quantization_config") or _get(hf_config, "quantization_config")
    method = None if qc is None else _get(qc, "quant_method")
    fmt = None if qc is None else str(_get(qc, "format") or "")
    out = []
    if qc is not None and not (method == "compressed-tensors" and "mxfp4" in fmt):
        out.append(f"checkpoint quantization {method!r} (format {fmt!r}): the launches read bf16 dense "
                   "weights and bf16 or MXFP4 (compressed-tensors mxfp4-pack-quantized) experts")
    server_q = _get(cfg, "quantization")
    if server_q not in (None, method):
        out.append(f"--quantization {server_q!r}: accepted is none (the checkpoint's own format)")
    return out


def _state_dtype_reasons(cfg: Any, hf_config: Any) -> list[str]:
    """K1 updates SGLang's fp32 recurrent state in place and reads a bf16 conv window."""
    from sglang.srt.environ import envs

    ssm = (envs.SGLANG_MAMBA_SSM_DTYPE.get() or _get(cfg, "mamba_ssm_dtype")
           or _get(text_config_of(hf_config), "mamba_ssm_dtype") or "float32")
    out = []
    if ssm != "float32":
        out.append(f"KDA recurrent state dtype {ssm!r} (--mamba-ssm-dtype / SGLANG_MAMBA_SSM_DTYPE): "
                   "K1 updates an fp32 state; accepted is float32")
    return out


def _speculative_reasons(cfg: Any) -> list[str]:
    algo = _get(cfg, "speculative_algorithm")
    if algo is None:
        return []
    name = str(algo).upper()
    out = []
    if name not in SPEC_ALGORITHMS:
        out.append(f"--speculative-algorithm {name}: accepted are {sorted(SPEC_ALGORITHMS)} "
                   "(one chain of draft tokens a request)")
    topk = _get(cfg, "speculative_eagle_topk")
    if topk not in (None, 1):
        out.append(f"--speculative-eagle-topk {topk}: a tree verify does not fit the KDA recurrence; "
                   "accepted is 1")
    tokens = _get(cfg, "speculative_num_draft_tokens")
    if tokens is None:
        out.append("--speculative-num-draft-tokens is not set: set it (1 to 8) so SGLang sizes the "
                   "verify graphs to the launches' widths")
    elif not 1 <= int(tokens) <= MAX_TOKENS:
        out.append(f"--speculative-num-draft-tokens {tokens}: a verify step of one request is at most "
                   f"{MAX_TOKENS} rows; accepted is 1 to {MAX_TOKENS}")
    return out


def _moe_runner_reasons(cfg: Any, isa: Optional[str]) -> list[str]:
    """The MoE runner decides where SGLang leaves the routed experts after loading."""
    accepted = MOE_RUNNERS.get(isa or "")
    runner = _get(cfg, "moe_runner_backend") or "auto"
    name = str(getattr(runner, "value", runner))
    if accepted is None or name in accepted:
        return []
    return [f"--moe-runner-backend {name} on {isa}: SGLang repacks the routed experts for that runner after "
            f"loading, where K2 reads them as SGLang's {', '.join(accepted)} runners leave them; accepted are "
            f"{list(accepted)}"]


def _expert_form_reasons(hf_config: Any, isa: Optional[str]) -> list[str]:
    """The FlyDSL K2 (gfx950's default device code) reads MXFP4 experts only: refuse, before
    load, a setup where SGLang will hold them in bf16 (a bf16 checkpoint, or an MXFP4 one
    that its post-load dequantizes without SGLANG_USE_AITER; expert_form.served_format)."""
    from sgl_k3_mono.expert_form import expert_format, served_format

    fmt = expert_format(hf_config)
    if fmt != "mxfp4" and (_get(text_config_of(hf_config), "quantization_config")
                           or _get(hf_config, "quantization_config")):
        return []  # another quantization: _quantization_reasons' refusal
    try:
        if isa != "gfx950" or choose(isa).impl != "flydsl" or served_format(hf_config, isa) == "mxfp4":
            return []
    except ValueError:
        return []  # a bad device-code choice is selection_reasons' refusal
    why = ("the checkpoint's routed experts are bf16" if fmt != "mxfp4" else
           "SGLANG_USE_AITER is not set, so SGLang's post-load dequantizes the checkpoint's MXFP4 experts to bf16")
    return [f"{why}, and the FlyDSL K2 reads MXFP4 experts only: set SGLANG_USE_AITER=1 for an MXFP4 checkpoint "
            f"(SGLang then keeps them MXFP4 in AITER's layout), or {IMPL_ENV}=triton (the Triton K2 reads bf16 "
            "experts)"]


def _isa_reasons(cfg: Any, hf_config: Any, isa: Optional[str]) -> list[str]:
    profile = PROFILES.get(isa or "")
    if profile is None:
        return []  # SGLang's own check already refuses an ISA the spec does not list
    from sglang.srt.arg_groups.overrides import attention_backends_of

    _, decode = attention_backends_of(cfg)
    out = []
    if decode not in profile.decode_attention_backends:
        out.append(f"decode attention backend {decode!r} on {isa}: the MLA layers keep SGLang's "
                   f"attention, accepted there is {sorted(profile.decode_attention_backends)} "
                   f"(--decode-attention-backend)")
    tp = int(_get(cfg, "tp_size") or 1)
    dims = K3Dims.from_config(hf_config, tp=tp)
    for what, total in (("KDA heads", dims.kda_heads), ("MLA heads", dims.mla_heads),
                        ("routed expert width", dims.expert_inter)):
        if total and total % tp:
            out.append(f"--tp-size {tp}: {what} ({total}) do not split evenly over the ranks")
    return out



def config_disable_reasons(cfg: Any, hf_config: Any) -> list[str]:
    """Every reason this server setup cannot run the launches, before load."""
    isa = target_isa()
    return (
        _structure_reasons(hf_config)
        + _quantization_reasons(cfg, hf_config)
        + _state_dtype_reasons(cfg, hf_config)
        + _speculative_reasons(cfg)
        + _isa_reasons(cfg, hf_config, isa)
        + _moe_runner_reasons(cfg, isa)
        + _expert_form_reasons(hf_config, isa)
        # the device code: on gfx950 FlyDSL (pinned) unless SGL_K3_MONO_GFX950_IMPL=triton
        + selection_reasons(isa)
    )
