"""`sgl-k3-mono bench <launch>`: benchmarks are scripts, one per launch and one for the
whole step (GPU only)."""

from __future__ import annotations

import importlib
from typing import Optional

LAUNCHES = {"k2": "sgl_k3_mono.k2.bench", "k1": "sgl_k3_mono.k1.bench", "step": "sgl_k3_mono.forward.bench",
            "k2-tp": "sgl_k3_mono.k2.bench_tp"}


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(argv or [])
    if not argv or argv[0] not in LAUNCHES:
        print(f"usage: sgl-k3-mono bench {{{','.join(LAUNCHES)}}} [args]")
        return 2
    return int(importlib.import_module(LAUNCHES[argv[0]]).main(argv[1:]) or 0)
