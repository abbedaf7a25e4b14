"""`spec.build`: turns the loaded model into the object SGLang routes served steps to.

A thin hook: the build and the step forward live in `sgl_k3_mono/forward/` (imported
here lazily, so importing the spec stays as light as it was). Every refusal is raised
from SGLang's install_monokernel_forward and the server does not start (no silent
fallback).
"""

from __future__ import annotations

from typing import Any

STATUS = (
    "the step forward (K1 and K2 launches per layer, SGLang's MLA, layer 0 and logits) is built at "
    "startup; it has not yet run inside a SGLang server on any GPU (docs/evidence/step-sm90.md says what "
    "has run where)"
)
"""What `sgl-k3-mono check` notes under a SERVE verdict."""


def build(model: Any, hf_config: Any, ctx: Any) -> Any:
    from sgl_k3_mono.forward.build import build as _build

    return _build(model, hf_config, ctx)
