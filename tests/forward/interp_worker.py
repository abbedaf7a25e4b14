"""Runs `compare.compare` on the tiny harness model with the Triton launches under the CPU
interpreter (phase by phase) and prints its summary and violations as one JSON line
(started by test_step_cpu.py with TRITON_INTERPRET=1). argv: rows steps."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.triton_interp import patch  # noqa: E402

patch()

from sgl_k3_mono.forward import compare, harness, yardstick  # noqa: E402

rows, steps = int(sys.argv[1]), int(sys.argv[2])
bounds = yardstick.bounds_for("tiny", "bf16", rows, steps)
# every layer's output handed to a draft as well (DSpark / DFlash inputs, `step.Capture`)
c = compare.compare(harness.shape("tiny"), rows=rows, steps=steps, graph=False, device="cpu", isa="sm_90",
                    impl="triton-phased", bounds=bounds, capture=(0, 1, 2, 3))
print(json.dumps({**c.summary(), "violations": compare.violations(c, bounds)}, default=str), flush=True)
