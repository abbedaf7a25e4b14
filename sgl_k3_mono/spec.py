"""The Kimi-K3 MonoSpec SGLang's --enable-amd-monokernel finds through `find_spec`.

Imported lazily by SGLang (the entry point only registers the path), so importing
torch here is fine. Everything the spec says is assembled from small modules:
isa.py (per-ISA limits), config_reasons.py and model_reasons.py (refusals),
numerics.py (bounds), build.py (the build hook).
"""

from __future__ import annotations

from sglang.kernels.plugin_kernels.amd.spec import (
    MONOKERNEL_API_VERSION,
    DeviceLimits,
    Feature,
    MonoSpec,
    Numerics,
    NumericsKind,
    Requirements,
)

from sgl_k3_mono.build import build
from sgl_k3_mono.config_reasons import config_disable_reasons
from sgl_k3_mono.isa import PROFILES
from sgl_k3_mono.model_reasons import model_disable_reasons
from sgl_k3_mono.numerics import BOUNDS

NAME = "sgl-k3-mono"

DEVICES = {
    isa: DeviceLimits(widths=p.widths, tp_sizes=p.tp_sizes, resident_blocks=p.resident_blocks)
    for isa, p in PROFILES.items()
}

# Verify steps of one chain of draft tokens a request are launch rows like decode rows;
# config_disable_reasons narrows the algorithms and token counts.
FEATURES = frozenset({Feature.SPECULATIVE_DECODING})

REQUIRES = Requirements(
    dtypes=frozenset({"bfloat16"}),
    # the union over ISAs; config_disable_reasons holds each ISA to its own set
    attention_backends=frozenset().union(*(p.decode_attention_backends for p in PROFILES.values())),
    # KimiK3Config exposes only hidden_size (and vocab_size) of the text config at its
    # top level, where SGLang's check looks; the rest is in config_disable_reasons
    hf_config={"hidden_size": 7168},
    env={"SGLANG_MAMBA_CONV_DTYPE": "bfloat16"},  # K1 reads and writes a bf16 conv window
)

NUMERICS = Numerics(kind=NumericsKind.TOLERANCE, bounds=BOUNDS)

SPEC = MonoSpec(
    name=NAME,
    devices=DEVICES,
    features=FEATURES,
    requires=REQUIRES,
    numerics=NUMERICS,
    model_disable_reasons=model_disable_reasons,
    build=build,
    api_version=MONOKERNEL_API_VERSION,
    config_disable_reasons=config_disable_reasons,
)
