"""s56 probe: K2's WARM builds (the late phases' loops run once, dry, by the programs the seam
leaves idle) against the same tree's default on one bf16 1-row TP-8 rank case and the same
weights: each against the reference (poisoned output, three launches in a row, so the dry
passes read the scratch earlier launches left) and bitwise against the default.
Run from the probe tree (.ab-probe) with main's tests/launch on the path. Arguments: the WARM blocks
to check (call 2 ran it with none: WARM=1 and WARM=2)."""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "launch"))
import torch  # noqa: E402
from k2_cases import Case, case_dims, run_case  # noqa: E402

from sgl_k3_mono.k2.synthetic import random_k2_weights  # noqa: E402

for rows, nvb, seed in ((1, 1, 66), (1, 0, 67)):
    base = Case("kimi-k3-tp8-rank", rows, "bf16", "sm_90", nvb=nvb, seed=seed)
    w = random_k2_weights(case_dims(base), fmt="bf16", device="cuda", seed=seed)
    ref = None
    for tiles in [""] + (sys.argv[1:] or ["WARM=1", "WARM=2"]):
        got = run_case(dataclasses.replace(base, tiles=tiles), "cuda", phase=None, weights=w, repeat=3, keep_out=True)
        out = got.pop("out")
        if ref is None:
            ref = out
        print(f"WARMCHK M={rows} nvb={nvb} tiles={tiles!r}: hidden={got['hidden']} violations={got['violations']} "
              f"routing_equal={got['routing_equal']} finite={got['finite']} bitwise_vs_default={torch.equal(out, ref)}",
              flush=True)
