"""The step-harness cases the GPU tests run, (shape, expert format, rows, steps): each is
judged against 2x its recorded yardstick (sgl_k3_mono/forward/yardstick.json), so each
must have one; test_step_cpu.py checks that on the CPU, before a GPU run finds out."""

from __future__ import annotations

import os

STEPS = int(os.environ.get("SGL_K3_MONO_STEP_STEPS", "64"))

TP1 = [
    # (shape, expert format, rows, steps, graph)
    ("tiny", "bf16", 3, STEPS, True),
    ("tiny", "bf16", 8, STEPS, True),
    ("real", "bf16", 4, STEPS, True),
    # MXFP4 experts: the CPU reference dequantizes every routed expert, so fewer steps
    ("real", "mxfp4", 4, min(STEPS, 16), False),
]
"""test_forward_gpu.py: one GPU."""
TP_STEPS = ("tiny", "bf16", 4, 32)
"""test_forward_tp.py: the steps at TP 2 and 4."""
TP_STALL = ("tiny", "bf16", 2, 4)
"""test_forward_tp.py: the stalled run (judged like the others until it stops)."""
TP8_STEPS = ("tiny8", "bf16", 4, 32)
TP8_STALL = ("tiny8", "bf16", 2, 4)
"""The same at TP 8: the tiny model with 8 heads (k3-tiny has 4, a head a rank at most)."""


def tp_cases(tp: int) -> tuple[tuple, tuple]:
    """(steps, stall) for a TP run of `tp` ranks."""
    return (TP8_STEPS, TP8_STALL) if tp > 4 else (TP_STEPS, TP_STALL)
