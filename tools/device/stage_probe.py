"""Where a program's time goes inside K2's front and latent_up, with and without the staged
tiles (SMF / SMU): the launch's phase trace plus its in-phase stamps (slots 10-15, 25), real
TP-8 rank shapes, MXFP4, 1 row. Median over programs and 20 launches, us."""
import statistics
import sys

import torch

sys.path.insert(0, ".")
from sgl_k3_mono.k2.host import K2Launch, K2Plan  # noqa: E402
from sgl_k3_mono.k2.synthetic import random_k2_weights, tp8_rank_dims  # noqa: E402
from sgl_k3_mono.k2.triton.kernel import TRACE_SLOTS  # noqa: E402

sys.path.insert(0, "tests/launch")
from k2_cases import make_inputs  # noqa: E402

d = tp8_rank_dims()
w = random_k2_weights(d, fmt="mxfp4", device="cuda", seed=3).shard(0, 1)
attn, bank, prefix = make_inputs(d, 1, seed=4, nvb=2, nb=3, with_prefix=True, device="cuda")
grid = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.empty(1, d.hidden, dtype=torch.bfloat16, device="cuda")
SPANS = {  # name: (from slot, to slot)
    "front: entry -> staged waited": (2, 13), "front: staged dot": (13, 14), "front: rest of tile 1": (14, 15),
    "front: entry -> tile 1 done": (2, 15), "front: tile 1 done -> arrive": (15, 18),
    "latent_up: entry -> norm done": (8, 10), "latent_up: norm -> staged waited": (10, 11),
    "latent_up: staged dot": (11, 12), "latent_up: norm -> tile 1 done": (10, 25), "latent_up: tile 1 -> exit": (25, 9),
}
for block in sys.argv[1:] or [""]:
    launch = K2Launch.build(K2Plan.for_weights(w, 1, isa="sm_90", bank_rows=3, grid=grid), "cuda")
    over = {k: int(v) for k, v in (kv.split("=") for kv in block.split(",") if kv)}
    if over:
        launch.set_block(**over)
    launch.trace = torch.full((grid, TRACE_SLOTS.value), -1, dtype=torch.int64, device="cuda")
    spans = {k: [] for k in SPANS}
    for i in range(25):
        launch.trace.fill_(-1)
        launch(w, attn, bank, 2, prefix, out)
        torch.cuda.synchronize()
        t = launch.trace.cpu().double()
        if i < 5:
            continue
        for k, (a, b) in SPANS.items():
            ok = (t[:, a] >= 0) & (t[:, b] >= 0)
            if bool(ok.any()):
                spans[k].append(float(((t[ok, b] - t[ok, a]) / 1e3).median()))
    print(f"STAGEPROBE block {block or 'default'}: " + "; ".join(
        f"{k} {statistics.median(v):.2f}" for k, v in spans.items() if v))
