"""The form a Kimi-K3 checkpoint's routed experts take in SGLang 0.5.23 once loaded, asked
before load (no torch): what `check` reports and what config_reasons refuses where the
launch cannot read it."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from sgl_k3_mono.dims import text_config_of


def expert_format(hf_config: object) -> str:
    """"mxfp4" for a compressed-tensors mxfp4-pack-quantized checkpoint, else "bf16"."""
    qc = getattr(text_config_of(hf_config), "quantization_config", None) or getattr(
        hf_config, "quantization_config", None)
    fmt = (qc or {}).get("format", "") if isinstance(qc, dict) else ""
    return "mxfp4" if "mxfp4" in str(fmt) else "bf16"


def aiter_on(env: Optional[Mapping[str, str]] = None) -> bool:
    """SGLANG_USE_AITER as SGLang reads it (get_bool_env_var)."""
    env = os.environ if env is None else env
    return str(env.get("SGLANG_USE_AITER", "false")).strip().lower() in ("1", "true", "yes", "on")


def mxfp4_held_as(isa: str, env: Optional[Mapping[str, str]] = None) -> str:
    """How SGLang 0.5.23 holds a checkpoint's MXFP4 experts after loading, under the MoE
    runners the flag accepts (auto / triton, and aiter on gfx950): "aiter" (AITER's
    preshuffle, still MXFP4) on HIP with SGLANG_USE_AITER set, as ROCm's SGLang images and
    Kimi-K3's MI355X recipe set it; else "bf16": Mxfp4MoEMethod's post-load dequantizes
    them (CUDA's default path: sm_90 serves bf16 experts)."""
    return "aiter" if isa == "gfx950" and aiter_on(env) else "bf16"


def served_format(hf_config: object, isa: str, env: Optional[Mapping[str, str]] = None) -> str:
    """"mxfp4" or "bf16": the experts K2 reads on `isa` once SGLang has loaded them."""
    if expert_format(hf_config) == "mxfp4" and mxfp4_held_as(isa, env) == "aiter":
        return "mxfp4"
    return "bf16"
