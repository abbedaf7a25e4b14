"""One rank of the step harness at TP 2 (started as a plain process by test_forward_tp.py):
`compare.compare` at TP `WORLD_SIZE`, then every rank's logits gathered and checked
bitwise equal. Prints `LOOP-START <t>` once warm, then one JSON line.
argv: shape fmt rows steps graph(0/1). STALL_AFTER_WARM: see start()."""

import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from sgl_k3_mono.forward import compare, harness, yardstick  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)  # before the process group
dist.init_process_group("nccl")
name, fmt, rows, steps, graph = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"


def start():
    """Warm: arm the fault injection now (STALL_AFTER_WARM -> SGL_K3_MONO_STALL, read at each
    launch), so the stall lands in a served step and not in the build's warm-up."""
    if os.environ.get("STALL_AFTER_WARM"):
        os.environ["SGL_K3_MONO_STALL"] = os.environ["STALL_AFTER_WARM"]
    print(f"LOOP-START {time.time():.3f}", flush=True)


torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
bounds = yardstick.bounds_for(name, fmt, rows, steps)
c = compare.compare(harness.shape(name, expert_format=fmt), rows=rows, steps=steps, graph=graph,
                    device=f"cuda:{rank}", tp=world, rank=rank, group=dist.group.WORLD, bounds=bounds,
                    deadline_s=float(os.environ.get("DEADLINE_S", "20")),
                    on_start=start)
mine = torch.stack(c.logits).to(f"cuda:{rank}")
every = [torch.empty_like(mine) for _ in range(world)]
dist.all_gather(every, mine)
print(json.dumps({"rank": rank, **c.summary(), "violations": compare.violations(c, bounds), "bounds": bounds.__dict__,
                  "ranks_bitwise_equal": all(torch.equal(every[0], e) for e in every)}, default=str), flush=True)
dist.destroy_process_group()
