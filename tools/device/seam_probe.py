"""Where the split seam's time goes inside K2 (phase 1): the launch's trace plus the seam's
own stamps (frame.TRACE_SEAM: its start, step A, A's row wait, step C, C's row wait; step D
ends at the program's barrier arrival). With SPASS=2 in a block the seam runs twice in the
launch, one copy of its code: the second pass's links are primed (A', C', ...). `bench k2`'s
launch and inputs (a TP-8 rank, MXFP4, nvb 4 of 8 bank rows). Over the seam's programs, median of 20 launches, us.

    python3 tools/device/seam_probe.py [ROWS,...] [BLOCK ...]
"""
import statistics
import sys

import torch

sys.path.insert(0, ".")
from sgl_k3_mono.k2.synthetic import tp8_rank_dims  # noqa: E402
from sgl_k3_mono.k2 import bench  # noqa: E402
from sgl_k3_mono.k2.triton.frame import TRACE_ARRIVE, TRACE_SEAM, TRACE_SLOTS  # noqa: E402

S, A = TRACE_SEAM.value, TRACE_ARRIVE.value
P = S + 15  # the second pass's stamps (SPASS=2: the seam's code run twice in one launch)
ONE = {  # name: (from slot, to slot), over the seam's programs
    "o_proj barrier (arrive -> seam entry)": (A + 0, 1), "entry -> seam start": (1, S),
    "A": (S, S + 1), "A wait": (S + 1, S + 2), "C": (S + 2, S + 3), "C wait": (S + 3, S + 4),
    "D": (S + 4, A + 1), "seam barrier (arrive -> front entry)": (A + 1, 2),
}
TWO = {k: ((S + 4, P) if k == "D" else v) for k, v in ONE.items() if not k.startswith("seam barrier")}
TWO.update({"A'": (P, P + 1), "A' wait": (P + 1, P + 2), "C'": (P + 2, P + 3), "C' wait": (P + 3, P + 4),
            "D'": (P + 4, A + 1), "seam barrier (arrive -> front entry)": ONE["seam barrier (arrive -> front entry)"]})

rows_list = [int(r) for r in (sys.argv[1] if len(sys.argv) > 1 else "1,2,8").split(",")]
blocks = sys.argv[2:] or [""]
d = tp8_rank_dims()
rw = bench._rank_weights(d, "mxfp4")
grid = torch.cuda.get_device_properties(0).multi_processor_count
for m in rows_list:
    for block in blocks:
        over = {k: int(v) for k, v in (kv.split("=") for kv in block.split(",") if kv)}
        launch, (attn, bank, nvb, prefix, out) = bench._launch(rw, d, m, over, grid)
        launch.trace = torch.full((grid, TRACE_SLOTS.value), -1, dtype=torch.int64, device="cuda")
        LINKS = TWO if over.get("SPASS", 1) == 2 else ONE
        med = {k: [] for k in LINKS}
        worst = {k: [] for k in LINKS}
        phase, skew = [], []
        for i in range(25):
            launch.trace.fill_(-1)
            launch(rw, attn, bank, nvb, prefix, out)
            torch.cuda.synchronize()
            t = launch.trace.cpu().double()
            if i < 5:
                continue
            seam = t[:, S] >= 0  # the seam's programs
            for k, (a, b) in LINKS.items():
                span = (t[seam, b] - t[seam, a]) / 1e3
                med[k].append(float(span.median()))
                worst[k].append(float(span.max()))
            phase.append(float((t[:, 2].median() - t[:, 1].median()) / 1e3))
            skew.append(float((t[:, 1].max() - t[:, 1].min()) / 1e3))
        print(f"SEAMPROBE M={m} block={block or 'default'} programs={int(seam.sum())} "
              f"phase {statistics.median(phase):.2f} us, entry spread {statistics.median(skew):.2f}; "
              + "; ".join(f"{k} {statistics.median(med[k]):.2f}/{statistics.median(worst[k]):.2f}" for k in LINKS),
              flush=True)
        launch.trace = None
