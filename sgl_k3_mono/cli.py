"""The `sgl-k3-mono` console script: one subcommand a module, imported on demand so
`sgl-k3-mono --help` stays fast."""

from __future__ import annotations

import importlib
import sys
from typing import Optional

COMMANDS = {
    "check": ("sgl_k3_mono.check", "would --enable-amd-monokernel serve this setup (no GPU needed)"),
    "make-checkpoint": ("sgl_k3_mono.checkpoint", "write a random-weight Kimi-K3-shaped HF checkpoint"),
    "bench": ("sgl_k3_mono.bench", "time a launch against a standard-path composition and the byte floor (GPU)"),
    "compile-check": ("sgl_k3_mono.compile_check",
                      "compile the launch variants (--every: all shipped) for sm_90 and gfx950 on the CPU, check the ISA"),
    "aot": ("sgl_k3_mono.aot", "compile the gfx950 FlyDSL launches on this CPU into a FlyDSL disk cache for the GPU job"),
    "drift": ("sgl_k3_mono.drift", "compare the SGLang functions the launches reproduce with their digests"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: sgl-k3-mono <command> [args]", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name == "--version":
        from sgl_k3_mono import __version__

        print(__version__)
        return 0
    if name not in COMMANDS:
        print(f"sgl-k3-mono: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
