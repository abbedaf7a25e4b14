"""One rank of `bench k2-tp`'s standard path on the CPU (torchrun, gloo): `standard_path`
with its all-reduces (here a gloo sum in fp32, rounded once: SGLang's custom all-reduce's
arithmetic) over rank-built k3-small shards, against the reference across the ranks.
Prints one JSON line a rank. argv: rows"""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from k2_cases import dims, make_inputs  # noqa: E402
from sgl_k3_mono.k2.bench import standard_path  # noqa: E402
from sgl_k3_mono.k2.reference import all_gather_exchange, k2_from_ranks  # noqa: E402
from sgl_k3_mono.k2.synthetic import random_k2_rank_weights  # noqa: E402
from sgl_k3_mono.numerics import measure  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
rows = int(sys.argv[1])
d = dims("k3-small")
rw = random_k2_rank_weights(d, fmt="bf16", device="cpu", rank=rank, tp=world, seed=3)
attn, bank, prefix = make_inputs(d, rows, seed=4, nvb=2, nb=3, with_prefix=True, device="cpu")
al = attn.shape[1] // world
mine = attn[:, rank * al:(rank + 1) * al].contiguous()
calls = []


def reduce(t):
    calls.append(tuple(t.shape))
    f = t.float()
    dist.all_reduce(f)
    t.copy_(f)


out = torch.full((rows, d.hidden), float("nan"), dtype=torch.bfloat16)
standard_path(rw, top_k=d.top_k, reduce=reduce)(mine, bank, 2, prefix, out)
ref = k2_from_ranks([mine], [rw], bank=bank, nvb=2, prefix=prefix, isa="sm_90", exchange=all_gather_exchange())
every = [torch.empty_like(out) for _ in range(world)]
dist.all_gather(every, out)
m = measure(out.float(), ref.out.float())
print(json.dumps({"rank": rank, "reduces": calls, "ranks_equal": all(torch.equal(every[0], e) for e in every),
                  **{k: float(m[k]) for k in ("max_abs", "rel", "cosine")}}), flush=True)
dist.destroy_process_group()
