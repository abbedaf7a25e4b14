"""sgl-k3-mono: Kimi-K3 decode monokernels for SGLang's --enable-amd-monokernel.

Importing this package imports neither torch nor SGLang: SGLang runs the plugin entry
point (sgl_k3_mono.plugin:register) in every process, before it parses arguments.
"""

__version__ = "0.1.0"
