"""One rank of the K2 reference across processes (torchrun, gloo on the CPU): every rank
holds only its own shard and exchanges partials (`k2.reference.all_gather_exchange`), as
the real-shape TP run does on GPUs. Prints one JSON line a rank: whether its result is
bitwise the one-process reference's (every rank emulated here).
argv: config fmt rows"""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "launch"), str(HERE.parents[1])]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from k2_cases import dims, make_inputs  # noqa: E402
from sgl_k3_mono.k2.reference import all_gather_exchange, k2_from_ranks, k2_reference  # noqa: E402
from sgl_k3_mono.k2.synthetic import random_k2_rank_weights, random_k2_weights  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
config, fmt, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = dims(config)
attn, bank, prefix = make_inputs(d, rows, seed=2, nvb=2, nb=3, with_prefix=True, device="cpu")
al = attn.shape[1] // world
mine = attn[:, rank * al:(rank + 1) * al]
fields = ("out", "attn_partials", "attn_reduced", "prefix", "h2")
moe_fields = ("router_logits", "topk_ids", "topk_weights", "shared_partials", "latent_partials", "latent")


def same(a, b) -> dict:
    got = {f: bool(torch.equal(getattr(a, f), getattr(b, f))) for f in fields}
    got.update({f"moe.{f}": bool(torch.equal(getattr(a.moe, f), getattr(b.moe, f))) for f in moe_fields})
    return got


# 1. shards of one unsharded layer: exchanged across processes against every rank emulated here
w = random_k2_weights(d, fmt=fmt, device="cpu", seed=1)
across = k2_from_ranks([mine], [w.shard(rank, world)], bank=bank, nvb=2, prefix=prefix, isa="sm_90",
                       exchange=all_gather_exchange())
here = k2_reference(attn, w, tp=world, bank=bank, nvb=2, prefix=prefix, isa="sm_90")
# 2. each rank building only its own shard (the real-shape run's weights): against all of them built here
ranks = [random_k2_rank_weights(d, fmt=fmt, device="cpu", rank=r, tp=world, seed=5) for r in range(world)]
own = random_k2_rank_weights(d, fmt=fmt, device="cpu", rank=rank, tp=world, seed=5)
across_own = k2_from_ranks([mine], [own], bank=bank, nvb=2, prefix=prefix, isa="sm_90",
                           exchange=all_gather_exchange())
here_own = k2_from_ranks([attn[:, r * al:(r + 1) * al] for r in range(world)], ranks, bank=bank, nvb=2,
                         prefix=prefix, isa="sm_90")
gathered = [torch.empty_like(across_own.out) for _ in range(world)]
dist.all_gather(gathered, across_own.out)
print(json.dumps({"rank": rank, "sharded": same(across, here), "rank_built": same(across_own, here_own),
                  "ranks_equal": all(torch.equal(gathered[0], g) for g in gathered),
                  "finite": bool(torch.isfinite(across_own.out.float()).all()),
                  "scale": float(across_own.out.float().abs().max())}), flush=True)
dist.destroy_process_group()
