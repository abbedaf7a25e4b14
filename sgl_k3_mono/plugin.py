"""The `sglang.srt.plugins` entry point.

SGLang's `load_plugins()` imports and calls `register` in every process (server,
scheduler, detokenizer, ...) before it parses arguments. Importing this module must
therefore stay cheap: no torch, no SGLang at import; `register` imports only SGLang's
registry module, and the spec itself is imported lazily by SGLang's `find_spec` when a
server with `--enable-amd-monokernel` looks for it.
"""

from __future__ import annotations

ARCHITECTURES = ("KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM")
"""Every Kimi-K3 architecture SGLang 0.5.23 serves (kimi_k3.py's EntryClass)."""

SPEC_PATH = "sgl_k3_mono.spec:SPEC"
"""Where SGLang's find_spec imports the MonoSpec from."""


def register() -> None:
    """Register the Kimi-K3 monokernel spec under SGLang's AMD monokernel backend.

    The backend is named "amd" for every ISA: SGLang has one monokernel registry
    (--enable-amd-monokernel) and the spec's `devices` say which ISAs it serves.
    """
    from sglang.kernels.plugin_kernels.amd.spec import BACKEND, register as _register

    for architecture in ARCHITECTURES:
        _register(backend=BACKEND, architecture=architecture, path=SPEC_PATH)
