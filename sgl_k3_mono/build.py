"""`spec.build`: turns the loaded model into the object SGLang routes served steps to.

Not in this version: the launches and the step forward land with the forward issue.
Until then `build` refuses with one error that says what is missing; SGLang raises it
from install_monokernel_forward and the server does not start (no silent fallback).
"""

from __future__ import annotations

from typing import Any

from sgl_k3_mono import __version__

MISSING = (
    f"sgl-k3-mono {__version__} cannot build the Kimi-K3 monokernels yet: the decode-step "
    "forward (K1 and K2 launches and their step routing) is not in this version. "
    "Start the server without --enable-amd-monokernel, or install a version whose "
    "`sgl-k3-mono check` says it builds."
)


class NotBuildable(RuntimeError):
    """The spec accepted the setup but this version has no forward to build."""


def build(model: Any, hf_config: Any, ctx: Any) -> Any:
    raise NotBuildable(MISSING)
