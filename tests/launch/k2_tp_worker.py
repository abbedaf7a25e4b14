"""One rank of a TP K2 run under torchrun: symmetric-memory peers, persistent launches,
the reference at the same TP, and the ranks' outputs compared. Prints one JSON line.
argv: fmt rows layers [replays] [--real]: with replays > 0, one launch captured in a CUDA
graph is replayed that many times (every rank in step: each replay's reduces wait on the
peers'), bitwise stable, and with new inputs copied in a replay equals an eager launch.
--real: each rank a real Kimi-K3 TP-8 rank's shapes (o_proj 1536 columns, 896 experts of
384, shared 768), the layer's widths TP x those (at TP 8 Kimi-K3's own): each rank builds
only its shard (`random_k2_rank_weights`) and is judged by the reference across the ranks
(`k2_from_ranks` with `all_gather_exchange`); else k3-small, built whole on every rank."""

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from k2_cases import dims, make_inputs, routing_agrees  # noqa: E402
from sgl_k3_mono.k2.host import K2Launch, K2Peers, K2Plan  # noqa: E402
from sgl_k3_mono.k2.reference import all_gather_exchange, k2_from_ranks, k2_reference  # noqa: E402
from sgl_k3_mono.k2.synthetic import rank_dims, random_k2_rank_weights, random_k2_weights  # noqa: E402
from sgl_k3_mono.numerics import measure, violations  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)  # before the process group (a group made the other way round hung here)
dist.init_process_group("nccl")
dev = torch.device("cuda", rank)
real = "--real" in sys.argv
argv = [a for a in sys.argv[1:] if a != "--real"]
fmt, rows, layers = argv[0], int(argv[1]), int(argv[2])
replays = int(argv[3]) if len(argv) > 3 else 0
if real:  # the layer's widths TP x a TP-8 rank's: every rank a real TP-8 rank's shapes
    if 8 % world:
        raise SystemExit(f"--real: TP {world} does not divide Kimi-K3's 8-way rank shapes")
    d = rank_dims(8 // world)
    rw = random_k2_rank_weights(d, fmt=fmt, device=dev, rank=rank, tp=world, seed=1)
else:
    d = dims("k3-small")
    w = random_k2_weights(d, fmt=fmt, device=dev, seed=1)  # same seed: the same layer on every rank
    rw = w.shard(rank, world)
attn, bank, prefix = make_inputs(d, rows, seed=2, nvb=2, nb=3, with_prefix=True, device=dev)
al = attn.shape[1] // world
plan = K2Plan.for_weights(rw, rows, isa="sm_90", bank_rows=3,
                          grid=torch.cuda.get_device_properties(dev).multi_processor_count, tp=world)
peers = K2Peers.symmetric(plan, dist.group.WORLD.group_name, dev)
launch = K2Launch.build(plan, dev, rank=rank, peers=peers, deadline_s=float(os.environ.get("DEADLINE_S", "20")))
launch.errors.watch()
mine = attn[:, rank * al:(rank + 1) * al].contiguous()
out = torch.full((rows, d.hidden), float("nan"), dtype=torch.bfloat16, device=dev)
# compiled on every rank before the first launch: a real-shape compile can outlast the deadline
# of a peer already waiting inside its launch
launch.compile(rw, mine, bank, 2, prefix, out)
dist.barrier()
first = None
stable = True
for layer in range(layers):  # consecutive launches walk the epochs through both parity slots
    launch(rw, mine, bank, 2, prefix, out, layer=layer)
    torch.cuda.synchronize()
    if layer == 0:  # compiled and warm: the stall test times the failure from here
        print(f"LOOP-START {time.time():.3f}", flush=True)
    first = out.clone() if first is None else first
    stable &= bool(torch.equal(out, first))
if real:  # each rank holds only its shard: the partials exchanged as the launch's reduces do
    ref = k2_from_ranks([mine], [rw], bank=bank, nvb=2, prefix=prefix, isa="sm_90", exchange=all_gather_exchange())
else:
    ref = k2_reference(attn, w, tp=world, bank=bank, nvb=2, prefix=prefix, isa="sm_90")
gathered = [torch.empty_like(out) for _ in range(world)]
dist.all_gather(gathered, out)
m = measure(out.float().cpu(), ref.out.float().cpu())
record = {"rank": rank, "hidden": m, "violations": violations("k2.hidden", m), "stable": stable,
          "ranks_bitwise_equal": all(torch.equal(gathered[0], g) for g in gathered),
          "routing_equal": routing_agrees(launch.scratch.ids.long().cpu(), ref, rw), "real": real,
          "rank_shapes": {"o_proj": list(rw.o_proj.shape), "experts": rw.moe.experts.num_experts,
                          "inter": rw.moe.experts.inter}}
if replays:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch(rw, mine, bank, 2, prefix, out, layer=0)
    g.replay()
    torch.cuda.synchronize()
    first = out.clone()
    same = 0
    for _ in range(replays):
        g.replay()
        same += int(torch.equal(out, first))  # every rank replays all of them: the peers wait on each other
    eager = torch.empty_like(out)
    like_eager = True
    for seed in range(3):  # the same new inputs on every rank (each takes its own attention columns)
        a2, b2, p2 = make_inputs(d, rows, seed=50 + seed, nvb=2, nb=3, with_prefix=True, device=dev)
        mine.copy_(a2[:, rank * al:(rank + 1) * al]), bank.copy_(b2), prefix.copy_(p2)
        g.replay()
        launch(rw, mine, bank, 2, prefix, eager, layer=0)
        torch.cuda.synchronize()
        like_eager &= bool(torch.equal(out, eager))
    record.update(replays=replays, replays_bitwise_stable=same, replay_equals_eager=like_eager)
print(json.dumps(record), flush=True)
dist.destroy_process_group()
